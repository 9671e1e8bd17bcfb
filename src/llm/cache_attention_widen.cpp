// SPDX-License-Identifier: Apache-2.0
// cache_attention for f16 (or mixed f16/bf16/f32) KV blocks; see cache_attention_widen.h. The rows
// are widened block by block by the shared ragged-attention driver (kv_quant/attention.h), the
// same loop that reads quantized blocks.
#include "cache_attention_widen.h"

#include "kv_quant/attention.h"

namespace tandem::llm {

void cache_attention_widened(const Tensor& q, std::span<const int32_t> positions,
                             const KvCache& cache, int layer, Tensor& out, float scale) {
  ragged_cache_attention(q, positions, cache, layer, out, scale);
}

}  // namespace tandem::llm
