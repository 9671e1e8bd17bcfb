// SPDX-License-Identifier: Apache-2.0
// Kernel toolkit (src/kernels). V for AVX-512 (F + BW): 16 floats per vector, masked tails.
// Included by a kernel file (the CPU backend's isa_avx512.cpp, the KV attention kernels) inside its
// `#pragma GCC target` region and ISA namespace; <immintrin.h> and dequant.h come before it.
#pragma once

struct V {
  using T = __m512;
  static constexpr int kW = 16;
  static constexpr int kBV = 2;  // vectors per 32-element block

  static T zero() { return _mm512_setzero_ps(); }
  static T set1(float v) { return _mm512_set1_ps(v); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static __mmask16 mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static T load_n(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(mask(n), p); }
  static void store_n(float* p, T v, int64_t n) { _mm512_mask_storeu_ps(p, mask(n), v); }

  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T div(T a, T b) { return _mm512_div_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }    // a * b + c
  static T fnma(T a, T b, T c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a * b
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T min(T a, T b) { return _mm512_min_ps(a, b); }
  static T abs(T a) { return _mm512_abs_ps(a); }
  static T trunc(T a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  static T round_even(T a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // Sign of a applied to magnitude b (b >= 0).
  static T copysign(T b, T a) {
    const __m512i sign = _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(b), sign));
  }
  // a >= b ? x : y
  static T select_ge(T a, T b, T x, T y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_GE_OQ), y, x);
  }
  static float hsum(T v) { return _mm512_reduce_add_ps(v); }
  static float hmax(T v) { return _mm512_reduce_max_ps(v); }
  static float hmin(T v) { return _mm512_reduce_min_ps(v); }
  // 2^n for integral n in [-126, 127] held as floats.
  static T pow2i(T n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  // (x0, x1, x2, x3, ...) -> (x1, x0, x3, x2, ...)
  static T swap_pairs(T v) { return _mm512_permute_ps(v, 0xB1); }

  static T load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store_f16(uint16_t* p, T v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static T load_bf16(const uint16_t* p) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  // Round to nearest even; NaN -> quiet NaN (as f32_to_bf16).
  static void store_bf16(uint16_t* p, T v) {
    const __m512i x = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(x, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i r = _mm512_mask_blend_epi32(nan, rounded, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
  }

  // One 32-element block -> kBV vectors.
  static void load_block(const BlockQ8_0* b, T* w) {
    const T d = _mm512_set1_ps(_cvtsh_ss(b->d));
    for (int i = 0; i < 2; ++i) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16 * i));
      w[i] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
    }
  }
  static void nibbles(const uint8_t* qs, __m512i* lo, __m512i* hi) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    *lo = _mm512_cvtepu8_epi32(_mm_and_si128(bytes, m4));
    *hi = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(bytes, 4), m4));
  }
  static void load_block(const BlockQ4_0* b, T* w) {
    const T d = _mm512_set1_ps(_cvtsh_ss(b->d));
    __m512i lo, hi;
    nibbles(b->qs, &lo, &hi);
    const __m512i eight = _mm512_set1_epi32(8);
    w[0] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(lo, eight)));
    w[1] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(hi, eight)));
  }
  static void load_block(const BlockQ4_1* b, T* w) {
    const T d = _mm512_set1_ps(_cvtsh_ss(b->d)), m = _mm512_set1_ps(_cvtsh_ss(b->m));
    __m512i lo, hi;
    nibbles(b->qs, &lo, &hi);
    w[0] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lo), m);
    w[1] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(hi), m);
  }

  // GEMV helpers. Block scales: the f16 d (and, when m is not null, the f16 word after it: Q4_1's
  // min) of n blocks `stride` bytes apart, as floats; one gather per 16 blocks (each reads the
  // block's first 4 bytes, inside the block).
  static void block_scales(const uint8_t* p, int64_t stride, int64_t n, float* d, float* m) {
    const __m512i idx =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(static_cast<int>(stride)));
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 k = mask(n - i < 16 ? n - i : 16);
      const __m512i v =
          _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, p + i * stride, 1);
      _mm512_mask_storeu_ps(d + i, k, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)));
      if (m)
        _mm512_mask_storeu_ps(m + i, k,
                              _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16))));
    }
  }
  // The 32 unsigned 4-bit codes of a Q4 block (16 bytes, low nibbles = elements 0..15) as floats
  // 0..15 in element order: one zero-extension to 16 dwords, then mask / shift.
  static void q4_values(const uint8_t* qs, T* q) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
    q[0] = _mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(15)));
    q[1] = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));
  }
  // Q4 codes decoded by table lookup: w[0..1] = lut[code] for the 32 codes of a block in element
  // order, lut holding the 16 values d * q + o of one block. vpermps uses the low 4 bits of each
  // index lane, so the zero-extended bytes index the low nibbles as they are.
  static constexpr bool kLut16 = true;
  static T lut16(float d, float o) {
    return _mm512_fmadd_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_ps(d), _mm512_set1_ps(o));
  }
  static void q4_lookup(const uint8_t* qs, T lut, T* w) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
    w[0] = _mm512_permutexvar_ps(b, lut);
    w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), lut);
  }
  // The 32 int8 codes of a Q8_0 block as floats.
  static void q8_values(const int8_t* qs, T* q) {
    for (int i = 0; i < 2; ++i)
      q[i] = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16 * i))));
  }
};
