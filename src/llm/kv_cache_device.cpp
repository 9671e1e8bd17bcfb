// SPDX-License-Identifier: Apache-2.0
// KvCache on a GPU: appends and retains move rows with device copies (ops::convert of a strided
// view into a block's slot range, converting the dtype when blocks are not f32), one copy per run
// of consecutive slots, so a decode step costs 2 copies per (layer, KV head). The kept slots of a
// quantized block are re-encoded in its own format on the host (kv_quant/reencode.h).
#include <algorithm>

#include "llm/kv_quant/reencode.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_cache.h"
#include "tandem/ops/ops.h"

namespace tandem::llm {

void KvCache::append_device(int layer, const Tensor& k_rows, const Tensor& v_rows,
                            std::span<const int32_t> positions) {
  const auto t = static_cast<int64_t>(positions.size());
  for (int h = 0; h < shape_.n_kv_heads; ++h) {
    auto& list = head_blocks(layer, h);
    const Tensor k_head = k_rows.select(1, h);  // [T, D], row stride n_kv_heads * D
    const Tensor v_head = v_rows.select(1, h);
    for (int64_t i = 0; i < t;) {
      if (list.empty() || list.back().used == shape_.block_tokens || list.back().quantized()) {
        list.push_back(new_block(shape_.dtype));  // quantized blocks are immutable
      }
      KvBlock& b = list.back();
      const int64_t n = std::min<int64_t>(t - i, shape_.block_tokens - b.used);
      Tensor k_dst = b.k.slice(0, b.used, b.used + n);
      Tensor v_dst = b.v.slice(0, b.used, b.used + n);
      ops::convert(k_head.slice(0, i, i + n), k_dst);
      ops::convert(v_head.slice(0, i, i + n), v_dst);
      b.positions.insert(b.positions.end(), positions.begin() + i, positions.begin() + i + n);
      b.used += static_cast<int32_t>(n);
      i += n;
    }
  }
  for (int32_t p : positions) next_position_ = std::max(next_position_, p + 1);
}

void KvCache::retain_device(int layer, int head, std::span<const int64_t> slots) {
  auto& list = head_blocks(layer, head);
  std::vector<KvBlock> kept;
  size_t next = 0;
  int64_t base = 0;
  for (const KvBlock& b : list) {
    if (b.quantized()) {  // kept slots are re-encoded in the block's own format (kv_quant)
      kv_retain_quantized_block(*this, b, base, slots, next, kept);
      base += b.used;
      continue;
    }
    while (next < slots.size() && slots[next] < base + b.used) {
      if (kept.empty() || kept.back().used == shape_.block_tokens || kept.back().quantized()) {
        kept.push_back(new_block(b.dtype));
      }
      KvBlock& o = kept.back();
      // A run: consecutive slots of this block that fit in the open output block.
      const int64_t s0 = slots[next] - base;
      int64_t n = 1;
      while (next + n < slots.size() && slots[next + n] == slots[next] + n && s0 + n < b.used &&
             o.used + n < shape_.block_tokens) {
        ++n;
      }
      Tensor k_dst = o.k.slice(0, o.used, o.used + n);
      Tensor v_dst = o.v.slice(0, o.used, o.used + n);
      ops::convert(b.k.slice(0, s0, s0 + n), k_dst);
      ops::convert(b.v.slice(0, s0, s0 + n), v_dst);
      o.positions.insert(o.positions.end(), b.positions.begin() + s0, b.positions.begin() + s0 + n);
      o.used += static_cast<int32_t>(n);
      next += static_cast<size_t>(n);
    }
    base += b.used;
  }
  list = std::move(kept);  // the old blocks' device buffers are released here
}

}  // namespace tandem::llm
