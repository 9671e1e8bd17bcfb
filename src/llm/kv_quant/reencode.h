// SPDX-License-Identifier: Apache-2.0
// Internal: re-encoding the kept slots of a quantized KvBlock (eviction over quantized heads), on
// any device: the codes of a block on a GPU are downloaded, decoded and re-encoded on the host,
// and the new block is uploaded to the cache's device (kv_make_block).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tandem/llm/kv_cache.h"

namespace tandem::llm {

// Slots `keep` (ascending indices into b's slots, at least one) of quantized block b as a new block
// in b's own formats. Rows stay as stored (divided by channel scales when b is channel-scaled);
// mixed keys keep each slot's width.
KvBlock kv_reencode_slots(const KvCache& cache, const KvBlock& b, std::span<const int32_t> keep);

// One step of KvCache::retain over quantized block b whose first slot is slot `base` of the head:
// consumes the entries of `slots` (ascending head slots, from index `next`) that fall in b and, if
// any, appends their re-encoded block to `kept`. Shared by the CPU and the GPU retain.
void kv_retain_quantized_block(const KvCache& cache, const KvBlock& b, int64_t base,
                               std::span<const int64_t> slots, size_t& next,
                               std::vector<KvBlock>& kept);

}  // namespace tandem::llm
