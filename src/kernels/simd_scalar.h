// SPDX-License-Identifier: Apache-2.0
// Kernel toolkit (src/kernels). V for the baseline: one float per "vector". The generic kernels
// then become plain loops, which the compiler may still auto-vectorise for the baseline ISA (SSE2
// on x86-64, NEON on arm64).
#pragma once

struct V {
  using T = float;
  static constexpr int kW = 1;
  static constexpr int kBV = 32;

  static T zero() { return 0.0f; }
  static T set1(float v) { return v; }
  static T load(const float* p) { return *p; }
  static void store(float* p, T v) { *p = v; }
  static T load_n(const float* p, int64_t n) { return n > 0 ? *p : 0.0f; }
  static void store_n(float* p, T v, int64_t n) {
    if (n > 0) *p = v;
  }

  static T add(T a, T b) { return a + b; }
  static T sub(T a, T b) { return a - b; }
  static T mul(T a, T b) { return a * b; }
  static T div(T a, T b) { return a / b; }
  static T fma(T a, T b, T c) { return a * b + c; }
  static T fnma(T a, T b, T c) { return c - a * b; }
  static T max(T a, T b) { return a > b ? a : b; }
  static T min(T a, T b) { return a < b ? a : b; }
  static T abs(T a) { return std::fabs(a); }
  static T trunc(T a) { return std::trunc(a); }
  static T round_even(T a) { return std::nearbyint(a); }
  static T copysign(T b, T a) { return std::copysign(b, a); }
  static T select_ge(T a, T b, T x, T y) { return a >= b ? x : y; }
  static float hsum(T v) { return v; }
  static float hmax(T v) { return v; }
  static float hmin(T v) { return v; }
  static T pow2i(T n) {
    const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }

  static T load_f16(const uint16_t* p) { return f16_to_f32(*p); }
  static void store_f16(uint16_t* p, T v) { *p = f32_to_f16(v); }
  static T load_bf16(const uint16_t* p) { return bf16_to_f32(*p); }
  static void store_bf16(uint16_t* p, T v) { *p = f32_to_bf16(v); }

  static void load_block(const BlockQ8_0* b, T* w) { dequant_block(*b, w); }
  static void load_block(const BlockQ4_0* b, T* w) { dequant_block(*b, w); }
  static void load_block(const BlockQ4_1* b, T* w) { dequant_block(*b, w); }

  // GEMV helpers (see simd_avx512.h).
  static void block_scales(const uint8_t* p, int64_t stride, int64_t n, float* d, float* m) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h[2];
      std::memcpy(h, p + i * stride, 4);
      d[i] = f16_to_f32(h[0]);
      if (m) m[i] = f16_to_f32(h[1]);
    }
  }
  static constexpr bool kLut16 = false;  // no 16-entry float table lookup
  static void q4_values(const uint8_t* qs, T* q) {
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<float>(qs[j] & 0x0f);
      q[j + 16] = static_cast<float>(qs[j] >> 4);
    }
  }
  static void q8_values(const int8_t* qs, T* q) {
    for (int j = 0; j < 32; ++j) q[j] = static_cast<float>(qs[j]);
  }
};
