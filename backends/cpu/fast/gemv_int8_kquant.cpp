// SPDX-License-Identifier: Apache-2.0
// The int8-activation GEMV (gemv_int8.h) for GGUF K-quant weights, Q4_K and Q6_K super-blocks of
// 256 (layouts in dequant_k.h), the way llama.cpp decodes Q4_K_M files: x in int8 blocks of 32,
// integer dot products of the weight codes (unsigned bytes) and x's codes by vpdpbusd, then the
// per-sub-block scales in f32.
//   Q4_K, sub-block j of 32:  sum w x ~= d s_j d_x,j (c . q)_j - dmin m_j s_x,j
//   Q6_K, sub-block k of 16:  sum w x ~= d sc_k d_x (c . q - 32 sum q)_k   (codes c in 0..63)
// x's 32-blocks line up with Q4_K's sub-blocks and hold two of Q6_K's, because K is a multiple
// of 256.
#include <algorithm>
#include <cstring>
#include <vector>

#include "dequant_k.h"
#include "gemv_int8.h"
#include "tandem/core/error.h"
#include "vnni_target.h"

namespace tandem::cpu::fast {

#if defined(__x86_64__)
namespace {

TANDEM_VNNI_TARGET inline float sum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// The eight 6-bit scales and mins of a Q4_K super-block (q4k_scale_min's packing) as floats, four
// bytes at a time: with w0..w2 the 12 bytes as little-endian words, scales 0-3 are w0's bytes,
// mins 0-3 w1's (low 6 bits each); scales 4-7 take w2's low nibbles and w0's top 2 bits, mins 4-7
// w2's high nibbles and w1's top 2 bits.
TANDEM_VNNI_TARGET inline void q4k_scales_mins(const uint8_t* scales, __m256* sc, __m256* mn) {
  uint32_t w[3];
  std::memcpy(w, scales, 12);
  constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
  const uint32_t s_lo = w[0] & k6, m_lo = w[1] & k6;
  const uint32_t s_hi = (w[2] & k4) | (((w[0] >> 6) & k2) << 4);
  const uint32_t m_hi = ((w[2] >> 4) & k4) | (((w[1] >> 6) & k2) << 4);
  const __m128i b = _mm_setr_epi32(static_cast<int>(s_lo), static_cast<int>(s_hi),
                                   static_cast<int>(m_lo), static_cast<int>(m_hi));
  *sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
  *mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
}

// One Q4_K row (`blocks` super-blocks) against x.
TANDEM_VNNI_TARGET float dot_q4k(const BlockQ4K* b, int64_t blocks, const QuantizedRow& x) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m512i pair[4];  // lanes 0-7 take sub-block 2i's scale, 8-15 sub-block 2i + 1's
  for (int i = 0; i < 4; ++i) {
    pair[i] = _mm512_inserti64x4(_mm512_set1_epi32(2 * i), _mm256_set1_epi32(2 * i + 1), 1);
  }
  __m512 acc = _mm512_setzero_ps();
  __m256 mins = _mm256_setzero_ps();
  for (int64_t s = 0; s < blocks; ++s) {
    const BlockQ4K& blk = b[s];
    __m256 sc, mn;
    q4k_scales_mins(blk.scales, &sc, &mn);
    const __m256 dx = _mm256_loadu_ps(x.d.data() + s * 8);
    const __m512 scale = _mm512_castps256_ps512(
        _mm256_mul_ps(_mm256_mul_ps(sc, _mm256_set1_ps(f16_value(blk.d))), dx));
    mins = _mm256_fmadd_ps(_mm256_mul_ps(mn, _mm256_set1_ps(f16_value(blk.dmin))),
                           _mm256_loadu_ps(x.s.data() + s * 8), mins);
    const int8_t* xq = x.q.data() + s * 256;
    for (int i = 0; i < 4; ++i) {  // 64 elements: sub-blocks 2i (low nibbles), 2i + 1 (high)
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * i));
      const __m256i lo = _mm256_and_si256(q, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      const __m512i c = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      const __m512i p =
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), c, _mm512_loadu_si512(xq + 64 * i));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_permutexvar_ps(pair[i], scale), acc);
    }
  }
  return _mm512_reduce_add_ps(acc) - sum8(mins);
}

// 32 times the sum of each 4 consecutive codes of x (Q6_K's -32 offset, per dword of vpdpbusd).
TANDEM_VNNI_TARGET void offset_sums(const QuantizedRow& x, std::vector<int32_t>& out) {
  out.resize(static_cast<size_t>(x.k / 4));
  const __m512i k32 = _mm512_set1_epi8(32);
  for (int64_t e = 0; e < x.k; e += 64) {
    const __m512i p =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), k32, _mm512_loadu_si512(x.q.data() + e));
    _mm512_storeu_si512(out.data() + e / 4, p);
  }
}

// One Q6_K row against x; x32 from offset_sums.
TANDEM_VNNI_TARGET float dot_q6k(const BlockQ6K* b, int64_t blocks, const QuantizedRow& x,
                                 const int32_t* x32) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3);
  // qh bit pairs: bytes 0-31 of a register feed elements l, 32-63 elements l + 32 (shift 0 / 2
  // for the low nibbles' register, 4 / 6 for the high nibbles').
  const __m512i shift_lo = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  const __m512i shift_hi = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
  const __m256i dx_pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  const __m512i quad_lo = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i quad_hi = _mm512_add_epi32(quad_lo, _mm512_set1_epi32(4));
  __m512 acc = _mm512_setzero_ps();
  for (int64_t s = 0; s < blocks; ++s) {
    const BlockQ6K& blk = b[s];
    const __m256 d = _mm256_set1_ps(f16_value(blk.d));
    for (int h = 0; h < 2; ++h) {  // 128 elements each
      const int64_t e0 = s * 256 + h * 128;
      const __m512i ql = _mm512_loadu_si512(blk.ql + 64 * h);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
      const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
      const __m512i c0 = _mm512_or_si512(
          _mm512_and_si512(ql, m4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh2, shift_lo), m3), 4));
      const __m512i c1 = _mm512_or_si512(
          _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
          _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh2, shift_hi), m3), 4));
      const __m512i p0 = _mm512_sub_epi32(
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), c0, _mm512_loadu_si512(x.q.data() + e0)),
          _mm512_loadu_si512(x32 + e0 / 4));
      const __m512i p1 = _mm512_sub_epi32(
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), c1, _mm512_loadu_si512(x.q.data() + e0 + 64)),
          _mm512_loadu_si512(x32 + e0 / 4 + 16));
      // Sub-block k (16 elements) has scale sc[k] and lies in x block k / 2.
      const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.scales + 8 * h))));
      const __m256 dx = _mm256_permutevar8x32_ps(
          _mm256_castps128_ps256(_mm_loadu_ps(x.d.data() + e0 / 32)), dx_pairs);
      const __m512 scale = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_mul_ps(sc, d), dx));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), _mm512_permutexvar_ps(quad_lo, scale), acc);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), _mm512_permutexvar_ps(quad_hi, scale), acc);
    }
  }
  return _mm512_reduce_add_ps(acc);
}

}  // namespace
#endif

void gemv_int8_kquant(DType t, const QuantizedRow& x, const uint8_t* w, int64_t row_bytes,
                      int64_t n0, int64_t n1, float* y, float alpha, float beta) {
#if defined(__x86_64__)
  if (gemv_int8_supported(t) && x.k % kKQuantBlock == 0) {
    const int64_t blocks = x.k / kKQuantBlock;
    static thread_local std::vector<int32_t> x32;
    if (t == DType::kQ6_K) offset_sums(x, x32);
    constexpr int64_t kAhead = 2;  // rows prefetched ahead of the one computed
    for (int64_t n = n0; n < std::min(n1, n0 + kAhead); ++n)
      prefetch_range(w + n * row_bytes, row_bytes);
    for (int64_t n = n0; n < n1; ++n) {
      if (n + kAhead < n1) prefetch_range(w + (n + kAhead) * row_bytes, row_bytes);
      const uint8_t* row = w + n * row_bytes;
      const float v = t == DType::kQ4_K
                          ? dot_q4k(reinterpret_cast<const BlockQ4K*>(row), blocks, x)
                          : dot_q6k(reinterpret_cast<const BlockQ6K*>(row), blocks, x, x32.data());
      y[n] = beta == 0.0f ? alpha * v : alpha * v + beta * y[n];
    }
    return;
  }
#endif
  throw ContractError(
      cat("gemv_int8: no int8 GEMV for ", dtype_name(t), " (k = ", x.k, ") on this host"));
}

}  // namespace tandem::cpu::fast
