// SPDX-License-Identifier: Apache-2.0
// Internal: the one place where the model hands a layer's queries to the cache's KvPolicy
// (KvPolicy::observe_queries in kv_cache.h), called by Model::forward and Model::forward_batch
// after a layer's K/V were appended. Costs nothing for policies that watch no queries.
#pragma once

#include <cstdint>
#include <span>

#include "tandem/core/tensor.h"
#include "tandem/llm/kv_cache.h"

namespace tandem::llm {

// q3: the chunk's post-RoPE queries f32 [T, n_heads, head_dim] (any device). A chunk of one token
// whose policy observes decode queries is a decode step (prefill = false); any other chunk is part
// of a prefill and the policy sees its last min(T, query_window()) rows (copied to the host).
void observe_policy_queries(KvCache& cache, int layer, const Tensor& q3,
                            std::span<const int32_t> positions);

}  // namespace tandem::llm
