// SPDX-License-Identifier: Apache-2.0
// GPU dispatch of attention over quantized KV blocks; see attention_cuda.h.
#include "attention_cuda.h"

#include <vector>

#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_quant.h"
#include "tandem/ops/ops.h"

namespace tandem::llm {
namespace {

ops::KvCodes codes_of(const KvQuantFormat& f) {
  return ops::KvCodes{static_cast<uint8_t>(f.codec), f.bits, f.group, f.mixed};
}

// Checks one side (K or V) of a block against its format: plain rows f32/f16 [block_tokens, d],
// codes u8 [kv_encoded_bytes] (a mixed side between its all-4-bit and all-8-bit sizes: the bitmap
// is on the device; the kernel stops at the tensor's end).
void check_side(const Tensor& t, const KvBlock& b, const KvQuantFormat& f, const KvCacheShape& cs,
                const std::string& where) {
  if (!t.defined() || t.device() != cs.device || !t.is_contiguous()) {
    throw InvalidArgument(cat(where, ": rows must be contiguous tensors on ", cs.device.to_string(),
                              ", got ", t.to_string()));
  }
  if (f.codec == KvCodec::kPlain) {
    if ((t.dtype() != DType::kF32 && t.dtype() != DType::kF16) || t.rank() != 2 ||
        t.size(0) < b.used || t.size(1) != cs.head_dim) {
      throw InvalidArgument(cat(where, ": plain rows must be f32/f16 [>= ", b.used, ", ",
                                cs.head_dim, "], got ", t.to_string()));
    }
    return;
  }
  kv_check_format(f, where.c_str());
  if (t.dtype() != DType::kU8 || t.rank() != 1) {
    throw InvalidArgument(
        cat(where, ": ", kv_format_name(f), " codes must be u8 [bytes], got ", t.to_string()));
  }
  const int64_t n = b.used, d = cs.head_dim, have = t.nbytes();
  if (f.codec == KvCodec::kSymmetric && f.mixed) {
    const std::vector<uint8_t> narrow(static_cast<size_t>(n), 0), wide(static_cast<size_t>(n), 1);
    const int64_t lo = kv_encoded_bytes(f, n, d, narrow), hi = kv_encoded_bytes(f, n, d, wide);
    if (have < lo || have > hi) {
      throw InvalidArgument(cat(where, ": ", have, " bytes of ", kv_format_name(f), " codes for ",
                                n, " rows (", lo, " to ", hi, " expected)"));
    }
    return;
  }
  const int64_t want = kv_encoded_bytes(f, n, d);
  if (have != want) {
    throw InvalidArgument(cat(where, ": ", have, " bytes of ", kv_format_name(f), " codes for ", n,
                              " rows of ", d, " (", want, " expected)"));
  }
}

}  // namespace

void cache_attention_quantized_gpu(const Tensor& q, std::span<const int32_t> positions,
                                   const KvCache& cache, int layer, Tensor& out, float scale) {
  const KvCacheShape& cs = cache.shape();
  if (q.device() != cs.device || out.device() != cs.device) {
    throw InvalidArgument(cat("cache_attention: q on ", q.device().to_string(), " and out on ",
                              out.device().to_string(), " for a cache on ", cs.device.to_string()));
  }
  ops::QuantPagedKv kv;
  kv.heads.resize(static_cast<size_t>(cs.n_kv_heads));
  kv.channel_scales.assign(static_cast<size_t>(cs.n_kv_heads), nullptr);
  std::vector<Tensor>
      host_scales;  // scales that had to come to the host (normally they live there)
  host_scales.reserve(static_cast<size_t>(cs.n_kv_heads));
  for (int h = 0; h < cs.n_kv_heads; ++h) {
    const std::vector<KvBlock>& list = cache.blocks(layer, h);  // also validates the layer
    const Tensor* sc = cache.channel_scales(layer, h);
    if (sc != nullptr) {
      if (sc->dtype() != DType::kF32 || sc->numel() != 2 * int64_t{cs.head_dim}) {
        throw InvalidArgument(cat("cache_attention: channel scales of (layer ", layer, ", head ", h,
                                  ") are ", sc->to_string(), ", not f32 [2, ", cs.head_dim, "]"));
      }
      host_scales.push_back(sc->device().is_cpu() ? sc->contiguous() : sc->to(Device::cpu()));
      kv.channel_scales[static_cast<size_t>(h)] = host_scales.back().data<float>();
    }
    for (size_t i = 0; i < list.size(); ++i) {
      const KvBlock& b = list[i];
      const std::string where =
          cat("cache_attention: block ", i, " of (layer ", layer, ", head ", h, ")");
      if (b.channel_scaled && sc == nullptr) {
        throw InvalidArgument(cat("cache_attention: channel-scaled block without scales (layer ",
                                  layer, ", head ", h, ")"));
      }
      if (b.used < 0 || b.used > cs.block_tokens ||
          static_cast<int64_t>(b.positions.size()) != b.used) {
        throw InvalidArgument(cat(where, ": ", b.used, " used slots with ", b.positions.size(),
                                  " positions (blocks hold ", cs.block_tokens, ")"));
      }
      if (b.used == 0) continue;
      check_side(b.k, b, b.kq, cs, where + " K");
      check_side(b.v, b, b.vq, cs, where + " V");
      kv.heads[static_cast<size_t>(h)].push_back(
          ops::QuantKvPage{&b.k, &b.v, b.positions.data(), b.used, codes_of(b.kq), codes_of(b.vq),
                           b.channel_scaled});
    }
  }
  BackendRegistry::global().get(cs.device).kernels().quantized_paged_attention(q, positions, kv,
                                                                               out, scale, nullptr);
}

}  // namespace tandem::llm
