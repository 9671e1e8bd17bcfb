// SPDX-License-Identifier: Apache-2.0
// cache_attention: attention of a chunk of queries over the block lists of a KvCache (see model.h).
// Dispatch only: CPU caches of every block kind (f32, f16, bf16, packed codes) go through the one
// ragged-attention driver (kv_quant/attention.cpp: per (token, KV head), blocks decoded once into
// L1, online softmax, the GQA group's query heads sharing each row); GPU caches go to the backend's
// paged-attention kernel, or to the quantized-block kernel when the layer holds codes.
#include <cmath>
#include <utility>

#include "kv_quant/attention.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_quant.h"
#include "tandem/llm/model.h"
#include "tandem/ops/ops.h"

namespace tandem::llm {

namespace {

// GPU caches of plain blocks: ops::paged_attention (the backend's kernel reads the blocks in
// place).
void paged_cache_attention(const Tensor& q, std::span<const int32_t> positions,
                           const KvCache& cache, int layer, Tensor& out, float scale) {
  ops::PagedKv kv;
  kv.heads.resize(static_cast<size_t>(cache.shape().n_kv_heads));
  for (int h = 0; h < cache.shape().n_kv_heads; ++h) {
    for (const KvBlock& b : cache.blocks(layer, h)) {
      kv.heads[h].push_back(ops::KvPage{&b.k, &b.v, b.positions.data(), b.used});
    }
  }
  ops::paged_attention(q, positions, kv, out, scale);
}

thread_local AttentionTap current_tap;  // kv_quant.h: ScopedAttentionTap

}  // namespace

ScopedAttentionTap::ScopedAttentionTap(AttentionTap tap)
    : previous_(std::exchange(current_tap, std::move(tap))) {}

ScopedAttentionTap::~ScopedAttentionTap() { current_tap = std::move(previous_); }

void cache_attention(const Tensor& q, std::span<const int32_t> positions, const KvCache& cache,
                     int layer, Tensor& out, float scale) {
  const KvCacheShape& cs = cache.shape();
  check_cache_attention_args(q, positions, cache, out);  // kv_quant/attention.cpp
  if (scale == 0.0f) scale = 1.0f / std::sqrt(static_cast<float>(cs.head_dim));
  if (current_tap && cs.device.is_cpu()) current_tap(cache, layer, q, positions);
  if (!cs.device.is_cpu() && !cache.has_quantized(layer)) {  // the GPU kernel reads blocks in place
    paged_cache_attention(q, positions, cache, layer, out, scale);
    return;
  }
  if (cache.has_quantized(layer)) {  // packed codes; GPU caches: kv_quant/attention_cuda.cpp
    cache_attention_quantized(q, positions, cache, layer, out, scale);
    return;
  }
  ragged_cache_attention(q, positions, cache, layer, out, scale);
}

}  // namespace tandem::llm
