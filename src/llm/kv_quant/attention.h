// SPDX-License-Identifier: Apache-2.0
// Internal: the one ragged-attention driver behind cache_attention for every CPU cache that is not
// all f32 (f16 blocks, quantized blocks, mixtures with an f32 residual). Per work item (query
// token, KV head): walk the head's blocks in order; per block decode the K rows once into an L1
// scratch (a row reader per storage format: f32 read in place, f16/bf16 widened, kAffine,
// kBlock32, kSymmetric incl. mixed 8/4-bit rows, kChannel), score them for all query heads of the
// GQA group, mask slots after the query's position, fold the block into an online softmax (running
// max, rescaled sum and accumulator), then decode the V rows once and accumulate them. Blocks may
// have any length (partial tails, evicted sets). Channel-scaled blocks (QoKV) score with q * s_k
// and fold V into a second accumulator multiplied by s_v at the end. kChannel keys (KIVI) are not
// decoded to values: per block q'_c = q_c * scale_c and b = sum_c q_c * min_c, so a key's dot is
// q' . code + b. The inner loops are per-ISA tables (attention_kernels.h). Same contract as
// cache_attention in model.h.
//
//   ragged_cache_attention(q, positions, cache, layer, out, 1.0f / std::sqrt(64.0f));
#pragma once

#include <cstdint>
#include <span>

#include "tandem/core/tensor.h"
#include "tandem/export.h"
#include "tandem/llm/kv_cache.h"

namespace tandem::llm {

namespace kvattn {
struct AttentionKernels;
}

// The checks of cache_attention's arguments (model.h), shared by cache_attention and the driver:
// q contiguous f32 [positions.size(), k * n_kv_heads, head_dim] with k >= 1, out contiguous f32 of
// q's shape. InvalidArgument naming the tensor and the shape it needs.
void check_cache_attention_args(const Tensor& q, std::span<const int32_t> positions,
                                const KvCache& cache, const Tensor& out);

// Called by cache_attention() for caches with quantized blocks, after it validated q and out: GPU
// caches go to cache_attention_quantized_gpu (attention_cuda.h), CPU caches to the driver below.
void cache_attention_quantized(const Tensor& q, std::span<const int32_t> positions,
                               const KvCache& cache, int layer, Tensor& out, float scale);

// The driver: q f32 [T, hq, d], scale already resolved. Checks q and out
// (check_cache_attention_args) and the layer's blocks (dtype, formats, byte sizes, channel scales)
// and throws InvalidArgument / Unsupported naming the layer and head before any work. `kernels`
// null: the host's best table.
TANDEM_API void ragged_cache_attention(const Tensor& q, std::span<const int32_t> positions,
                                       const KvCache& cache, int layer, Tensor& out, float scale,
                                       const kvattn::AttentionKernels* kernels = nullptr);

}  // namespace tandem::llm
