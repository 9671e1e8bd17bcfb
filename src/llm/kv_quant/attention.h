// SPDX-License-Identifier: Apache-2.0
// Internal: cache_attention over a layer whose blocks are (partly) quantized. Each K and V row is
// decoded from its codes straight into a row-sized register/L1 buffer and consumed at once (the
// scores of the GQA group's query heads, then the weighted V sum), so the block is never expanded
// into a dequantized copy; f32 and f16 blocks of the same head (the full-precision residual) are
// read in place. Channel-scaled blocks score with q * s_k and fold V into a second accumulator
// that is multiplied by s_v at the end. Same contract as cache_attention in model.h.
#pragma once

#include <cstdint>
#include <span>

#include "tandem/core/tensor.h"
#include "tandem/llm/kv_cache.h"

namespace tandem::llm {

// Called by cache_attention() for CPU caches with quantized blocks, after it validated q and out.
void cache_attention_quantized(const Tensor& q, std::span<const int32_t> positions,
                               const KvCache& cache, int layer, Tensor& out, float scale);

}  // namespace tandem::llm
