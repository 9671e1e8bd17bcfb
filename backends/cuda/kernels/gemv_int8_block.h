// SPDX-License-Identifier: Apache-2.0
// Per-block arithmetic of the CUDA int8-activation GEMV (gemv_int8.cu), compiled for the GPU by
// that kernel and, the same source, for the host by a CPU test (tests/cuda/
// gemv_int8_host_test.cpp) that checks it against the CPU reference product on a machine without a
// GPU. What: the activation row is rounded to int8 per 32-element block as the CPU backend's
// int8 decode path rounds it (d = max|x| / 127, q = nearest(x / d), ties to even, s = d * sum q),
// and each weight block's dot product with it is eight 4-way int8 dot products (__dp4a on the
// device, the same sum spelled out on the host):
//   q8_0: d_w d_x sum c_j q_j
//   q4_0: d_w d_x sum c_j q_j - 8 d_w s_x       (c_j the nibbles 0..15)
//   q4_1: d_w d_x sum c_j q_j + m_w s_x
// Why: the weights are read once per token, so a decode GEMV is bound by their bytes; integer
// dot products keep the arithmetic off the critical path. How: weight blocks are read from any
// 2-byte aligned address (GGUF blocks are 34, 18 and 20 bytes), activation codes as eight int32.
//
//   int8_t q[32]; float d, s;
//   tandem::cuda::quantize_activation_block(x, 1, q, &d, &s);
//   int words[8]; std::memcpy(words, q, 32);
//   float y = tandem::cuda::weight_block_dot<DType::kQ4_1>(w_block, words, d, s);
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "tandem/core/dtype.h"

#if defined(__CUDACC__)
#define TANDEM_GI_FN __host__ __device__ __forceinline__
#else
#define TANDEM_GI_FN inline
#endif

namespace tandem::cuda {

// The four signed bytes of a and b multiplied pairwise and added to c.
TANDEM_GI_FN int dot4_i8(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#else
  const auto ua = static_cast<uint32_t>(a), ub = static_cast<uint32_t>(b);
  for (int i = 0; i < 4; ++i) {
    c += static_cast<int>(static_cast<int8_t>((ua >> (8 * i)) & 0xffu)) *
         static_cast<int>(static_cast<int8_t>((ub >> (8 * i)) & 0xffu));
  }
  return c;
#endif
}

// Rounding of the activation quantizer, the same on both sides: one division each, ties to even.
TANDEM_GI_FN float gi_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
TANDEM_GI_FN float gi_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TANDEM_GI_FN int gi_round(float v) {
#if defined(__CUDA_ARCH__)
  return __float2int_rn(v);
#else
  return static_cast<int>(std::nearbyint(v));
#endif
}

// x[0], x[stride], ..., x[31 * stride] -> 32 codes q, scale *d and *s = d * sum(q).
TANDEM_GI_FN void quantize_activation_block(const float* x, int64_t stride, int8_t* q, float* d,
                                            float* s) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = fabsf(x[j * stride]);
    amax = a > amax ? a : amax;
  }
  const float dd = gi_div(amax, 127.0f), id = dd != 0.0f ? gi_div(1.0f, dd) : 0.0f;
  int sum = 0;
  for (int j = 0; j < 32; ++j) {
    const int v = gi_round(gi_mul(x[j * stride], id));
    q[j] = static_cast<int8_t>(v);
    sum += v;
  }
  *d = dd;
  *s = gi_mul(dd, static_cast<float>(sum));
}

// Little-endian loads from a 2-byte aligned address (every GGUF block field of these types is).
TANDEM_GI_FN uint32_t load_u16_a2(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}
TANDEM_GI_FN int load_i32_a2(const uint8_t* p) {
  return static_cast<int>(load_u16_a2(p) | (load_u16_a2(p + 2) << 16));
}
TANDEM_GI_FN float load_f16_a2(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(load_u16_a2(p))));
}

// Dot product of one weight block of type T (at a 2-byte aligned address) with one activation
// block: codes as eight int32 words (a[i] holds elements 4i..4i+3), scale d and s = d * sum(codes).
template <DType T>
TANDEM_GI_FN float weight_block_dot(const uint8_t* w, const int* a, float d, float s) {
  int sumi = 0;
  if constexpr (T == DType::kQ8_0) {
    for (int i = 0; i < 8; ++i) sumi = dot4_i8(load_i32_a2(w + 2 + 4 * i), a[i], sumi);
    return load_f16_a2(w) * d * static_cast<float>(sumi);
  } else {
    constexpr int kQuants = T == DType::kQ4_1 ? 4 : 2;
    for (int i = 0; i < 4; ++i) {  // bytes 4i..4i+3: elements 4i.. (low nibbles), 16+4i.. (high)
      const auto v = static_cast<uint32_t>(load_i32_a2(w + kQuants + 4 * i));
      sumi = dot4_i8(static_cast<int>(v & 0x0f0f0f0fu), a[i], sumi);
      sumi = dot4_i8(static_cast<int>((v >> 4) & 0x0f0f0f0fu), a[4 + i], sumi);
    }
    const float dw = load_f16_a2(w);
    if constexpr (T == DType::kQ4_1)
      return dw * d * static_cast<float>(sumi) + load_f16_a2(w + 2) * s;
    return dw * (d * static_cast<float>(sumi) - 8.0f * s);
  }
}

}  // namespace tandem::cuda

#undef TANDEM_GI_FN
