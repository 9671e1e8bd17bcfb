// SPDX-License-Identifier: Apache-2.0
// The AVX-512 (F + BW, with FMA and F16C) instance of the ragged KV attention loops in
// attention_kernels.inc. Only this region is compiled for that ISA; attention_kernels() selects it
// when cpu_info() reports avx512f and avx512bw.
#include "attention_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/dequant.h"
#include "tandem/core/dtype.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#endif
namespace tandem::llm::kvattn::avx512 {
using cpu::BlockQ4_0;
using cpu::BlockQ4_1;
using cpu::BlockQ8_0;
constexpr const char* kIsaName = "avx512";
#include "kernels/simd_avx512.h"

// Codes of one vector (16 lanes) as floats.
struct C {
  static __m512 f(__m512i x) { return _mm512_cvtepi32_ps(x); }
  static __m128i bytes16(const uint8_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  }
  static __m512 u8(const uint8_t* p) { return f(_mm512_cvtepu8_epi32(bytes16(p))); }
  static __m512 s8(const uint8_t* p) { return f(_mm512_cvtepi8_epi32(bytes16(p))); }
  // 16 nibbles from 8 bytes: each dword lane holds the 32-bit word of its 8 codes, shifted by
  // 4 * (lane % 8).
  static __m512 u4(const uint8_t* p) {
    uint32_t w[2];
    std::memcpy(w, p, 8);
    const __m512i lanes =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(static_cast<int>(w[0]))),
                           _mm256_set1_epi32(static_cast<int>(w[1])), 1);
    const __m512i sh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    return f(_mm512_and_si512(_mm512_srlv_epi32(lanes, sh), _mm512_set1_epi32(15)));
  }
  // 16 two-bit codes from 4 bytes: the word broadcast, lane j shifted right by 2j.
  static __m512 u2(const uint8_t* p) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return f(_mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(w)), sh),
                              _mm512_set1_epi32(3)));
  }
  static __m512 lo4(const uint8_t* p) {
    return f(_mm512_and_si512(_mm512_cvtepu8_epi32(bytes16(p)), _mm512_set1_epi32(15)));
  }
  static __m512 hi4(const uint8_t* p) {
    return f(_mm512_srli_epi32(_mm512_cvtepu8_epi32(bytes16(p)), 4));
  }
  static float half(uint16_t h) { return _cvtsh_ss(h); }
  static void pairs(const uint8_t* p, float* a, float* b) {
    const __m512i w = _mm512_loadu_si512(p);
    _mm512_storeu_ps(a, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w)));
    _mm512_storeu_ps(b, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(w, 16))));
  }
  static __m512 mask_after(__m512 x, const int32_t* pos, int32_t qpos, int n) {
    const __mmask16 lanes = static_cast<__mmask16>((1u << n) - 1u);
    const __m512i p = _mm512_maskz_loadu_epi32(lanes, pos);
    const __mmask16 ok = _mm512_mask_cmple_epi32_mask(lanes, p, _mm512_set1_epi32(qpos));
    return _mm512_mask_blend_ps(ok, _mm512_set1_ps(-std::numeric_limits<float>::infinity()), x);
  }
  // Sums of 16 vectors: halves added across 256-, then 128-bit lanes, then within lanes; the
  // shuffles leave row r in lane kPerm[r] (an involution), so the rows go in permuted.
  static __m512 reduce(const __m512* v) {
    static constexpr int kPerm[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};
    __m512 x[8], y[4], z[2];
    for (int i = 0; i < 8; ++i) {
      const __m512 a = v[kPerm[i]], b = v[kPerm[i + 8]];
      x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
    for (int i = 0; i < 4; ++i) {
      y[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[i], x[i + 4], 0x88),
                           _mm512_shuffle_f32x4(x[i], x[i + 4], 0xDD));
    }
    for (int i = 0; i < 2; ++i) {
      z[i] = _mm512_add_ps(_mm512_shuffle_ps(y[i], y[i + 2], 0x44),
                           _mm512_shuffle_ps(y[i], y[i + 2], 0xEE));
    }
    return _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xDD));
  }
};
// The generic loops below use the V and C just defined.
#include "attention_kernels.inc"
}  // namespace tandem::llm::kvattn::avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop

#else
namespace tandem::llm::kvattn::avx512 {
const AttentionKernels* table() { return nullptr; }
}  // namespace tandem::llm::kvattn::avx512
#endif
