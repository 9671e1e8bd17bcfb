// SPDX-License-Identifier: Apache-2.0
// Fast GEMM and batched GEMM.
//   Small M with W stored [N, K] (trans_b; the decode step): the GEMV of the ISA table
//   (isa_gemv.inc), threads over chunks of N rows, every weight byte read once and decoded once
//   for all M rows. f32 weights take it for M <= kGemvF32MaxM (below the fixed per-call cost of a
//   library GEMM), weights of f16/bf16/q8_0/q4_0/q4_1 for M <= kGemvMaxM.
//   M <= kInt8MaxM with q8_0/q4_0/q4_1/Q4_K/Q6_K weights when the caller allows int8 activations
//   (decode steps, one row per sequence): the VNNI GEMV of gemv_int8.h (x rounded to int8 blocks,
//   integer dot products, as llama.cpp decodes), every row computed as it would be alone.
//   ops::gemm_group (several weights, the same activations) with int8 activations: one pass of
//   that GEMV, the rows rounded to int8 once and the rows of all the weights split over one team.
//   Other f32 products: the f32 provider (gemm_f32.h).
//   Other weight dtypes (prefill, and every M for the K-quants Q4_K/Q6_K, which have no fused
//   GEMV): each thread dequantizes a tile of W rows into its own f32
//   scratch sized to stay in L2 (kTileBytes), then runs a single-threaded f32 GEMM of all of A
//   against that tile.
// Thread counts follow parallel_threads() (parallel.h): small products stay on the calling thread.
#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "dequant_k.h"
#include "fast_ops.h"
#include "gemm_f32.h"
#include "gemv_int8.h"
#include "isa.h"
#include "kernels/parallel.h"
#include "tandem/core/backend.h"

namespace tandem::cpu::fast {
namespace {

constexpr int kGemvMaxM = 8;     // weight dtypes other than f32: the fused GEMV up to this M
constexpr int kGemvF32MaxM = 4;  // f32 W [N, K]: the GEMV up to this M
// int8 activations (decode steps) up to this M: above it the f32 GEMM of the dequantized tiles is
// faster on AVX-512 (SmolLM2 batched decode, 2 threads: int8 +55% at 4 sequences, +38% at 16, -17%
// at 32).
constexpr int kInt8MaxM = 16;
constexpr int64_t kTileBytes = 1 << 20;  // f32 scratch per thread for the dequantized W tile
constexpr int64_t kStaticGemvBytes = int64_t{4} << 20;  // int8 GEMV: static split below this

// Rows per chunk when n rows of W go to t threads in chunks: several per thread, each at least 16
// rows, so that a thread delayed by another process does not hold up the rest.
int64_t row_chunk(int64_t n, int t) { return std::max<int64_t>(16, (n + 4 * t - 1) / (4 * t)); }

// Calls fn(n0, n1) for the row_chunk ranges of the rows [0, n) of W over t threads.
template <typename Fn>
void over_row_ranges(int64_t n, int t, Fn&& fn) {
  if (t == 1) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t chunk = row_chunk(n, t);
  const int64_t chunks = (n + chunk - 1) / chunk;
  parallel_for(chunks, t, [&](int64_t ci, int) {
    const int64_t n0 = ci * chunk;
    fn(n0, std::min(n, n0 + chunk));
  });
}

// y[M, N] = alpha * x W^T + beta * y through the ISA GEMV (m <= kGemvMaxM); W rows `rb` bytes
// apart.
void gemv_path(bool ta, int64_t m, int64_t n, int64_t k, float alpha, const float* a, DType wt,
               const uint8_t* w, int64_t rb, float beta, float* c, int threads) {
  const float* x = a;
  std::vector<float> xt;
  if (ta && m > 1) {  // a is [K, M]: make the M rows contiguous (for m = 1 both layouts agree)
    xt.resize(static_cast<size_t>(m * k));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t l = 0; l < k; ++l) xt[i * k + l] = a[l * m + i];
    x = xt.data();
  }
  const IsaKernels& isa_k = isa();
  const int t = parallel_threads(m * n * k, n * rb + 4 * m * (k + n), threads);
  over_row_ranges(n, t, [&](int64_t n0, int64_t n1) {
    isa_k.gemv(wt, static_cast<int>(m), k, x, k, w, rb, n0, n1, c, n, alpha, beta);
  });
}

// One weight of an int8 GEMV group: W [n, K] of dtype wt, rows rb bytes apart, into y [m, n].
struct Int8Part {
  DType wt;
  const uint8_t* w;
  int64_t rb, n;
  float* y;
};

// The rows [n0, n1) of one part against the M quantized rows.
void int8_rows(const Int8Part& p, const QuantizedRow* qx, int64_t m, int64_t n0, int64_t n1,
               float alpha, float beta) {
  if (n0 >= n1) return;
  if (m == 1) {
    gemv_int8(p.wt, qx[0], p.w, p.rb, n0, n1, p.y, alpha, beta);
  } else {
    gemv_int8_rows(p.wt, qx, static_cast<int>(m), p.w, p.rb, n0, n1, p.y, p.n, alpha, beta);
  }
}

// Where `bytes` into the parts' rows laid end to end falls: (part, row), the row rounded to a
// multiple of 4 (the int8 kernel's pass); {parts.size(), 0} at the end.
std::pair<size_t, int64_t> byte_point(std::span<const Int8Part> parts, int64_t bytes) {
  for (size_t i = 0; i < parts.size(); ++i) {
    const int64_t size = parts[i].n * parts[i].rb;
    if (bytes < size) {
      const int64_t row = (bytes / parts[i].rb + 2) / 4 * 4;
      return row < parts[i].n ? std::pair{i, row} : std::pair{i + 1, int64_t{0}};
    }
    bytes -= size;
  }
  return {parts.size(), 0};
}

// y_i[M, n_i] = alpha * x W_i^T + beta * y_i for every part through the int8 GEMV (gemv_int8.h),
// x [M, K] row-major: each row rounded to int8 blocks once, and the rows of all the parts split
// over one team: under kStaticGemvBytes of weights in all (a decode step's layer GEMVs) one
// contiguous range of the parts' rows laid end to end per thread, equal in bytes, each streamed
// with its own prefetch (measured 20-30% faster at 2 threads than chunks for a layer's int8 GEMV,
// tandem_bench_kernels gemv/smollm2.*.x8); above (the
// output head, a 7B layer) chunks of rows handed out one at a time. A row's result does not
// depend on the range it falls in, so grouping changes no bit of any output.
void gemv_int8_path(int64_t m, int64_t k, float alpha, const float* a,
                    std::span<const Int8Part> parts, float beta, int threads) {
  static thread_local std::vector<QuantizedRow> scratch;  // the caller's; the team reads it
  std::vector<QuantizedRow>& qx = scratch;
  if (qx.size() < static_cast<size_t>(m)) qx.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) quantize_row_q8(a + i * k, k, qx[static_cast<size_t>(i)]);
  int64_t bytes = 0, rows = 0;
  for (const Int8Part& p : parts) bytes += p.n * p.rb, rows += p.n;
  const int t = parallel_threads(m * rows * k, bytes + 4 * m * (k + rows), threads);
  if (t == 1) {
    for (const Int8Part& p : parts) int8_rows(p, qx.data(), m, 0, p.n, alpha, beta);
    return;
  }
  if (bytes < kStaticGemvBytes) {
    parallel_for_static(t, t, [&](int64_t i, int) {
      const auto [p0, r0] = byte_point(parts, bytes * i / t);
      const auto [p1, r1] = byte_point(parts, bytes * (i + 1) / t);
      for (size_t j = p0; j <= p1 && j < parts.size(); ++j) {
        int8_rows(parts[j], qx.data(), m, j == p0 ? r0 : 0, j == p1 ? r1 : parts[j].n, alpha, beta);
      }
    });
    return;
  }
  struct Chunk {
    size_t part;
    int64_t n0, n1;
  };
  std::vector<Chunk> chunks;
  for (size_t j = 0; j < parts.size(); ++j) {
    const int64_t n = parts[j].n, chunk = row_chunk(n, t);
    for (int64_t n0 = 0; n0 < n; n0 += chunk) chunks.push_back({j, n0, std::min(n, n0 + chunk)});
  }
  parallel_for(static_cast<int64_t>(chunks.size()), t, [&](int64_t ci, int) {
    const Chunk& c = chunks[static_cast<size_t>(ci)];
    int8_rows(parts[c.part], qx.data(), m, c.n0, c.n1, alpha, beta);
  });
}

// The int8 GEMV takes the product (the caller allows int8 activations).
bool int8_gemv_applies(bool ta, int64_t m, int64_t k, DType wt) {
  return m <= kInt8MaxM && (m == 1 || !ta) && k % 32 == 0 && gemv_int8_supported(wt);
}

void gemm_weights(bool ta, int64_t m, int64_t n, int64_t k, float alpha, const float* a, DType wt,
                  const uint8_t* w, float beta, float* c, int threads, bool int8_activations) {
  const int64_t rb = dtype_row_bytes(wt, k);
  if (int8_activations && int8_gemv_applies(ta, m, k, wt)) {
    const Int8Part part{wt, w, rb, n, c};
    gemv_int8_path(m, k, alpha, a, std::span(&part, 1), beta, threads);
    return;
  }
  if (m <= kGemvMaxM && !dtype_is_k_quant(wt)) {
    gemv_path(ta, m, n, k, alpha, a, wt, w, rb, beta, c, threads);
    return;
  }
  const int64_t tile = std::clamp<int64_t>(kTileBytes / (4 * k) / 16 * 16, 16, 256);
  const int64_t tiles = (n + tile - 1) / tile;
  const IsaKernels& isa_k = isa();
  const int t = parallel_threads(m * n * k, n * rb + 4 * m * (k + n), threads);
  std::vector<std::vector<float>> scratch(team_size(tiles, t));
  parallel_for(tiles, t, [&](int64_t ti, int th) {
    std::vector<float>& wf = scratch[th];
    if (wf.empty()) wf.resize(static_cast<size_t>(tile * k));
    const int64_t n0 = ti * tile, nt = std::min(tile, n - n0);
    for (int64_t r = 0; r < nt; ++r) {
      if (dtype_is_k_quant(wt)) {
        dequantize_row_k(wt, w + (n0 + r) * rb, wf.data() + r * k, k);
      } else {
        isa_k.dequantize_row(wt, w + (n0 + r) * rb, wf.data() + r * k, k);
      }
    }
    // With one tile per thread the GEMM may use the threads left over.
    sgemm(ta, true, m, nt, k, alpha, a, ta ? m : k, wf.data(), k, beta, c + n0, n,
          tiles < t ? t : 1);
  });
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const ops::GemmParams& p) {
  const int64_t m = c.size(0), n = c.size(1), k = p.trans_a ? a.size(0) : a.size(1);
  const int threads = cpu_num_threads();
  if (b.dtype() == DType::kF32 && p.trans_b && m <= kGemvF32MaxM && k > 0) {
    gemv_path(p.trans_a, m, n, k, p.alpha, a.data<float>(), DType::kF32,
              static_cast<const uint8_t*>(b.raw_data()), 4 * k, p.beta, c.data<float>(), threads);
    return;
  }
  if (b.dtype() == DType::kF32) {
    sgemm(p.trans_a, p.trans_b, m, n, k, p.alpha, a.data<float>(), p.trans_a ? m : k,
          b.data<float>(), p.trans_b ? k : n, p.beta, c.data<float>(), n, threads);
    return;
  }
  gemm_weights(p.trans_a, m, n, k, p.alpha, a.data<float>(), b.dtype(),
               static_cast<const uint8_t*>(b.raw_data()), p.beta, c.data<float>(), threads,
               p.int8_activations && p.trans_b);
}

void gemm_group(const Tensor& a, std::span<const Tensor> bs, std::span<const Tensor> cs,
                const ops::GemmParams& p) {
  const int64_t m = cs[0].size(0), k = p.trans_a ? a.size(0) : a.size(1);
  bool int8 = p.int8_activations && p.trans_b && bs.size() > 1;
  for (size_t i = 0; i < bs.size() && int8; ++i) {
    int8 = int8_gemv_applies(p.trans_a, m, k, bs[i].dtype());
  }
  if (!int8) {
    for (size_t i = 0; i < bs.size(); ++i) gemm(a, bs[i], cs[i], p);
    return;
  }
  std::vector<Int8Part> parts;
  parts.reserve(bs.size());
  for (size_t i = 0; i < bs.size(); ++i) {
    parts.push_back({bs[i].dtype(), static_cast<const uint8_t*>(bs[i].raw_data()),
                     dtype_row_bytes(bs[i].dtype(), k), bs[i].size(0), cs[i].data<float>()});
  }
  gemv_int8_path(m, k, p.alpha, a.data<float>(), parts, p.beta, cpu_num_threads());
}

void batched_gemm(const Tensor& a, const Tensor& b, const Tensor& c, const ops::GemmParams& p) {
  const int64_t batch = c.size(0), m = c.size(1), n = c.size(2);
  const int64_t k = p.trans_a ? a.size(1) : a.size(2);
  const float *ap = a.data<float>(), *bp = b.data<float>();
  float* cp = c.data<float>();
  const int threads =
      parallel_threads(batch * m * n * k, 4 * batch * (m * k + k * n + m * n), cpu_num_threads());
  const int64_t lda = p.trans_a ? m : k, ldb = p.trans_b ? k : n;
  // Small matrices: one single-threaded GEMM per batch entry, entries spread over threads. Large
  // ones: one after the other, each on all threads.
  if (batch >= threads && m * n * k <= (int64_t{1} << 22)) {
    parallel_for(batch, threads, [&](int64_t i, int) {
      sgemm(p.trans_a, p.trans_b, m, n, k, p.alpha, ap + i * m * k, lda, bp + i * k * n, ldb,
            p.beta, cp + i * m * n, n, 1);
    });
    return;
  }
  for (int64_t i = 0; i < batch; ++i)
    sgemm(p.trans_a, p.trans_b, m, n, k, p.alpha, ap + i * m * k, lda, bp + i * k * n, ldb, p.beta,
          cp + i * m * n, n, threads);
}

}  // namespace tandem::cpu::fast
