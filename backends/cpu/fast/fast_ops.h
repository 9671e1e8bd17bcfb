// SPDX-License-Identifier: Apache-2.0
// The fast CPU kernels, one function per op, computing synchronously on the calling thread plus an
// OpenMP team of tandem::cpu_num_threads() threads. fast_kernels.cpp wraps them into the OpKernels
// table (run now, or enqueued on a CPU stream). Outputs are taken as const Tensor& because a Tensor
// is a handle: the kernels write through its data pointer. Arguments are assumed validated by
// src/core/ops.cpp.
#pragma once

#include <span>

#include "tandem/core/tensor.h"
#include "tandem/ops/ops.h"
#include "tandem/ops/params.h"

namespace tandem::cpu::fast {

void gemm(const Tensor& a, const Tensor& b, const Tensor& c, const ops::GemmParams& p);
// ops::gemm_group: with int8 activations one pass (a rounded once, the rows of all the weights
// over one team); otherwise gemm per weight.
void gemm_group(const Tensor& a, std::span<const Tensor> bs, std::span<const Tensor> cs,
                const ops::GemmParams& p);
void batched_gemm(const Tensor& a, const Tensor& b, const Tensor& c, const ops::GemmParams& p);
void softmax(const Tensor& x, const Tensor& y);
void rms_norm(const Tensor& x, const Tensor& w, const Tensor& y, const ops::NormParams& p);
void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                const ops::NormParams& p);
void rope(const Tensor& x, const Tensor& pos, const Tensor& y, const ops::RopeParams& p);
void unary(ops::UnaryOp op, const Tensor& x, const Tensor& y);
void binary(ops::BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y);
void embedding(const Tensor& table, const Tensor& ids, const Tensor& out);
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const ops::AttentionParams& p, const Tensor* probs);
void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
            const ops::Conv2dParams& p);
void convert(const Tensor& src, const Tensor& dst);
void embedding_bag(const Tensor& table, const Tensor& indices, const Tensor& offsets,
                   const Tensor& out, ops::BagMode mode);

// scale resolved; pages on the CPU. Synchronous.
void paged_attention(const Tensor& q, std::span<const int32_t> q_positions, const ops::PagedKv& kv,
                     const Tensor& out, float scale);

}  // namespace tandem::cpu::fast
