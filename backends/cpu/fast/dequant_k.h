// SPDX-License-Identifier: Apache-2.0
// GGUF K-quant super-blocks (Q4_K, Q6_K: 256 weights each) and their row dequantization, as ggml
// lays them out. Used by the CPU GEMM (tiles of weight rows widened to f32 on the fly) and by the
// embedding and convert kernels through the ISA table's dequantize_row.
//
// Q4_K: eight sub-blocks of 32. Sub-block j has a 6-bit scale s_j and a 6-bit min m_j packed in
// `scales` (j < 4: s = scales[j] & 63, m = scales[j + 4] & 63; j >= 4: the low 4 bits come from
// scales[j + 4] (low nibble for s, high nibble for m) and the top 2 bits from the top bits of
// scales[j - 4] (s) and scales[j] (m)). Elements 64 i .. 64 i + 31 are the low nibbles of
// qs[32 i .. 32 i + 31] (sub-block 2 i), the next 32 their high nibbles (sub-block 2 i + 1);
// x = d s_j q - dmin m_j.
// Q6_K: sixteen sub-blocks of 16 with int8 scales. Each half of 128 elements uses 64 bytes of ql
// (low 4 bits) and 32 of qh (high 2 bits): for l < 32, element l takes ql[l] low nibble and qh[l]
// bits 0-1, element l + 32 ql[l + 32] low nibble and qh[l] bits 2-3, element l + 64 ql[l] high
// nibble and qh[l] bits 4-5, element l + 96 ql[l + 32] high nibble and qh[l] bits 6-7;
// x = d scale[e / 16] (q - 32).
//
//   const auto* b = reinterpret_cast<const tandem::cpu::BlockQ4K*>(row);
//   tandem::cpu::dequantize_row_k(DType::kQ4_K, row, out, 512);   // two super-blocks
#pragma once

#include <cstdint>

#include "tandem/core/dtype.h"
#include "tandem/core/error.h"

namespace tandem::cpu {

struct BlockQ4K {
  uint16_t d;          // f16 scale of the sub-block scales
  uint16_t dmin;       // f16 scale of the sub-block mins
  uint8_t scales[12];  // 8 x (6-bit scale, 6-bit min)
  uint8_t qs[128];     // 256 nibbles
};
struct BlockQ6K {
  uint8_t ql[128];    // low 4 bits
  uint8_t qh[64];     // high 2 bits
  int8_t scales[16];  // sub-block scales
  uint16_t d;         // f16 super-block scale
};
static_assert(sizeof(BlockQ4K) == 144 && sizeof(BlockQ6K) == 210,
              "K-quant blocks must match the GGUF layout");

// Scale and min of Q4_K sub-block j (0..7).
inline void q4k_scale_min(const uint8_t* scales, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *mn = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
    *mn = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

inline void dequant_block(const BlockQ4K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int i = 0; i < 4; ++i) {  // 64 elements: sub-blocks 2i (low nibbles), 2i + 1 (high)
    int s0, m0, s1, m1;
    q4k_scale_min(b.scales, 2 * i, &s0, &m0);
    q4k_scale_min(b.scales, 2 * i + 1, &s1, &m1);
    const float d0 = d * s0, o0 = dmin * m0, d1 = d * s1, o1 = dmin * m1;
    const uint8_t* q = b.qs + 32 * i;
    float* out = y + 64 * i;
    for (int l = 0; l < 32; ++l) {
      out[l] = d0 * (q[l] & 0x0F) - o0;
      out[l + 32] = d1 * (q[l] >> 4) - o1;
    }
  }
}

inline void dequant_block(const BlockQ6K& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b.ql + 64 * half;
    const uint8_t* qh = b.qh + 32 * half;
    const int8_t* sc = b.scales + 8 * half;
    float* out = y + 128 * half;
    for (int l = 0; l < 32; ++l) {
      const int s = l / 16;
      const int q0 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q1 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      out[l] = d * sc[s] * q0;
      out[l + 32] = d * sc[s + 2] * q1;
      out[l + 64] = d * sc[s + 4] * q2;
      out[l + 96] = d * sc[s + 6] * q3;
    }
  }
}

// n elements (a multiple of 256) of a K-quant row into f32.
inline void dequantize_row_k(DType t, const void* row, float* y, int64_t n) {
  const int64_t blocks = n / kKQuantBlock;
  if (t == DType::kQ4_K) {
    const auto* b = static_cast<const BlockQ4K*>(row);
    for (int64_t i = 0; i < blocks; ++i) dequant_block(b[i], y + i * kKQuantBlock);
  } else if (t == DType::kQ6_K) {
    const auto* b = static_cast<const BlockQ6K*>(row);
    for (int64_t i = 0; i < blocks; ++i) dequant_block(b[i], y + i * kKQuantBlock);
  } else {
    throw ContractError(cat("dequantize_row_k: ", dtype_name(t), " is not a K-quant"));
  }
}

}  // namespace tandem::cpu
