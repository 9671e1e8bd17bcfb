// SPDX-License-Identifier: Apache-2.0
// The CPU reference kernels: plain, obviously-correct loops, one function per op, computing
// synchronously (no stream handling: reference_kernels.cpp wraps them into the OpKernels table and
// synchronizes the stream first). They are the ground truth of the consistency suite, so they
// favour clarity over speed: double accumulation for every reduction, element-by-element decoding
// of weight dtypes, no blocking, no threads. Arguments are assumed validated by src/core/ops.cpp.
//
// The fast kernels call a few of these for rare cases they do not specialise (e.g. convert between
// two integer dtypes), so they are the complete semantic definition of each op:
//   convert: float -> integer rounds to nearest (ties to even), saturates, NaN -> 0; integer ->
//   integer
//            saturates; f32 -> q8_0/q4_0/q4_1 uses the GGUF reference quantization (see
//            quantize_block_ref).
//   gemm:    beta == 0 never reads c (it may hold NaN).
//   attention: rows without a visible key produce zeros.
#pragma once

#include <cstdint>

#include "tandem/core/tensor.h"
#include "tandem/ops/ops.h"
#include "tandem/ops/params.h"

namespace tandem::cpu::ref {

// Value of element i of a contiguous run of elements of dtype t starting at `row` (any dtype; for
// block types `row` must start on a block boundary).
double load_value(DType t, const void* row, int64_t i);
// Stores v into element i of a run of a non-block-quantized dtype (float types round to nearest
// even, integer types round to nearest even, saturate, and map NaN to 0).
void store_value(DType t, void* row, int64_t i, double v);
// Quantizes 32 floats into one block of t (kQ8_0, kQ4_0 or kQ4_1), GGUF reference quantization.
void quantize_block_ref(DType t, const float* x, void* block);

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const ops::GemmParams& p);
void batched_gemm(const Tensor& a, const Tensor& b, Tensor& c, const ops::GemmParams& p);
void softmax(const Tensor& x, Tensor& y);
void rms_norm(const Tensor& x, const Tensor& w, Tensor& y, const ops::NormParams& p);
void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                const ops::NormParams& p);
void rope(const Tensor& x, const Tensor& pos, Tensor& y, const ops::RopeParams& p);
void unary(ops::UnaryOp op, const Tensor& x, Tensor& y);
void binary(ops::BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y);
void embedding(const Tensor& table, const Tensor& ids, Tensor& out);
// p.q_offset and p.scale are resolved (>= 0 and != 0), as src/core/ops.cpp passes them.
void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
               const ops::AttentionParams& p, Tensor* probs);
void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
            const ops::Conv2dParams& p);
void convert(const Tensor& src, const Tensor& dst);
// scale resolved; pages on the CPU.
void paged_attention(const Tensor& q, std::span<const int32_t> q_positions, const ops::PagedKv& kv,
                     Tensor& out, float scale);

// Checks the index data (ops::check_embedding_bag_indices), then pools in double.
void embedding_bag(const Tensor& table, const Tensor& indices, const Tensor& offsets, Tensor& out,
                   ops::BagMode mode);

// Throws InvalidArgument naming the first id outside [0, rows).
void check_ids(const Tensor& ids, int64_t rows, const char* op);

}  // namespace tandem::cpu::ref
