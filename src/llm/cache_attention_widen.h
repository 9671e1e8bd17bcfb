// SPDX-License-Identifier: Apache-2.0
// Internal: cache_attention over caches whose blocks are not all f32 (f16 blocks): each block's K
// and V rows are widened to f32 in a per-thread L1 scratch, then scored and folded into the
// online softmax. cache_attention (model_attention.cpp) forwards to it when the cache's dtype is
// not f32; it runs the ragged-attention driver shared with quantized blocks
// (kv_quant/attention.h). Same contract as cache_attention in model.h.
#pragma once

#include <cstdint>
#include <span>

#include "tandem/core/tensor.h"
#include "tandem/llm/kv_cache.h"

namespace tandem::llm {

// Called by cache_attention() for f16 CPU caches, after it validated q and out and resolved scale.
void cache_attention_widened(const Tensor& q, std::span<const int32_t> positions,
                             const KvCache& cache, int layer, Tensor& out, float scale);

}  // namespace tandem::llm
