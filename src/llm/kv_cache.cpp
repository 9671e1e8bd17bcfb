// SPDX-License-Identifier: Apache-2.0
// KvCache: block lists per (layer, KV head); see kv_cache.h.
#include "tandem/llm/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "llm/kv_quant/reencode.h"
#include "tandem/core/error.h"

namespace tandem::llm {

KvCache::KvCache(const KvCacheShape& shape, std::shared_ptr<KvPolicy> policy)
    : shape_(shape), policy_(std::move(policy)) {
  if (shape.n_layers <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0 ||
      shape.block_tokens <= 0) {
    throw InvalidArgument(cat("KvCache: sizes must be positive (layers ", shape.n_layers,
                              ", kv heads ", shape.n_kv_heads, ", head_dim ", shape.head_dim,
                              ", block_tokens ", shape.block_tokens, ")"));
  }
  if (shape.dtype != DType::kF32 && shape.dtype != DType::kF16) {
    throw Unsupported(
        cat("KvCache: blocks of dtype ", dtype_name(shape.dtype), " are unsupported (f32 or f16)"));
  }
  if (!policy_) policy_ = std::make_shared<FullCachePolicy>();
  heads_.resize(static_cast<size_t>(shape.n_layers) * shape.n_kv_heads);
  channel_scales_.resize(heads_.size());
}

void KvCache::store_row(KvBlock& b, int64_t slot, const float* k, const float* v) const {
  const int64_t d = shape_.head_dim;
  if (b.dtype == DType::kF32) {
    std::memcpy(b.k.data<float>() + slot * d, k, d * sizeof(float));
    std::memcpy(b.v.data<float>() + slot * d, v, d * sizeof(float));
    return;
  }
  auto* kh = static_cast<uint16_t*>(b.k.raw_data()) + slot * d;
  auto* vh = static_cast<uint16_t*>(b.v.raw_data()) + slot * d;
  for (int64_t i = 0; i < d; ++i) {
    kh[i] = f32_to_f16(k[i]);
    vh[i] = f32_to_f16(v[i]);
  }
}

std::vector<KvBlock>& KvCache::head_blocks(int layer, int head) {
  if (layer < 0 || layer >= shape_.n_layers || head < 0 || head >= shape_.n_kv_heads) {
    throw InvalidArgument(cat("KvCache: (layer ", layer, ", head ", head, ") outside ",
                              shape_.n_layers, " layers x ", shape_.n_kv_heads, " kv heads"));
  }
  return heads_[static_cast<size_t>(layer) * shape_.n_kv_heads + head];
}

const std::vector<KvBlock>& KvCache::blocks(int layer, int head) const {
  return const_cast<KvCache*>(this)->head_blocks(layer, head);
}

KvBlock KvCache::new_block(DType dtype) const {
  if (dtype != DType::kF32 && dtype != DType::kF16) {
    throw Unsupported(
        cat("KvCache: blocks of dtype ", dtype_name(dtype), " are unsupported (f32 or f16)"));
  }
  KvBlock b;
  b.dtype = dtype;
  b.k = Tensor::empty({shape_.block_tokens, shape_.head_dim}, dtype, shape_.device);
  b.v = Tensor::empty({shape_.block_tokens, shape_.head_dim}, dtype, shape_.device);
  b.positions.reserve(shape_.block_tokens);
  return b;
}

void KvCache::append(int layer, const Tensor& k_rows, const Tensor& v_rows,
                     std::span<const int32_t> positions) {
  const int64_t t = static_cast<int64_t>(positions.size());
  const Shape want{t, shape_.n_kv_heads, shape_.head_dim};
  for (const Tensor* x : {&k_rows, &v_rows}) {
    if (x->shape() != want || x->dtype() != DType::kF32 || !x->is_contiguous() ||
        x->device() != shape_.device) {
      throw InvalidArgument(cat("KvCache::append(layer ", layer, "): rows ", x->to_string(),
                                " must be contiguous f32 ", want.to_string(), " on ",
                                shape_.device.to_string()));
    }
  }
  head_blocks(layer, 0);  // validates the layer
  if (!shape_.device.is_cpu()) {
    append_device(layer, k_rows, v_rows, positions);
    return;
  }
  const int64_t d = shape_.head_dim;
  const auto* k = k_rows.data<float>();
  const auto* v = v_rows.data<float>();
  for (int h = 0; h < shape_.n_kv_heads; ++h) {
    auto& list = head_blocks(layer, h);
    for (int64_t i = 0; i < t; ++i) {
      if (list.empty() || list.back().used == shape_.block_tokens || list.back().quantized()) {
        list.push_back(new_block(shape_.dtype));
      }
      KvBlock& b = list.back();
      const int64_t src = (i * shape_.n_kv_heads + h) * d;
      store_row(b, b.used, k + src, v + src);
      b.positions.push_back(positions[i]);
      ++b.used;
    }
  }
  for (int32_t p : positions) next_position_ = std::max(next_position_, p + 1);
}

int64_t KvCache::tokens(int layer, int head) const {
  int64_t n = 0;
  for (const KvBlock& b : blocks(layer, head)) n += b.used;
  return n;
}

int64_t KvCache::max_tokens() const {
  int64_t best = 0;
  for (int l = 0; l < shape_.n_layers; ++l) {
    for (int h = 0; h < shape_.n_kv_heads; ++h) best = std::max(best, tokens(l, h));
  }
  return best;
}

namespace {

// retain() of a list of plain CPU blocks of one dtype, each [block_tokens, head_dim]: the kept
// rows move forward in place (the erase of a vector, across blocks), the blocks left empty at the
// end are freed. The result equals the copy into fresh blocks (every block full but the last)
// without allocating; the rows before the first dropped slot are not touched, so a decode-time
// eviction of a few tokens (h2o) costs the rows after them instead of the whole head. False
// (nothing done) when the list does not qualify.
bool retain_in_place(std::vector<KvBlock>& list, std::span<const int64_t> slots,
                     int64_t block_tokens, int64_t head_dim) {
  if (list.empty()) return false;
  const DType dtype = list.front().dtype;
  for (const KvBlock& b : list) {
    if (b.quantized() || b.channel_scaled || b.dtype != dtype || b.k.size(0) != block_tokens ||
        b.v.size(0) != block_tokens) {
      return false;
    }
  }
  const int64_t row = dtype_row_bytes(dtype, head_dim);
  size_t out_block = 0;
  int64_t out_slot = 0;  // the write cursor: slot out_slot of list[out_block]
  size_t next = 0;
  int64_t base = 0;
  for (size_t bi = 0; bi < list.size() && next < slots.size(); ++bi) {
    KvBlock& src = list[bi];
    for (; next < slots.size() && slots[next] < base + src.used; ++next) {
      const int64_t s = slots[next] - base;
      KvBlock& dst = list[out_block];
      if (out_block != bi || out_slot != s) {  // the write cursor is never after the row read
        auto* dk = static_cast<uint8_t*>(dst.k.raw_data()) + out_slot * row;
        auto* dv = static_cast<uint8_t*>(dst.v.raw_data()) + out_slot * row;
        std::memmove(dk, static_cast<const uint8_t*>(src.k.raw_data()) + s * row, row);
        std::memmove(dv, static_cast<const uint8_t*>(src.v.raw_data()) + s * row, row);
        if (dst.positions.size() <= static_cast<size_t>(out_slot))
          dst.positions.resize(out_slot + 1);
        dst.positions[out_slot] = src.positions[s];
      }
      if (++out_slot == block_tokens) {
        list[out_block].used = static_cast<int32_t>(block_tokens);
        list[out_block].positions.resize(block_tokens);
        ++out_block;
        out_slot = 0;
      }
    }
    base += src.used;
  }
  if (out_slot > 0) {
    list[out_block].used = static_cast<int32_t>(out_slot);
    list[out_block].positions.resize(out_slot);
    ++out_block;
  }
  list.resize(out_block);  // the emptied blocks' buffers are released here
  return true;
}

}  // namespace

void KvCache::retain(int layer, int head, std::span<const int64_t> slots) {
  auto& list = head_blocks(layer, head);
  const int64_t total = tokens(layer, head);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] < 0 || slots[i] >= total || (i > 0 && slots[i] <= slots[i - 1])) {
      throw InvalidArgument(
          cat("KvCache::retain(layer ", layer, ", head ", head, "): slot ", slots[i], " at index ",
              i, " is out of range or not ascending (head holds ", total, " tokens)"));
    }
  }
  if (!shape_.device.is_cpu()) {
    retain_device(layer, head, slots);
    return;
  }
  if (slots.empty()) {
    list.clear();
    return;
  }
  if (retain_in_place(list, slots, shape_.block_tokens, shape_.head_dim)) return;
  std::vector<KvBlock> kept;
  size_t next = 0;
  int64_t base = 0;
  for (const KvBlock& b : list) {
    if (b.quantized()) {  // kept slots are re-encoded in the block's own format (kv_quant)
      kv_retain_quantized_block(*this, b, base, slots, next, kept);
      base += b.used;
      continue;
    }
    // Rows are copied as stored (a kept slot keeps its block's dtype, bit for bit).
    const int64_t row = dtype_row_bytes(b.dtype, shape_.head_dim);
    const auto* bk = static_cast<const uint8_t*>(b.k.raw_data());
    const auto* bv = static_cast<const uint8_t*>(b.v.raw_data());
    while (next < slots.size() && slots[next] < base + b.used) {
      const int64_t s = slots[next] - base;
      if (kept.empty() || kept.back().used == shape_.block_tokens || kept.back().dtype != b.dtype) {
        kept.push_back(new_block(b.dtype));
      }
      KvBlock& o = kept.back();
      std::memcpy(static_cast<uint8_t*>(o.k.raw_data()) + o.used * row, bk + s * row, row);
      std::memcpy(static_cast<uint8_t*>(o.v.raw_data()) + o.used * row, bv + s * row, row);
      o.positions.push_back(b.positions[s]);
      ++o.used;
      ++next;
    }
    base += b.used;
  }
  list = std::move(kept);  // the old blocks' buffers are released here
}

void KvCache::clear() {
  for (auto& list : heads_) list.clear();
  for (auto& s : channel_scales_) s = Tensor();
  next_position_ = 0;
}

KvCache KvCache::clone(std::shared_ptr<KvPolicy> policy) const {
  KvCache c(shape_, std::move(policy));
  for (size_t i = 0; i < heads_.size(); ++i) {
    for (const KvBlock& b : heads_[i]) {
      KvBlock o = b;  // formats, positions, flags
      o.k = b.k.clone();
      o.v = b.v.clone();
      c.heads_[i].push_back(std::move(o));
    }
  }
  for (size_t i = 0; i < channel_scales_.size(); ++i) {
    if (channel_scales_[i].defined()) c.channel_scales_[i] = channel_scales_[i].clone();
  }
  c.next_position_ = next_position_;
  return c;
}

void KvCache::replace_blocks(int layer, int head, std::vector<KvBlock> blocks) {
  auto& list = head_blocks(layer, head);
  for (const KvBlock& b : blocks) {
    if (b.used < 0 || b.used > shape_.block_tokens ||
        static_cast<int32_t>(b.positions.size()) != b.used || b.k.device() != shape_.device ||
        b.v.device() != shape_.device) {
      throw InvalidArgument(cat("KvCache::replace_blocks(layer ", layer, ", head ", head,
                                "): a block of ", b.used, " slots (", b.positions.size(),
                                " positions) does not fit blocks of ", shape_.block_tokens,
                                " slots on ", shape_.device.to_string()));
    }
    for (int32_t p : b.positions) next_position_ = std::max(next_position_, p + 1);
  }
  list = std::move(blocks);
}

const Tensor* KvCache::channel_scales(int layer, int head) const {
  const_cast<KvCache*>(this)->head_blocks(layer, head);  // validates
  const Tensor& t = channel_scales_[static_cast<size_t>(layer) * shape_.n_kv_heads + head];
  return t.defined() ? &t : nullptr;
}

void KvCache::set_channel_scales(int layer, int head, std::span<const float> k_scale,
                                 std::span<const float> v_scale) {
  head_blocks(layer, head);
  const auto d = static_cast<size_t>(shape_.head_dim);
  if (k_scale.size() != d || v_scale.size() != d) {
    throw InvalidArgument(cat("KvCache::set_channel_scales(layer ", layer, ", head ", head,
                              "): scales of ", k_scale.size(), " and ", v_scale.size(),
                              " channels for head_dim ", d));
  }
  Tensor t = Tensor::empty({2, shape_.head_dim}, DType::kF32, Device::cpu());
  std::copy(k_scale.begin(), k_scale.end(), t.data<float>());
  std::copy(v_scale.begin(), v_scale.end(), t.data<float>() + d);
  channel_scales_[static_cast<size_t>(layer) * shape_.n_kv_heads + head] = std::move(t);
}

bool KvCache::has_quantized(int layer) const {
  for (int h = 0; h < shape_.n_kv_heads; ++h) {
    for (const KvBlock& b : blocks(layer, h)) {
      if (b.quantized()) return true;
    }
  }
  return false;
}

int64_t KvCache::block_bytes(DType dtype) const {
  return 2 * shape_.block_tokens * dtype_row_bytes(dtype, shape_.head_dim);
}

int64_t KvCache::bytes() const {
  int64_t n = 0;
  for (const auto& list : heads_) {
    for (const KvBlock& b : list) n += b.k.nbytes() + b.v.nbytes();
  }
  for (const Tensor& s : channel_scales_) n += s.defined() ? s.nbytes() : 0;
  return n;
}

}  // namespace tandem::llm
