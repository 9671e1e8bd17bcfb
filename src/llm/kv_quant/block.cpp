// SPDX-License-Identifier: Apache-2.0
// Quantized KvBlocks: building one from f32 rows, reading one back, and the cache's measured
// bits per element (see kv_quant.h).
#include <cstring>

#include "reencode.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_quant.h"

namespace tandem::llm {
namespace {

void rows_of(const KvBlock& b, const Tensor& t, const KvQuantFormat& f, int64_t d,
             std::vector<float>& out) {
  out.resize(static_cast<size_t>(b.used * d));
  if (f.codec != KvCodec::kPlain) {
    kv_decode(f, static_cast<const uint8_t*>(t.raw_data()), b.used, d, out.data());
  } else if (b.dtype == DType::kF32) {
    std::memcpy(out.data(), t.raw_data(), out.size() * sizeof(float));
  } else if (b.dtype == DType::kF16) {
    const auto* h = static_cast<const uint16_t*>(t.raw_data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = f16_to_f32(h[i]);
  } else {
    throw Unsupported(cat("kv_block_rows: blocks of dtype ", dtype_name(b.dtype)));
  }
}

// A block's K or V as host bytes: itself on the CPU, else a download of what rows_of reads (the
// used rows of plain blocks, every code byte of quantized ones).
Tensor on_host(const Tensor& t, const KvQuantFormat& f, int32_t used) {
  if (t.device().is_cpu() || used == 0) return t;
  if (f.codec == KvCodec::kPlain) return t.slice(0, 0, used).to(Device::cpu());
  return t.to(Device::cpu());
}

}  // namespace

void kv_block_rows(const KvCache& cache, int layer, int head, const KvBlock& b,
                   std::vector<float>& k, std::vector<float>& v) {
  const int64_t d = cache.shape().head_dim;
  // Quantized blocks keep their K and V in one dtype-kU8 tensor each; blocks on a GPU are
  // downloaded and decoded on the host.
  rows_of(b, on_host(b.k, b.kq, b.used), b.kq, d, k);
  rows_of(b, on_host(b.v, b.vq, b.used), b.vq, d, v);
  if (!b.channel_scaled) return;
  const Tensor* s = cache.channel_scales(layer, head);
  if (s == nullptr) {
    throw InvalidArgument(cat("kv_block_rows: block of (layer ", layer, ", head ", head,
                              ") is channel-scaled but the cache has no scales"));
  }
  const Tensor scales = s->device().is_cpu() ? s->contiguous() : s->to(Device::cpu());
  const float* sk = scales.data<float>();
  const float* sv = sk + d;
  for (int32_t r = 0; r < b.used; ++r) {
    for (int64_t i = 0; i < d; ++i) {
      k[r * d + i] *= sk[i];
      v[r * d + i] *= sv[i];
    }
  }
}

KvBlock kv_make_block(const KvCache& cache, const KvQuantFormat& kq, const KvQuantFormat& vq,
                      const float* k, const float* v, std::span<const int32_t> positions,
                      std::span<const uint8_t> k_wide, bool channel_scaled) {
  const KvCacheShape& cs = cache.shape();
  if (kq.codec == KvCodec::kPlain || vq.codec == KvCodec::kPlain) {
    throw InvalidArgument("kv_make_block: both K and V need a quantized format");
  }
  const auto n = static_cast<int64_t>(positions.size());
  if (n <= 0 || n > cs.block_tokens) {
    throw InvalidArgument(
        cat("kv_make_block: ", n, " slots (a block holds 1..", cs.block_tokens, ")"));
  }
  const int64_t d = cs.head_dim;
  KvBlock b;
  b.dtype = DType::kU8;
  b.kq = kq;
  b.vq = vq;
  b.channel_scaled = channel_scaled;
  // Encoded on the host; a cache on a GPU gets the codes uploaded to its device.
  b.k = Tensor::empty({kv_encoded_bytes(kq, n, d, k_wide)}, DType::kU8);
  b.v = Tensor::empty({kv_encoded_bytes(vq, n, d)}, DType::kU8);
  kv_encode(kq, k, n, d, k_wide, static_cast<uint8_t*>(b.k.raw_data()));
  kv_encode(vq, v, n, d, {}, static_cast<uint8_t*>(b.v.raw_data()));
  if (!cs.device.is_cpu()) {
    b.k = b.k.to(cs.device);
    b.v = b.v.to(cs.device);
  }
  b.positions.assign(positions.begin(), positions.end());
  b.used = static_cast<int32_t>(n);
  return b;
}

KvBlock kv_reencode_slots(const KvCache& cache, const KvBlock& b, std::span<const int32_t> keep) {
  const int64_t d = cache.shape().head_dim;
  if (!b.quantized() || keep.empty()) {
    throw InvalidArgument("kv_reencode_slots: needs a quantized block and at least one slot");
  }
  const Tensor kh = on_host(b.k, b.kq, b.used), vh = on_host(b.v, b.vq, b.used);
  const auto* map = static_cast<const uint8_t*>(kh.raw_data());
  std::vector<float> k(static_cast<size_t>(b.used * d)), v(k.size()), kk, vv;
  kv_decode(b.kq, map, b.used, d, k.data());  // no channel scales: kept rows stay scaled
  kv_decode(b.vq, static_cast<const uint8_t*>(vh.raw_data()), b.used, d, v.data());
  std::vector<int32_t> pos;
  std::vector<uint8_t> wide;
  for (const int32_t s : keep) {
    if (s < 0 || s >= b.used) {
      throw InvalidArgument(cat("kv_reencode_slots: slot ", s, " of a block of ", b.used));
    }
    kk.insert(kk.end(), k.begin() + s * d, k.begin() + (s + 1) * d);
    vv.insert(vv.end(), v.begin() + s * d, v.begin() + (s + 1) * d);
    pos.push_back(b.positions[static_cast<size_t>(s)]);
    if (b.kq.mixed) wide.push_back((map[s / 8] >> (s % 8)) & 1);
  }
  return kv_make_block(cache, b.kq, b.vq, kk.data(), vv.data(), pos, wide, b.channel_scaled);
}

KvStorageStats kv_storage_stats(const KvCache& cache) {
  const KvCacheShape& cs = cache.shape();
  KvStorageStats st;
  st.bytes = cache.bytes();
  for (int l = 0; l < cs.n_layers; ++l) {
    for (int h = 0; h < cs.n_kv_heads; ++h) st.elements += 2 * cache.tokens(l, h) * cs.head_dim;
  }
  st.bits_per_element =
      st.elements > 0 ? 8.0 * static_cast<double>(st.bytes) / static_cast<double>(st.elements) : 0;
  return st;
}

void kv_retain_quantized_block(const KvCache& cache, const KvBlock& b, int64_t base,
                               std::span<const int64_t> slots, size_t& next,
                               std::vector<KvBlock>& kept) {
  std::vector<int32_t> keep;
  while (next < slots.size() && slots[next] < base + b.used) {
    keep.push_back(static_cast<int32_t>(slots[next++] - base));
  }
  if (!keep.empty()) kept.push_back(kv_reencode_slots(cache, b, keep));
}

}  // namespace tandem::llm
