// SPDX-License-Identifier: Apache-2.0
// Internal: re-encoding the kept slots of a quantized KvBlock (eviction over quantized heads), on
// any device: the codes of a block on a GPU are downloaded, decoded and re-encoded on the host,
// and the new block is uploaded to the cache's device (kv_make_block).
#pragma once

#include <cstdint>
#include <span>

#include "tandem/llm/kv_cache.h"

namespace tandem::llm {

// Slots `keep` (ascending indices into b's slots, at least one) of quantized block b as a new block
// in b's own formats. Rows stay as stored (divided by channel scales when b is channel-scaled);
// mixed keys keep each slot's width.
KvBlock kv_reencode_slots(const KvCache& cache, const KvBlock& b, std::span<const int32_t> keep);

}  // namespace tandem::llm
