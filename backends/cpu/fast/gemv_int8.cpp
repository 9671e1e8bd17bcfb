// SPDX-License-Identifier: Apache-2.0
// AVX-512 VNNI GEMV over int8-rounded activations (see gemv_int8.h) for q8_0, q4_0 and q4_1
// weights (the K-quants: gemv_int8_kquant.cpp). Only the functions marked TANDEM_VNNI_TARGET
// (vnni_target.h) are compiled for AVX-512.
#include "gemv_int8.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cpu_info.h"
#include "tandem/core/error.h"
#include "vnni_target.h"

namespace tandem::cpu::fast {

bool gemv_int8_supported(DType weight) {
#if defined(__x86_64__)
  static const bool host = [] {
    const CpuInfo& c = cpu_info();
    const char* env = std::getenv("TANDEM_CPU_ISA");
    const std::string want = env ? env : "";
    const char* off = std::getenv("TANDEM_INT8_GEMV");  // "0": keep the f32 GEMV (A/B runs)
    if (off != nullptr && std::string(off) == "0") return false;
    return (want.empty() || want == "avx512") && c.avx512f && c.avx512bw && c.avx512vnni && c.fma &&
           c.f16c;
  }();
  return host && (weight == DType::kQ8_0 || weight == DType::kQ4_0 || weight == DType::kQ4_1 ||
                  weight == DType::kQ4_K || weight == DType::kQ6_K);
#else
  (void)weight;
  return false;
#endif
}

#if defined(__x86_64__)
namespace {

// Block formats: bytes per block, where the codes start, how codes become unsigned bytes and what
// the per-block offset term o_w is (o_w * s_x is added to d_w * d_x * sum(c * q)).
enum class Fmt { kQ8_0, kQ4_0, kQ4_1 };
template <Fmt F>
constexpr int64_t kBlockBytes = F == Fmt::kQ8_0 ? 34 : (F == Fmt::kQ4_0 ? 18 : 20);
template <Fmt F>
constexpr int64_t kCodesAt = F == Fmt::kQ4_1 ? 4 : 2;

TANDEM_VNNI_TARGET inline float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_value(h);
}

// The unsigned codes of two blocks (b0, b1) in x order: 64 bytes.
template <Fmt F>
TANDEM_VNNI_TARGET inline __m512i codes2(const uint8_t* b0, const uint8_t* b1) {
  if constexpr (F == Fmt::kQ8_0) {
    const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
    const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2));
    const __m512i c = _mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1);
    return _mm512_xor_si512(c, _mm512_set1_epi8(static_cast<char>(0x80)));  // c + 128
  } else {
    // 16 code bytes per block: low nibbles are elements 0..15, high nibbles 16..31.
    const __m128i p0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + kCodesAt<F>));
    const __m128i p1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + kCodesAt<F>));
    const __m256i c = _mm256_inserti128_si256(_mm256_castsi128_si256(p0), p1, 1);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(c, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), m4);
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);  // lo0 lo1 hi0 hi1
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));               // lo0 hi0 lo1 hi1
  }
}

constexpr int kRows = 4;  // W rows per pass of one x row: each x vector loaded feeds all of them

// The 4-byte headers (d, m) of 16 consecutive q4_1 blocks (320 bytes): block j's is dword 5 j, so
// five loads and three dword permutes replace a gather (slow on some cores, e.g. Zen 4).
TANDEM_VNNI_TARGET inline __m512i headers16_q4_1(const uint8_t* p) {
  const __m512i r0 = _mm512_loadu_si512(p), r1 = _mm512_loadu_si512(p + 64),
                r2 = _mm512_loadu_si512(p + 128), r3 = _mm512_loadu_si512(p + 192),
                r4 = _mm512_loadu_si512(p + 256);
  // blocks 0-6: dwords 0..30 of r0:r1; 7-12: dwords 35..60, i.e. 3..28 of r2:r3; 13-15: 65..75,
  // i.e. 1, 6, 11 of r4.
  const __m512i a = _mm512_permutex2var_epi32(
      r0, _mm512_setr_epi32(0, 5, 10, 15, 20, 25, 30, 0, 0, 0, 0, 0, 0, 0, 0, 0), r1);
  const __m512i b = _mm512_permutex2var_epi32(
      r2, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 3, 8, 13, 18, 23, 28, 0, 0, 0), r3);
  const __m512i c = _mm512_permutexvar_epi32(
      _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 6, 11), r4);
  return _mm512_mask_blend_epi32(0xE000, _mm512_mask_blend_epi32(0x1F80, a, b), c);
}

// The scales d_w and offsets o_w of the gn <= 16 blocks of one W row starting at `row` (block g0):
// the 4 bytes at each block's start (d, and m for q4_1: two f16) read by a gather (q4_1 with 16
// blocks: headers16_q4_1), converted with vcvtph2ps.
template <Fmt F>
TANDEM_VNNI_TARGET inline void block_scales16(const uint8_t* row, int64_t gn, __mmask16 mask,
                                              __m512* d, __m512* o) {
  const __m512i offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(kBlockBytes<F>)));
  __m512i raw;
  if constexpr (F == Fmt::kQ4_1) {
    raw = gn == 16 ? headers16_q4_1(row)
                   : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, offsets, row, 1);
  } else {
    raw = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, offsets, row, 1);
  }
  *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw));
  if constexpr (F == Fmt::kQ4_1) {
    *o = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(raw, 16)));
  } else {
    *o = _mm512_mul_ps(*d, _mm512_set1_ps(F == Fmt::kQ4_0 ? -8.0f : -128.0f));
  }
}

// R W rows (from row n) against M activation rows: y[i * ldy + n + r]. Per 16 blocks, each W row's
// scales become d_w * d_x and the offset terms o_w * s_x (vector products). q8_0 steps over pairs
// of blocks (codes2, one vpdpbusd); q4_0 / q4_1 over four blocks, whose 16 code bytes go to the
// four 128-bit lanes of one register, the low nibbles (elements 0..15) and the high ones (16..31)
// meeting x in QuantizedRow::q4 order, so two vpdpbusd give each block's dot product in its lane.
// Each step's products take their scales from the 16 with one vpermps. Each block of codes is
// decoded once for all M x rows, each x vector loaded once for all R W rows; every (x row, W row)
// result takes the same operations in the same order whatever R and M are, so a row's output is
// the same bit for bit alone (R = kRows, M = 1) or batched (R = 1, M up to 4).
template <Fmt F, int R, int M>
TANDEM_VNNI_TARGET void tile(const QuantizedRow* xs, const uint8_t* w, int64_t rb, int64_t n,
                             float* y, int64_t ldy, float alpha, float beta) {
  constexpr int64_t kB = kBlockBytes<F>;
  constexpr bool kQ8 = F == Fmt::kQ8_0;
  constexpr int64_t kStep = kQ8 ? 2 : 4;  // blocks per step
  const int64_t blocks = xs[0].k / 32;
  alignas(64) static thread_local uint8_t zero_block[64] = {};  // pad blocks past the row's end
  const __m512i first = kQ8 ? _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0)
                            : _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i step = _mm512_set1_epi32(static_cast<int>(kStep));
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[R][M], off[R][M];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < M; ++i) acc[r][i] = _mm512_setzero_ps(), off[r][i] = _mm512_setzero_ps();
  for (int64_t g0 = 0; g0 < blocks; g0 += 16) {
    const int64_t gn = std::min<int64_t>(16, blocks - g0);
    const __mmask16 mask = static_cast<__mmask16>((1u << gn) - 1u);
    __m512 dd[R][M];
    for (int r = 0; r < R; ++r) {
      __m512 d, o;
      block_scales16<F>(w + (n + r) * rb + g0 * kB, gn, mask, &d, &o);
      for (int i = 0; i < M; ++i) {
        dd[r][i] = _mm512_mul_ps(d, _mm512_maskz_loadu_ps(mask, xs[i].d.data() + g0));
        off[r][i] = _mm512_fmadd_ps(o, _mm512_maskz_loadu_ps(mask, xs[i].s.data() + g0), off[r][i]);
      }
    }
    __m512i idx = first;
    for (int64_t g = g0; g < g0 + gn; g += kStep, idx = _mm512_add_epi32(idx, step)) {
      __m512i xa[M], xb[M];  // q8_0: two blocks of codes; q4: low and high halves of four
      for (int i = 0; i < M; ++i) {
        xa[i] = _mm512_loadu_si512((kQ8 ? xs[i].q.data() : xs[i].q4.data()) + g * 32);
        if constexpr (!kQ8) xb[i] = _mm512_loadu_si512(xs[i].q4.data() + g * 32 + 64);
      }
      for (int r = 0; r < R; ++r) {
        const uint8_t* b = w + (n + r) * rb + g * kB;
        __m512i lo, hi;
        if constexpr (kQ8) {
          lo = codes2<F>(b, g + 1 < blocks ? b + kB : zero_block);
        } else {
          const int64_t real = std::min<int64_t>(4, blocks - g);
          auto lane = [&](int j) {
            return _mm_loadu_si128(
                reinterpret_cast<const __m128i*>(j < real ? b + j * kB + kCodesAt<F> : zero_block));
          };
          __m512i c = _mm512_castsi128_si512(lane(0));
          c = _mm512_inserti32x4(c, lane(1), 1);
          c = _mm512_inserti32x4(c, lane(2), 2);
          c = _mm512_inserti32x4(c, lane(3), 3);
          lo = _mm512_and_si512(c, m4);
          hi = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
        }
        for (int i = 0; i < M; ++i) {
          __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xa[i]);
          if constexpr (!kQ8) p = _mm512_dpbusd_epi32(p, hi, xb[i]);
          acc[r][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(idx, dd[r][i]),
                                      acc[r][i]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < M; ++i) {
      float* out = y + i * ldy + n + r;
      const float v = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][i], off[r][i]));
      *out = beta == 0.0f ? alpha * v : alpha * v + beta * *out;
    }
  }
}

// Rows are short (K = 576 of q4_1 is 360 bytes), too short for the hardware prefetcher to ramp up
// on each, but a pass reads kRows consecutive rows, one contiguous range: the range about
// kAheadBytes ahead (a whole number of passes) is prefetched line by line, which keeps enough loads
// in flight to stream from DRAM. Measured (tandem_bench_kernels gemv/*.x8.stream, 1 thread, Zen 4):
// without it 14-18 GB/s, 11 on the q8_0 output head; the best distance was 4-6 passes for K = 576
// q4_1 (1440-byte passes), 2-3 for K = 1536 and the head (3840 / 2448), so about 7 KiB for all.
constexpr int64_t kAheadBytes = 7 << 10;

template <Fmt F>
TANDEM_VNNI_TARGET void gemv_fmt(const QuantizedRow& x, const uint8_t* w, int64_t rb, int64_t n0,
                                 int64_t n1, float* y, float alpha, float beta) {
  const int64_t ahead_rows =
      kRows * std::clamp<int64_t>((kAheadBytes + kRows * rb / 2) / (kRows * rb), 1, 8);
  int64_t n = n0;
  prefetch_range(w + n * rb, std::min<int64_t>(ahead_rows, n1 - n) * rb);
  for (; n + kRows <= n1; n += kRows) {
    const int64_t ahead = n + ahead_rows;
    if (ahead < n1) prefetch_range(w + ahead * rb, std::min<int64_t>(kRows, n1 - ahead) * rb);
    tile<F, kRows, 1>(&x, w, rb, n, y, 0, alpha, beta);
  }
  for (; n < n1; ++n) tile<F, 1, 1>(&x, w, rb, n, y, 0, alpha, beta);
}

// M activation rows over W rows [n0, n1): W row by row (prefetched about kAheadBytes ahead, as in
// gemv_fmt), the x rows in groups of up to 4 against each, so each W row is read from memory once.
template <Fmt F>
TANDEM_VNNI_TARGET void gemv_rows_fmt(const QuantizedRow* xs, int m, const uint8_t* w, int64_t rb,
                                      int64_t n0, int64_t n1, float* y, int64_t ldy, float alpha,
                                      float beta) {
  const int64_t ahead_rows = std::clamp<int64_t>((kAheadBytes + rb / 2) / rb, 1, 32);
  prefetch_range(w + n0 * rb, std::min<int64_t>(ahead_rows, n1 - n0) * rb);
  for (int64_t n = n0; n < n1; ++n) {
    if (n + ahead_rows < n1) prefetch_range(w + (n + ahead_rows) * rb, rb);
    int i = 0;
    for (; i + 4 <= m; i += 4) tile<F, 1, 4>(xs + i, w, rb, n, y + i * ldy, ldy, alpha, beta);
    switch (m - i) {
      case 3:
        tile<F, 1, 3>(xs + i, w, rb, n, y + i * ldy, ldy, alpha, beta);
        break;
      case 2:
        tile<F, 1, 2>(xs + i, w, rb, n, y + i * ldy, ldy, alpha, beta);
        break;
      case 1:
        tile<F, 1, 1>(xs + i, w, rb, n, y + i * ldy, ldy, alpha, beta);
        break;
      default:
        break;
    }
  }
}

TANDEM_VNNI_TARGET void quantize_blocks(const float* x, int64_t blocks, int8_t* q, float* d,
                                        float* s) {
  for (int64_t b = 0; b < blocks; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + b * 32), v1 = _mm512_loadu_ps(x + b * 32 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float db = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(db != 0.0f ? 1.0f / db : 0.0f);
    // Round to nearest (ties to even), as llama.cpp's AVX quantizers do.
    const __m512i i0 = _mm512_cvtps_epi32(
        _mm512_roundscale_ps(_mm512_mul_ps(v0, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m512i i1 = _mm512_cvtps_epi32(
        _mm512_roundscale_ps(_mm512_mul_ps(v1, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32), _mm512_cvtsepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32 + 16), _mm512_cvtsepi32_epi8(i1));
    d[b] = db;
    s[b] = db * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1)));
  }
}

}  // namespace
#endif

void quantize_row_q8(const float* x, int64_t k, QuantizedRow& out) {
  if (k % 32 != 0) throw ContractError(cat("quantize_row_q8: k = ", k, " is not a multiple of 32"));
  const int64_t blocks = k / 32, padded = (blocks + 3) / 4 * 4;
  out.k = k;
  out.q.assign(static_cast<size_t>(padded * 32), 0);
  out.q4.resize(static_cast<size_t>(padded * 32));
  out.d.assign(static_cast<size_t>(padded), 0.0f);
  out.s.assign(static_cast<size_t>(padded), 0.0f);
  bool done = false;
#if defined(__x86_64__)
  if (gemv_int8_supported(DType::kQ8_0)) {
    quantize_blocks(x, blocks, out.q.data(), out.d.data(), out.s.data());
    done = true;
  }
#endif
  for (int64_t b = 0; b < blocks && !done; ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int v = static_cast<int>(std::nearbyint(x[b * 32 + j] * id));
      out.q[b * 32 + j] = static_cast<int8_t>(v);
      sum += v;
    }
    out.d[b] = d;
    out.s[b] = d * static_cast<float>(sum);
  }
  for (int64_t b = 0; b < padded; ++b) {
    int8_t* quad = out.q4.data() + (b / 4) * 128 + (b % 4) * 16;
    std::memcpy(quad, out.q.data() + b * 32, 16);
    std::memcpy(quad + 64, out.q.data() + b * 32 + 16, 16);
  }
}

void gemv_int8(DType t, const QuantizedRow& x, const uint8_t* w, int64_t row_bytes, int64_t n0,
               int64_t n1, float* y, float alpha, float beta) {
#if defined(__x86_64__)
  if (gemv_int8_supported(t)) {
    switch (t) {
      case DType::kQ8_0:
        return gemv_fmt<Fmt::kQ8_0>(x, w, row_bytes, n0, n1, y, alpha, beta);
      case DType::kQ4_0:
        return gemv_fmt<Fmt::kQ4_0>(x, w, row_bytes, n0, n1, y, alpha, beta);
      case DType::kQ4_1:
        return gemv_fmt<Fmt::kQ4_1>(x, w, row_bytes, n0, n1, y, alpha, beta);
      case DType::kQ4_K:
      case DType::kQ6_K:
        return gemv_int8_kquant(t, x, w, row_bytes, n0, n1, y, alpha, beta);
      default:
        break;
    }
  }
#endif
  throw ContractError(cat("gemv_int8: no int8 GEMV for ", dtype_name(t), " on this host"));
}

void gemv_int8_rows(DType t, const QuantizedRow* xs, int m, const uint8_t* w, int64_t row_bytes,
                    int64_t n0, int64_t n1, float* y, int64_t ldy, float alpha, float beta) {
#if defined(__x86_64__)
  if (gemv_int8_supported(t)) {
    switch (t) {
      case DType::kQ8_0:
        return gemv_rows_fmt<Fmt::kQ8_0>(xs, m, w, row_bytes, n0, n1, y, ldy, alpha, beta);
      case DType::kQ4_0:
        return gemv_rows_fmt<Fmt::kQ4_0>(xs, m, w, row_bytes, n0, n1, y, ldy, alpha, beta);
      case DType::kQ4_1:
        return gemv_rows_fmt<Fmt::kQ4_1>(xs, m, w, row_bytes, n0, n1, y, ldy, alpha, beta);
      default:
        break;
    }
  }
#endif
  // The K-quants: the one-row kernel per x row over ranges of W rows small enough to stay in L2
  // between the x rows (about 256 KiB), so W is still read from memory once.
  const int64_t span = std::max<int64_t>(4, (int64_t{256} << 10) / std::max<int64_t>(row_bytes, 1));
  for (int64_t c0 = n0; c0 < n1; c0 += span) {
    const int64_t c1 = std::min(n1, c0 + span);
    for (int i = 0; i < m; ++i) gemv_int8(t, xs[i], w, row_bytes, c0, c1, y + i * ldy, alpha, beta);
  }
}

}  // namespace tandem::cpu::fast
