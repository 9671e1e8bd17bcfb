// SPDX-License-Identifier: Apache-2.0
// The AVX2 + FMA + F16C instance of the ragged KV attention loops in attention_kernels.inc. Only
// this region is compiled for that ISA; attention_kernels() selects it when cpu_info() reports
// avx2, fma and f16c (and AVX-512 is absent or disabled).
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
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
namespace tandem::llm::kvattn::avx2 {
using cpu::BlockQ4_0;
using cpu::BlockQ4_1;
using cpu::BlockQ8_0;
constexpr const char* kIsaName = "avx2";
#include "kernels/simd_avx2.h"

// Codes of one vector (8 lanes) as floats.
struct C {
  static __m256 f(__m256i x) { return _mm256_cvtepi32_ps(x); }
  static __m128i bytes8(const uint8_t* p) {
    return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  }
  static __m256 u8(const uint8_t* p) { return f(_mm256_cvtepu8_epi32(bytes8(p))); }
  static __m256 s8(const uint8_t* p) { return f(_mm256_cvtepi8_epi32(bytes8(p))); }
  // 8 nibbles from 4 bytes: the word broadcast, lane j shifted right by 4j.
  static __m256 u4(const uint8_t* p) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    return f(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), sh),
                              _mm256_set1_epi32(15)));
  }
  // 8 two-bit codes from 2 bytes: lane j shifted right by 2j.
  static __m256 u2(const uint8_t* p) {
    uint16_t w;
    std::memcpy(&w, p, 2);
    const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    return f(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(w), sh), _mm256_set1_epi32(3)));
  }
  static __m256 lo4(const uint8_t* p) {
    return f(_mm256_and_si256(_mm256_cvtepu8_epi32(bytes8(p)), _mm256_set1_epi32(15)));
  }
  static __m256 hi4(const uint8_t* p) {
    return f(_mm256_srli_epi32(_mm256_cvtepu8_epi32(bytes8(p)), 4));
  }
  static float half(uint16_t h) { return _cvtsh_ss(h); }
  // 8 pairs: the low halves of each 128-bit lane gathered, then the lanes' quadwords reordered.
  static void pairs(const uint8_t* p, float* a, float* b) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i split = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0,
                                           1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    const __m256i x = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(w, split), 0xD8);
    _mm256_storeu_ps(a, _mm256_cvtph_ps(_mm256_castsi256_si128(x)));
    _mm256_storeu_ps(b, _mm256_cvtph_ps(_mm256_extracti128_si256(x, 1)));
  }
  static __m256 mask_after(__m256 x, const int32_t* pos, int32_t qpos, int n) {
    const __m256i lanes =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256i p = _mm256_maskload_epi32(pos, lanes);
    const __m256i bad = _mm256_or_si256(_mm256_cmpgt_epi32(p, _mm256_set1_epi32(qpos)),
                                        _mm256_xor_si256(lanes, _mm256_set1_epi32(-1)));
    return _mm256_blendv_ps(x, _mm256_set1_ps(-std::numeric_limits<float>::infinity()),
                            _mm256_castsi256_ps(bad));
  }
  // Sums of 8 vectors: halves added across 128-bit lanes, then within lanes; row r ends in lane
  // kPerm[r] (an involution), so the rows go in permuted.
  static __m256 reduce(const __m256* v) {
    static constexpr int kPerm[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    __m256 x[4], y[2];
    for (int i = 0; i < 4; ++i) {
      const __m256 a = v[kPerm[i]], b = v[kPerm[i + 4]];
      x[i] = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    }
    for (int i = 0; i < 2; ++i) {
      y[i] = _mm256_add_ps(_mm256_shuffle_ps(x[i], x[i + 2], 0x44),
                           _mm256_shuffle_ps(x[i], x[i + 2], 0xEE));
    }
    return _mm256_add_ps(_mm256_shuffle_ps(y[0], y[1], 0x88), _mm256_shuffle_ps(y[0], y[1], 0xDD));
  }
};
// The generic loops below use the V and C just defined.
#include "attention_kernels.inc"
}  // namespace tandem::llm::kvattn::avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop

#else
namespace tandem::llm::kvattn::avx2 {
const AttentionKernels* table() { return nullptr; }
}  // namespace tandem::llm::kvattn::avx2
#endif
