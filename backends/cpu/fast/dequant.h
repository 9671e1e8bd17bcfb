// SPDX-License-Identifier: Apache-2.0
// The GGUF block formats (Q8_0, Q4_0, Q4_1) and the routines that turn weight storage into f32: the
// scalar per-block dequantizers (the format's definition, inlined anywhere) and row routines
// vectorised for the host (AVX-512 / AVX2+F16C / scalar, chosen at run time from cpu_info()).
// Shared by the fast GEMM, embedding and convert kernels, and meant for the LLM engine's weight
// handling.
//
//   const auto* blocks = static_cast<const tandem::cpu::BlockQ4_1*>(w_row);
//   float buf[32];
//   tandem::cpu::dequant_block(blocks[3], buf);                      // elements 96..127 of the row
//   tandem::cpu::dequantize_row(DType::kQ4_1, w_row, out, 576);       // a whole row, vectorised
//   tandem::cpu::quantize_row(DType::kQ8_0, x, q8_row, 576);          // GGUF reference
//   quantization
//
// Block layout (little-endian, 2-byte aligned): Q8_0 {f16 d; int8 q[32]} x = d*q; Q4_0 {f16 d; u8
// qs[16]} x = d*(q-8); Q4_1 {f16 d; f16 m; u8 qs[16]} x = d*q + m. In Q4 blocks element j < 16 is
// the low nibble of qs[j] and element j + 16 its high nibble. All functions are thread-safe.
#pragma once

#include <cstdint>

#include "tandem/core/dtype.h"

namespace tandem::cpu {

struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20,
              "GGUF block sizes");

inline void dequant_block(const BlockQ8_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(b.qs[j]);
}

inline void dequant_block(const BlockQ4_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((b.qs[j] & 0x0f) - 8);
    y[j + 16] = d * static_cast<float>((b.qs[j] >> 4) - 8);
  }
}

inline void dequant_block(const BlockQ4_1& b, float* y) {
  const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(b.qs[j] & 0x0f) + m;
    y[j + 16] = d * static_cast<float>(b.qs[j] >> 4) + m;
  }
}

// n elements of dtype t (f32, f16, bf16, q8_0, q4_0, q4_1; n a multiple of 32 for the block types)
// starting at src -> n floats at dst.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// n floats -> dtype t (f32, f16, bf16: round to nearest even; q8_0, q4_0, q4_1: GGUF reference
// quantization, bit-identical to the reference kernels; n a multiple of 32 for those).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace tandem::cpu
