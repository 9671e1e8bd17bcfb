// SPDX-License-Identifier: Apache-2.0
// Fast GEMM and batched GEMM.
//   Small M with W stored [N, K] (trans_b; the decode step): the GEMV of the ISA table
//   (isa_gemv.inc), threads over chunks of N rows, every weight byte read once and decoded once
//   for all M rows. f32 weights take it for M <= kGemvF32MaxM (below the fixed per-call cost of a
//   library GEMM), weights of f16/bf16/q8_0/q4_0/q4_1 for M <= kGemvMaxM.
//   M <= kInt8MaxM with q8_0/q4_0/q4_1/Q4_K/Q6_K weights when the caller allows int8 activations
//   (decode steps, one row per sequence): the VNNI GEMV of gemv_int8.h (x rounded to int8 blocks,
//   integer dot products, as llama.cpp decodes), every row computed as it would be alone.
//   Other f32 products: the f32 provider (gemm_f32.h).
//   Other weight dtypes (prefill, and every M for the K-quants Q4_K/Q6_K, which have no fused
//   GEMV): each thread dequantizes a tile of W rows into its own f32
//   scratch sized to stay in L2 (kTileBytes), then runs a single-threaded f32 GEMM of all of A
//   against that tile.
// Thread counts follow parallel_threads() (parallel.h): small products stay on the calling thread.
#include <algorithm>
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

// Calls fn(n0, n1) for ranges of the rows [0, n) of W over t threads. Chunks of rows, several per
// thread, each at least 16 rows, so that a thread delayed by another process does not hold up the
// rest; with `one_range_each`, one contiguous range per thread instead (multiples of 4 rows, the
// int8 kernel's pass), each streamed with its own prefetch and one meeting of the team: measured
// 20-30% faster at 2 threads for a layer's int8 GEMV (tandem_bench_kernels gemv/smollm2.*.x8).
template <typename Fn>
void over_row_ranges(int64_t n, int t, bool one_range_each, Fn&& fn) {
  if (t == 1) {
    fn(int64_t{0}, n);
    return;
  }
  if (one_range_each) {
    const int64_t quads = (n + 3) / 4;
    parallel_for_static(t, t, [&](int64_t i, int) {
      fn(std::min(n, quads * i / t * 4), std::min(n, quads * (i + 1) / t * 4));
    });
    return;
  }
  const int64_t chunk = std::max<int64_t>(16, (n + 4 * t - 1) / (4 * t));
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
  over_row_ranges(n, t, false, [&](int64_t n0, int64_t n1) {
    isa_k.gemv(wt, static_cast<int>(m), k, x, k, w, rb, n0, n1, c, n, alpha, beta);
  });
}

// y[M, N] through the int8 GEMV (gemv_int8.h), a [M, K] row-major: each row rounded to int8
// blocks once, W rows over threads (a layer's GEMV, under kStaticGemvBytes of weights, as one
// range per thread; a large one, the output head, in chunks).
void gemv_int8_path(int64_t m, int64_t n, int64_t k, float alpha, const float* a, DType wt,
                    const uint8_t* w, int64_t rb, float beta, float* c, int threads) {
  static thread_local std::vector<QuantizedRow> scratch;  // the caller's; the team reads it
  std::vector<QuantizedRow>& qx = scratch;
  if (qx.size() < static_cast<size_t>(m)) qx.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) quantize_row_q8(a + i * k, k, qx[static_cast<size_t>(i)]);
  const int t = parallel_threads(m * n * k, n * rb + 4 * m * (k + n), threads);
  over_row_ranges(n, t, n * rb < kStaticGemvBytes, [&](int64_t n0, int64_t n1) {
    if (m == 1) {
      gemv_int8(wt, qx[0], w, rb, n0, n1, c, alpha, beta);
    } else {
      gemv_int8_rows(wt, qx.data(), static_cast<int>(m), w, rb, n0, n1, c, n, alpha, beta);
    }
  });
}

void gemm_weights(bool ta, int64_t m, int64_t n, int64_t k, float alpha, const float* a, DType wt,
                  const uint8_t* w, float beta, float* c, int threads, bool int8_activations) {
  const int64_t rb = dtype_row_bytes(wt, k);
  if (int8_activations && m <= kInt8MaxM && (m == 1 || !ta) && k % 32 == 0 &&
      gemv_int8_supported(wt)) {
    gemv_int8_path(m, n, k, alpha, a, wt, w, rb, beta, c, threads);
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
