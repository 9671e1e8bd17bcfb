// SPDX-License-Identifier: Apache-2.0
// f32 -> q8_0 / q4_0 / q4_1 for one block of 32 values, compiled for the GPU by convert.cu and, the
// same source, for the host by a CPU test (tests/cuda/quant_block_host_test.cpp) that compares it
// with the CPU reference bit for bit on a machine without a GPU. The rounding is spelled out so
// both compilers do the same: products, sums and quotients round to nearest once each (the _rn
// intrinsics on the device, where nvcc would otherwise fuse x * id + 0.5 into one FMA; plain
// operators on the x86-64 host, whose baseline has no FMA), the scale's f16 is __float2half_rn on
// both sides (cuda_fp16.h defines it for the host too), and each f16 is written with one 16-bit
// store (two byte stores were miscompiled for sm_90 by CUDA 13.0: the low byte came out as an
// f16 -> u8 value conversion, 0 for every scale below 1).
//
//   float x[32] = {...};
//   uint8_t block[34];
//   tandem::cuda::quantize_block(DType::kQ8_0, x, block);   // same bytes as the CPU reference
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "tandem/core/dtype.h"

#if defined(__CUDACC__)
#define TANDEM_QB_FN __host__ __device__ inline
#else
#define TANDEM_QB_FN inline
#endif

namespace tandem::cuda {

#if defined(__CUDA_ARCH__)
TANDEM_QB_FN float qb_mul(float a, float b) { return __fmul_rn(a, b); }
TANDEM_QB_FN float qb_add(float a, float b) { return __fadd_rn(a, b); }
TANDEM_QB_FN float qb_sub(float a, float b) { return __fsub_rn(a, b); }
TANDEM_QB_FN float qb_div(float a, float b) { return __fdiv_rn(a, b); }
#else
TANDEM_QB_FN float qb_mul(float a, float b) { return a * b; }
TANDEM_QB_FN float qb_add(float a, float b) { return a + b; }
TANDEM_QB_FN float qb_sub(float a, float b) { return a - b; }
TANDEM_QB_FN float qb_div(float a, float b) { return a / b; }
#endif
TANDEM_QB_FN float qb_abs(float a) { return a < 0.0f ? -a : a; }
TANDEM_QB_FN int qb_min15(int a) { return a < 15 ? a : 15; }

// The f16 bits of v at p with one 16-bit store (every scale and min of a q8_0 / q4_0 / q4_1 block,
// 34, 18 and 20 bytes long, is 2-byte aligned).
TANDEM_QB_FN void put_half(uint8_t* p, float v) {
  *reinterpret_cast<uint16_t*>(p) = __half_as_ushort(__float2half_rn(v));
}

// x: 32 values; out: one block of dt (kQ8_0, kQ4_0 or kQ4_1; nothing is written for others).
TANDEM_QB_FN void quantize_block(DType dt, const float* x, uint8_t* out) {
  if (dt == DType::kQ8_0) {  // d = amax / 127, q = round(x / d)
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = qb_abs(x[j]) > amax ? qb_abs(x[j]) : amax;
    const float d = qb_div(amax, 127.0f);
    const float id = d != 0.0f ? qb_div(1.0f, d) : 0.0f;
    put_half(out, d);
    for (int j = 0; j < 32; ++j)
      out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(roundf(qb_mul(x[j], id))));
  } else if (dt == DType::kQ4_0) {  // d = (largest-magnitude value) / -8, q = floor(x / d + 8.5)
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (qb_abs(x[j]) > amax) {
        amax = qb_abs(x[j]);
        vmax = x[j];
      }
    }
    const float d = qb_div(vmax, -8.0f);
    const float id = d != 0.0f ? qb_div(1.0f, d) : 0.0f;
    put_half(out, d);
    for (int j = 0; j < 16; ++j) {
      const int lo = qb_min15(static_cast<int>(qb_add(qb_mul(x[j], id), 8.5f)));
      const int hi = qb_min15(static_cast<int>(qb_add(qb_mul(x[j + 16], id), 8.5f)));
      out[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  } else if (dt == DType::kQ4_1) {  // d = (max - min) / 15, m = min, q = floor((x - m) / d + 0.5)
    float lo = x[0], hi = x[0];
    for (int j = 1; j < 32; ++j) {
      lo = x[j] < lo ? x[j] : lo;
      hi = x[j] > hi ? x[j] : hi;
    }
    const float d = qb_div(qb_sub(hi, lo), 15.0f);
    const float id = d != 0.0f ? qb_div(1.0f, d) : 0.0f;
    put_half(out, d);
    put_half(out + 2, lo);
    for (int j = 0; j < 16; ++j) {
      const int a = qb_min15(static_cast<int>(qb_add(qb_mul(qb_sub(x[j], lo), id), 0.5f)));
      const int b = qb_min15(static_cast<int>(qb_add(qb_mul(qb_sub(x[j + 16], lo), id), 0.5f)));
      out[4 + j] = static_cast<uint8_t>(a | (b << 4));
    }
  }
}

}  // namespace tandem::cuda

#undef TANDEM_QB_FN
