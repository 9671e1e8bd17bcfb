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

// Scale d_w and offset o_w of one block.
template <Fmt F>
TANDEM_VNNI_TARGET inline void block_scale(const uint8_t* b, float* d, float* o) {
  *d = half(b);
  if constexpr (F == Fmt::kQ4_1) {
    *o = half(b + 2);
  } else if constexpr (F == Fmt::kQ4_0) {
    *o = -8.0f * *d;
  } else {
    *o = -128.0f * *d;
  }
}

constexpr int kRows = 4;  // W rows per pass: each x vector loaded feeds all of them

// Scales of 16 blocks at a time: one gather per W row reads the 4 bytes at each block's start
// (d, and m for q4_1: two f16), converted with vcvtph2ps; d_w * d_x and the offset terms
// o_w * s_x are then vector products. Each pair of blocks takes its two scales from the 16 with
// one vpermps (lanes 0-7: the first block's, 8-15: the second's).
template <Fmt F, int R>
TANDEM_VNNI_TARGET void rows_pass(const QuantizedRow& x, const uint8_t* w, int64_t rb, int64_t n,
                                  float* y, float alpha, float beta) {
  constexpr int64_t kB = kBlockBytes<F>;
  const int64_t blocks = x.k / 32;
  alignas(64) static thread_local uint8_t zero_block[64] = {};  // the pad block of an odd count
  const __m512i offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(kB)));
  const __m512i first_pair = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i two = _mm512_set1_epi32(2);
  __m512 acc[R], off[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), off[r] = _mm512_setzero_ps();
  for (int64_t g0 = 0; g0 < blocks; g0 += 16) {
    const int64_t gn = std::min<int64_t>(16, blocks - g0);
    const __mmask16 mask = static_cast<__mmask16>((1u << gn) - 1u);
    const __m512 dx = _mm512_maskz_loadu_ps(mask, x.d.data() + g0);
    const __m512 sx = _mm512_maskz_loadu_ps(mask, x.s.data() + g0);
    __m512 dd[R];
    for (int r = 0; r < R; ++r) {
      const __m512i raw = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, offsets,
                                                      w + (n + r) * rb + g0 * kB, 1);
      const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw));
      __m512 o;
      if constexpr (F == Fmt::kQ4_1) {
        o = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(raw, 16)));
      } else {
        o = _mm512_mul_ps(d, _mm512_set1_ps(F == Fmt::kQ4_0 ? -8.0f : -128.0f));
      }
      dd[r] = _mm512_mul_ps(d, dx);
      off[r] = _mm512_fmadd_ps(o, sx, off[r]);
    }
    __m512i idx = first_pair;
    for (int64_t g = g0; g < g0 + gn; g += 2, idx = _mm512_add_epi32(idx, two)) {
      const __m512i xq = _mm512_loadu_si512(x.q.data() + g * 32);
      const bool pair = g + 1 < blocks;
      for (int r = 0; r < R; ++r) {
        const uint8_t* b0 = w + (n + r) * rb + g * kB;
        const uint8_t* b1 = pair ? b0 + kB : zero_block;
        const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes2<F>(b0, b1), xq);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(idx, dd[r]), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const float v = _mm512_reduce_add_ps(_mm512_add_ps(acc[r], off[r]));
    y[n + r] = beta == 0.0f ? alpha * v : alpha * v + beta * y[n + r];
  }
}

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

// q4_0 / q4_1: four blocks per step. Their 16 code bytes go to the four 128-bit lanes of one
// register; the low nibbles (elements 0..15 of each block) and the high nibbles (16..31) meet x in
// QuantizedRow::q4 order, so two vpdpbusd give each block's dot product in its lane (4 dwords),
// with no shuffling of the codes.
template <Fmt F, int R>
TANDEM_VNNI_TARGET void rows_pass_q4(const QuantizedRow& x, const uint8_t* w, int64_t rb, int64_t n,
                                     float* y, float alpha, float beta) {
  constexpr int64_t kB = kBlockBytes<F>;
  const int64_t blocks = x.k / 32;
  alignas(64) static thread_local uint8_t zero_block[64] = {};  // pad blocks past the row's end
  const __m512i offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(kB)));
  const __m512i first_quad = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i four = _mm512_set1_epi32(4);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[R], off[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), off[r] = _mm512_setzero_ps();
  for (int64_t g0 = 0; g0 < blocks; g0 += 16) {
    const int64_t gn = std::min<int64_t>(16, blocks - g0);
    const __mmask16 mask = static_cast<__mmask16>((1u << gn) - 1u);
    const __m512 dx = _mm512_maskz_loadu_ps(mask, x.d.data() + g0);
    const __m512 sx = _mm512_maskz_loadu_ps(mask, x.s.data() + g0);
    __m512 dd[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + (n + r) * rb + g0 * kB;
      __m512i raw;
      if constexpr (F == Fmt::kQ4_1) {
        raw = gn == 16 ? headers16_q4_1(row)
                       : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, offsets, row, 1);
      } else {
        raw = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, offsets, row, 1);
      }
      const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw));
      __m512 o;
      if constexpr (F == Fmt::kQ4_1) {
        o = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(raw, 16)));
      } else {
        o = _mm512_mul_ps(d, _mm512_set1_ps(-8.0f));
      }
      dd[r] = _mm512_mul_ps(d, dx);
      off[r] = _mm512_fmadd_ps(o, sx, off[r]);
    }
    __m512i idx = first_quad;
    for (int64_t g = g0; g < g0 + gn; g += 4, idx = _mm512_add_epi32(idx, four)) {
      const __m512i xlo = _mm512_loadu_si512(x.q4.data() + g * 32);
      const __m512i xhi = _mm512_loadu_si512(x.q4.data() + g * 32 + 64);
      const int64_t real = std::min<int64_t>(4, blocks - g);
      for (int r = 0; r < R; ++r) {
        const uint8_t* b = w + (n + r) * rb + g * kB + kCodesAt<F>;
        auto lane = [&](int j) {
          return _mm_loadu_si128(
              reinterpret_cast<const __m128i*>(j < real ? b + j * kB : zero_block));
        };
        __m512i c = _mm512_castsi128_si512(lane(0));
        c = _mm512_inserti32x4(c, lane(1), 1);
        c = _mm512_inserti32x4(c, lane(2), 2);
        c = _mm512_inserti32x4(c, lane(3), 3);
        const __m512i lo = _mm512_and_si512(c, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
        const __m512i p =
            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xlo), hi, xhi);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(idx, dd[r]), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const float v = _mm512_reduce_add_ps(_mm512_add_ps(acc[r], off[r]));
    y[n + r] = beta == 0.0f ? alpha * v : alpha * v + beta * y[n + r];
  }
}

template <Fmt F, int R>
TANDEM_VNNI_TARGET inline void pass(const QuantizedRow& x, const uint8_t* w, int64_t rb, int64_t n,
                                    float* y, float alpha, float beta) {
  if constexpr (F == Fmt::kQ8_0) {
    rows_pass<F, R>(x, w, rb, n, y, alpha, beta);
  } else {
    rows_pass_q4<F, R>(x, w, rb, n, y, alpha, beta);
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
    pass<F, kRows>(x, w, rb, n, y, alpha, beta);
  }
  for (; n < n1; ++n) pass<F, 1>(x, w, rb, n, y, alpha, beta);
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

}  // namespace tandem::cpu::fast
