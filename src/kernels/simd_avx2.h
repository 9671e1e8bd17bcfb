// SPDX-License-Identifier: Apache-2.0
// Kernel toolkit (src/kernels). V for AVX2 + FMA + F16C: 8 floats per vector; tails go through a
// small stack buffer. Included by a kernel file (the CPU backend's isa_avx2.cpp, the KV attention
// kernels) inside its `#pragma GCC target` region and ISA namespace.
#pragma once

struct V {
  using T = __m256;
  static constexpr int kW = 8;
  static constexpr int kBV = 4;

  static T zero() { return _mm256_setzero_ps(); }
  static T set1(float v) { return _mm256_set1_ps(v); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T load_n(const float* p, int64_t n) {
    alignas(32) float tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n; ++i) tmp[i] = p[i];
    return _mm256_load_ps(tmp);
  }
  static void store_n(float* p, T v, int64_t n) {
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, v);
    for (int64_t i = 0; i < n; ++i) p[i] = tmp[i];
  }

  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T div(T a, T b) { return _mm256_div_ps(a, b); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T fnma(T a, T b, T c) { return _mm256_fnmadd_ps(a, b, c); }
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static T min(T a, T b) { return _mm256_min_ps(a, b); }
  static T abs(T a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static T trunc(T a) { return _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
  static T round_even(T a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static T copysign(T b, T a) { return _mm256_or_ps(b, _mm256_and_ps(a, _mm256_set1_ps(-0.0f))); }
  static T select_ge(T a, T b, T x, T y) {
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_GE_OQ));
  }
  static float hsum(T v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(T v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmin(T v) {
    __m128 s = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_min_ps(s, _mm_movehl_ps(s, s));
    s = _mm_min_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static T pow2i(T n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static T swap_pairs(T v) { return _mm256_permute_ps(v, 0xB1); }

  static T load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store_f16(uint16_t* p, T v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static T load_bf16(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static void store_bf16(uint16_t* p, T v) {
    const __m256i x = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(x, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);
    // 32-bit lanes (values < 65536) -> 16-bit: pack within 128-bit halves, then fix the lane order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }

  static void load_block(const BlockQ8_0* b, T* w) {
    const T d = _mm256_set1_ps(_cvtsh_ss(b->d));
    for (int i = 0; i < 4; ++i) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->qs + 8 * i));
      w[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    }
  }
  static void nibbles(const uint8_t* qs, __m256i* q) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(bytes, m4), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), m4);
    q[0] = _mm256_cvtepu8_epi32(lo);
    q[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8));
    q[2] = _mm256_cvtepu8_epi32(hi);
    q[3] = _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8));
  }
  static void load_block(const BlockQ4_0* b, T* w) {
    const T d = _mm256_set1_ps(_cvtsh_ss(b->d));
    __m256i q[4];
    nibbles(b->qs, q);
    for (int i = 0; i < 4; ++i)
      w[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(q[i], _mm256_set1_epi32(8))));
  }
  static void load_block(const BlockQ4_1* b, T* w) {
    const T d = _mm256_set1_ps(_cvtsh_ss(b->d)), m = _mm256_set1_ps(_cvtsh_ss(b->m));
    __m256i q[4];
    nibbles(b->qs, q);
    for (int i = 0; i < 4; ++i) w[i] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(q[i]), m);
  }

  // GEMV helpers (see simd_avx512.h): scales one at a time through F16C, codes widened 8 at a time.
  static void block_scales(const uint8_t* p, int64_t stride, int64_t n, float* d, float* m) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h[2];
      std::memcpy(h, p + i * stride, 4);
      d[i] = _cvtsh_ss(h[0]);
      if (m) m[i] = _cvtsh_ss(h[1]);
    }
  }
  static constexpr bool kLut16 = false;  // no 16-entry float table lookup
  static void q4_values(const uint8_t* qs, T* q) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m256i b0 = _mm256_cvtepu8_epi32(bytes);
    const __m256i b1 = _mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8));
    const __m256i m4 = _mm256_set1_epi32(15);
    q[0] = _mm256_cvtepi32_ps(_mm256_and_si256(b0, m4));
    q[1] = _mm256_cvtepi32_ps(_mm256_and_si256(b1, m4));
    q[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4));
    q[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4));
  }
  static void q8_values(const int8_t* qs, T* q) {
    for (int i = 0; i < 4; ++i)
      q[i] = _mm256_cvtepi32_ps(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * i))));
  }
};
