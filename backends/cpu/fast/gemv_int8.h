// SPDX-License-Identifier: Apache-2.0
// Integer GEMV for activation rows against block-quantized weights (q8_0, q4_0, q4_1), the way
// llama.cpp computes its decode: x is rounded to int8 per 32-element block (scale d_x = max|x| /
// 127, as llama.cpp's q8_0 / q8_1), then each block's dot product of codes is one AVX-512 VNNI
// vpdpbusd (u8 x s8 -> s32), two blocks per 512-bit instruction:
//   sum_j w_j x_j ~= d_w d_x sum_j c_j q_j + o_w s_x,  s_x = d_x sum_j q_j
// with weight codes c (q4: the 0..15 nibbles, o_w = m for q4_1, -8 d_w for q4_0; q8_0: the signed
// codes + 128, o_w = -128 d_w). GGUF's Q4_K and Q6_K super-blocks (gemv_int8_kquant.cpp) take
// the same row of x with their sub-block scales. The result differs from the f32 GEMV by the
// rounding of x to 8 bits (relative error ~ 1/254 per element, like llama.cpp), so it is used only
// where the caller asks for it (ops::GemmParams::int8_activations).
//
//   QuantizedRow qx;
//   quantize_row_q8(x, k, qx);
//   if (gemv_int8_supported(DType::kQ4_1)) gemv_int8(DType::kQ4_1, qx, w, rb, 0, n, y, 1, 0);
#pragma once

#include <cstdint>
#include <vector>

#include "tandem/core/dtype.h"

namespace tandem::cpu::fast {

// One activation row in int8 blocks of 32 (k a multiple of 32), padded with zero blocks to a
// multiple of 4 blocks.
struct QuantizedRow {
  int64_t k = 0;
  std::vector<int8_t> q;   // codes, blocks * 32
  std::vector<int8_t> q4;  // the same codes in q4 nibble order: per 4 blocks, their elements
                           // 0..15 (4 x 16 bytes), then their elements 16..31
  std::vector<float> d;    // per-block scale
  std::vector<float> s;    // per-block d * sum(codes)
};

// True when the host has AVX-512 F/BW and VNNI, the ISA is not forced lower (TANDEM_CPU_ISA), and
// the weight dtype is q8_0, q4_0, q4_1, q4_k or q6_k.
bool gemv_int8_supported(DType weight);

// k must be a multiple of 32.
void quantize_row_q8(const float* x, int64_t k, QuantizedRow& out);

// y[n] = alpha * dot(x, W[n]) + beta * y[n] for n in [n0, n1) (beta == 0: y not read); W rows
// `row_bytes` apart. Only where gemv_int8_supported(t).
void gemv_int8(DType t, const QuantizedRow& x, const uint8_t* w, int64_t row_bytes, int64_t n0,
               int64_t n1, float* y, float alpha, float beta);
// M activation rows at once (batched decode): y[i * ldy + n] for x row i, every W row read from
// memory once for all of them; each row's result equals gemv_int8's for that row alone, bit for
// bit, so a batched sequence computes what it would alone. q8_0 / q4_0 / q4_1 decode each W block
// once for up to 4 x rows; the K-quants run gemv_int8 per x row over L2-sized ranges of W rows.
void gemv_int8_rows(DType t, const QuantizedRow* xs, int m, const uint8_t* w, int64_t row_bytes,
                    int64_t n0, int64_t n1, float* y, int64_t ldy, float alpha, float beta);
// The same for q4_k and q6_k (x.k a multiple of 256); gemv_int8 calls it.
void gemv_int8_kquant(DType t, const QuantizedRow& x, const uint8_t* w, int64_t row_bytes,
                      int64_t n0, int64_t n1, float* y, float alpha, float beta);

}  // namespace tandem::cpu::fast
