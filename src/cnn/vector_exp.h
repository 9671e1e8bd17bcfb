// SPDX-License-Identifier: Apache-2.0
// A vector e^x, sigmoid and SiLU for the CNN kernels (internal; AVX-512). Every path that applies
// SiLU after a convolution (the own 1x1 kernel, the activation pass after a Winograd conv) uses
// these, so a tile and the whole map get the same bits.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>

namespace tandem::cnn::kernels {

// e^x for x in [-87.3, 88.7] (clamped there): x = n ln2 + r with |r| <= ln2/2 (ln2 split in two
// for an exact product), e^r by its degree-6 Taylor polynomial (error < 2 ulp), times 2^n through
// the exponent bits.
__attribute__((target("avx512f,fma"))) inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// 1 / (1 + e^-x) on 16 lanes.
__attribute__((target("avx512f,fma"))) inline __m512 sigmoid16(__m512 v) {
  return _mm512_div_ps(
      _mm512_set1_ps(1.0f),
      _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), v))));
}

// x / (1 + e^-x) on 16 lanes.
__attribute__((target("avx512f,fma"))) inline __m512 silu16(__m512 v) {
  return _mm512_div_ps(
      v, _mm512_add_ps(_mm512_set1_ps(1.0f), exp16(_mm512_sub_ps(_mm512_setzero_ps(), v))));
}

}  // namespace tandem::cnn::kernels
#endif

namespace tandem::cnn::kernels {
// SiLU in place over n floats with `threads` OpenMP threads (AVX-512 when the CPU has it, else
// the scalar x / (1 + exp(-x))).
void silu_inplace(float* y, int64_t n, int threads);
}  // namespace tandem::cnn::kernels
