// SPDX-License-Identifier: Apache-2.0
// Kernel toolkit (src/kernels: helpers shared by the CPU backend and the engines' own kernels):
// the GGUF block formats (Q8_0, Q4_0, Q4_1) and their scalar per-block dequantizers, the format's
// definition, inlined anywhere. The CPU backend's vectorised row routines are in its fast/isa.h.
//
//   const auto* blocks = static_cast<const tandem::cpu::BlockQ4_1*>(w_row);
//   float buf[32];
//   tandem::cpu::dequant_block(blocks[3], buf);   // elements 96..127 of the row
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

}  // namespace tandem::cpu
