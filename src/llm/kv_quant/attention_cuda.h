// SPDX-License-Identifier: Apache-2.0
// Internal: cache_attention over a layer with quantized blocks on a GPU cache. The blocks' K/V
// codes (and any f32/f16 residual blocks of the same head) are handed to the device backend's
// quantized_paged_attention kernel as they lie in device memory, after the page table was checked
// against the codec sizes (kv_encoded_bytes): the kernel decodes codes in registers with the CPU
// kernel's semantics (causal positions, GQA groups, ragged blocks, channel scales). Same contract
// as cache_attention in model.h.
#pragma once

#include <cstdint>
#include <span>

#include "tandem/core/tensor.h"
#include "tandem/llm/kv_cache.h"

namespace tandem::llm {

// Called by cache_attention_quantized() (kv_quant/attention.cpp) for caches not on the CPU, with q
// and out validated and scale resolved. InvalidArgument for blocks that do not match their
// formats or devices; Unsupported for a backend without the kernel or a head dim above 256.
void cache_attention_quantized_gpu(const Tensor& q, std::span<const int32_t> positions,
                                   const KvCache& cache, int layer, Tensor& out, float scale);

}  // namespace tandem::llm
