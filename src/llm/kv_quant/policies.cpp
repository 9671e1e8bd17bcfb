// SPDX-License-Identifier: Apache-2.0
// The KV-quantization policies (uniform int8/int4, llama.cpp q8_0/q4_0, KIVI, QoKV) and their
// registration; see kv_quant.h.
#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/log.h"
#include "tandem/llm/kv_policy_registry.h"
#include "tandem/llm/kv_quant.h"

namespace tandem::llm {
namespace {

// Quantizes the full f32/f16 blocks of every head that lie entirely before the `residual` most
// recent tokens, with K format kq and V format vq.
void quantize_old_blocks(KvCache& cache, const KvQuantFormat& kq, const KvQuantFormat& vq,
                         int64_t residual) {
  const KvCacheShape& cs = cache.shape();
  std::vector<float> k, v;
  for (int l = 0; l < cs.n_layers; ++l) {
    for (int h = 0; h < cs.n_kv_heads; ++h) {
      const auto& list = cache.blocks(l, h);
      int64_t after = cache.tokens(l, h);  // tokens after the current block's start
      bool any = false;
      for (const KvBlock& b : list) {
        after -= b.used;
        any = any || (!b.quantized() && b.used == cs.block_tokens && after >= residual);
      }
      if (!any) continue;
      std::vector<KvBlock> out;
      after = cache.tokens(l, h);
      for (const KvBlock& b : list) {
        after -= b.used;
        if (b.quantized() || b.used != cs.block_tokens || after < residual) {
          out.push_back(b);
          continue;
        }
        kv_block_rows(cache, l, h, b, k, v);
        out.push_back(kv_make_block(cache, kq, vq, k.data(), v.data(), b.positions));
      }
      cache.replace_blocks(l, h, std::move(out));
    }
  }
}

class BlockQuantPolicy final : public KvPolicy {
 public:
  BlockQuantPolicy(std::string name, KvQuantFormat kq, KvQuantFormat vq, int64_t residual)
      : name_(std::move(name)), kq_(kq), vq_(vq), residual_(residual) {}
  std::string name() const override { return name_; }
  void on_prefill_done(KvCache& cache) override { quantize_old_blocks(cache, kq_, vq_, residual_); }
  void on_decode_step(KvCache& cache) override { quantize_old_blocks(cache, kq_, vq_, residual_); }

 private:
  std::string name_;
  KvQuantFormat kq_, vq_;
  int64_t residual_;
};

struct QokvSettings {
  double ratio = 0.1;         // fraction of prompt tokens with 8-bit keys
  double decode_ratio = 0.1;  // fraction of each decoded block's tokens with 8-bit keys
  int groups = 10;            // contiguous groups when there is no calibration
  int window = 0;             // prefill queries scored per batch (its last rows); 0: all (spec ā)
  int64_t residual = 32;      // decode tokens kept in full precision (f16 by default)
  int v_bits = 4;             // value code width (4; 8 for the ablation)
  int v_group = 64;           // 0: symmetric per token; > 0: affine, a scale + min per v_group
  bool scales = true;         // use the calibration's channel scales (false: the ablation)
  bool f16_residual = true;   // keep the residual in f16 (spec 2.3), not the cache's f32
  std::shared_ptr<const QokvCalibration> calibration;
};

// Attention received by one not-yet-quantized token: the sum of the probabilities of the
// (query, head) pairs that saw it and their number (ā = sum / count).
struct QokvAttention {
  double sum = 0;
  int64_t count = 0;
  float mean() const {
    return count > 0 ? static_cast<float>(sum / static_cast<double>(count)) : 0;
  }
};

class QokvPolicy final : public KvPolicy {
 public:
  QokvPolicy(QokvSettings s, const KvCacheShape& shape) : s_(std::move(s)), shape_(shape) {
    attention_.resize(static_cast<size_t>(shape.n_layers) * shape.n_kv_heads);
    if (const auto& c = s_.calibration) {
      if (c->n_layers != shape.n_layers || c->n_kv_heads != shape.n_kv_heads ||
          c->head_dim != shape.head_dim) {
        throw InvalidArgument(cat("qokv: the calibration is for ", c->n_layers, " layers x ",
                                  c->n_kv_heads, " KV heads x head_dim ", c->head_dim,
                                  ", the cache has ", shape.n_layers, " x ", shape.n_kv_heads,
                                  " x ", shape.head_dim));
      }
    }
  }
  std::string name() const override { return "qokv"; }
  int query_window() const override {
    return s_.window > 0 ? s_.window : std::numeric_limits<int>::max();
  }
  // The decode rule scores the residual with every decode query.
  bool observes_decode_queries() const override { return true; }

  // Prefill windows and decode queries alike: every full-precision token of the layer gets the
  // attention the queries give it (softmax over the full-precision tokens; quantized blocks of
  // earlier turns or decoded blocks are not re-selected, so they are not scored).
  void observe_queries(const KvCache& cache, int layer, const Tensor& q,
                       std::span<const int32_t> positions, bool prefill) override {
    (void)prefill;
    const KvCacheShape& cs = cache.shape();
    const int n_heads = static_cast<int>(q.size(1)), group = n_heads / cs.n_kv_heads;
    std::vector<float> k, v, kh;
    std::vector<int32_t> kpos;
    std::vector<double> total;
    std::vector<int64_t> count;
    for (int h = 0; h < cs.n_kv_heads; ++h) {
      kh.clear(), kpos.clear();
      for (const KvBlock& b : cache.blocks(layer, h)) {
        if (b.quantized()) continue;
        kv_block_rows(cache, layer, h, b, k, v);
        kh.insert(kh.end(), k.begin(), k.end());
        kpos.insert(kpos.end(), b.positions.begin(), b.positions.end());
      }
      total.assign(kpos.size(), 0.0);
      count.assign(kpos.size(), 0);
      qokv_attention_totals(q.data<float>(), positions, n_heads, h * group, group, kh.data(), kpos,
                            cs.head_dim, total, count);
      auto& acc = attention_[static_cast<size_t>(layer) * cs.n_kv_heads + h];
      for (size_t j = 0; j < kpos.size(); ++j) {
        QokvAttention& a = acc[kpos[j]];
        a.sum += total[j];
        a.count += count[j];
      }
    }
  }

  void on_prefill_done(KvCache& cache) override {
    const KvCacheShape& cs = cache.shape();
    const int64_t d = cs.head_dim;
    std::vector<float> k, v, kk, vv, imp;
    std::vector<int32_t> pos;
    bool warned = false;
    for (int l = 0; l < cs.n_layers; ++l) {
      const QokvLayerCalibration* lc = layer_calibration(l);
      for (int h = 0; h < cs.n_kv_heads; ++h) {
        const Tensor* sc = scales_of(cache, l, h);
        auto& seen = attention_[static_cast<size_t>(l) * cs.n_kv_heads + h];
        std::vector<KvBlock> out;
        kk.clear(), vv.clear(), pos.clear(), imp.clear();
        for (const KvBlock& b : cache.blocks(l, h)) {
          if (b.quantized()) {
            out.push_back(b);
            continue;
          }
          kv_block_rows(cache, l, h, b, k, v);
          kk.insert(kk.end(), k.begin(), k.end());
          vv.insert(vv.end(), v.begin(), v.end());
          for (int32_t p : b.positions) {
            pos.push_back(p);
            auto it = seen.find(p);
            imp.push_back(it != seen.end() ? it->second.mean() : 0.0f);
          }
        }
        if (pos.empty()) continue;
        if (seen.empty() && !warned) {
          log().warn(
              "qokv: no queries were observed for layer {}; importance is 0, so the "
              "8-bit keys fall on the first tokens of each group",
              l);
          warned = true;
        }
        seen.clear();
        const std::vector<double> fr = lc != nullptr ? lc->group_fractions : std::vector<double>{};
        const std::vector<uint8_t> wide =
            qokv_select(imp, fr, s_.ratio, lc != nullptr ? static_cast<int>(fr.size()) : s_.groups);
        if (sc != nullptr) divide_by_scales(sc, kk, vv, d);
        for (size_t s = 0; s < pos.size(); s += cs.block_tokens) {
          const size_t n = std::min<size_t>(cs.block_tokens, pos.size() - s);
          out.push_back(kv_make_block(cache, kKeys, value_format(), kk.data() + s * d,
                                      vv.data() + s * d,
                                      std::span<const int32_t>(pos).subspan(s, n),
                                      std::span<const uint8_t>(wide).subspan(s, n), sc != nullptr));
        }
        cache.replace_blocks(l, h, std::move(out));
      }
    }
  }

  // Reconstruction (decode): a full block leaving the residual keeps 8-bit keys for the
  // round(decode_ratio * block_tokens) of its tokens that received the most attention (ā over
  // every query that saw them while they were in the residual), 4-bit for the rest; 4-bit values.
  void on_decode_step(KvCache& cache) override {
    const KvCacheShape& cs = cache.shape();
    const int64_t d = cs.head_dim;
    std::vector<float> k, v;
    std::vector<float> imp;
    std::vector<uint8_t> wide;
    for (int l = 0; l < cs.n_layers; ++l) {
      for (int h = 0; h < cs.n_kv_heads; ++h) {
        const auto& list = cache.blocks(l, h);
        int64_t after = cache.tokens(l, h);
        bool any = false;
        for (const KvBlock& b : list) {
          after -= b.used;
          any = any || (!b.quantized() && b.used == cs.block_tokens && after >= s_.residual);
        }
        if (!any) {
          if (s_.f16_residual) residual_to_f16(cache, l, h);
          continue;
        }
        const Tensor* sc = scales_of(cache, l, h);
        auto& seen = attention_[static_cast<size_t>(l) * cs.n_kv_heads + h];
        std::vector<KvBlock> out;
        after = cache.tokens(l, h);
        for (const KvBlock& b : list) {
          after -= b.used;
          if (b.quantized() || b.used != cs.block_tokens || after < s_.residual) {
            out.push_back(b);
            continue;
          }
          kv_block_rows(cache, l, h, b, k, v);
          if (sc != nullptr) divide_by_scales(sc, k, v, d);
          imp.clear();
          for (int32_t p : b.positions) {
            auto it = seen.find(p);
            imp.push_back(it != seen.end() ? it->second.mean() : 0.0f);
            if (it != seen.end()) seen.erase(it);
          }
          wide = qokv_select(imp, {}, s_.decode_ratio, 1);
          out.push_back(kv_make_block(cache, kKeys, value_format(), k.data(), v.data(), b.positions,
                                      wide, sc != nullptr));
        }
        cache.replace_blocks(l, h, std::move(out));
        if (s_.f16_residual) residual_to_f16(cache, l, h);
        forget_evicted(cache, l, h);
      }
    }
  }

 private:
  static constexpr KvQuantFormat kKeys{KvCodec::kSymmetric, 8, 0, true};

  // Drops the attention sums of tokens no longer held in full precision (evicted by another
  // member of a chain), so the map stays the size of the residual.
  void forget_evicted(const KvCache& cache, int l, int h) {
    auto& seen = attention_[static_cast<size_t>(l) * cache.shape().n_kv_heads + h];
    if (seen.size() <= static_cast<size_t>(2 * cache.shape().block_tokens + s_.residual)) return;
    std::unordered_map<int32_t, QokvAttention> kept;
    for (const KvBlock& b : cache.blocks(l, h)) {
      if (b.quantized()) continue;
      for (int32_t p : b.positions) {
        auto it = seen.find(p);
        if (it != seen.end()) kept.emplace(p, it->second);
      }
    }
    seen = std::move(kept);
  }

  // Rewrites the head's f32 full-precision blocks (new tokens; append() opens them in the cache's
  // dtype) as f16 blocks, which append() then fills in place. Converted on the host; a cache on a
  // GPU gets the f16 rows uploaded to its device.
  static void residual_to_f16(KvCache& cache, int l, int h) {
    const auto& list = cache.blocks(l, h);
    const bool any = std::any_of(list.begin(), list.end(), [](const KvBlock& b) {
      return !b.quantized() && b.dtype == DType::kF32;
    });
    if (!any) return;
    const KvCacheShape& cs = cache.shape();
    const int64_t n = int64_t{cs.block_tokens} * cs.head_dim;
    std::vector<KvBlock> out;
    for (const KvBlock& b : list) {
      if (b.quantized() || b.dtype != DType::kF32) {
        out.push_back(b);
        continue;
      }
      const Tensor kf = b.k.device().is_cpu() ? b.k : b.k.to(Device::cpu());
      const Tensor vf = b.v.device().is_cpu() ? b.v : b.v.to(Device::cpu());
      KvBlock f;
      f.dtype = DType::kF16;
      f.k = Tensor::empty({cs.block_tokens, cs.head_dim}, DType::kF16);
      f.v = Tensor::empty({cs.block_tokens, cs.head_dim}, DType::kF16);
      const float* k = kf.data<float>();
      const float* v = vf.data<float>();
      auto* fk = static_cast<uint16_t*>(f.k.raw_data());
      auto* fv = static_cast<uint16_t*>(f.v.raw_data());
      const int64_t used = int64_t{b.used} * cs.head_dim;
      for (int64_t i = 0; i < n; ++i) {
        fk[i] = i < used ? f32_to_f16(k[i]) : 0;
        fv[i] = i < used ? f32_to_f16(v[i]) : 0;
      }
      if (!cs.device.is_cpu()) {
        f.k = f.k.to(cs.device);
        f.v = f.v.to(cs.device);
      }
      f.positions = b.positions;
      f.used = b.used;
      out.push_back(std::move(f));
    }
    cache.replace_blocks(l, h, std::move(out));
  }

  KvQuantFormat value_format() const {
    if (s_.v_group > 0) {
      return KvQuantFormat{KvCodec::kAffine, static_cast<uint8_t>(s_.v_bits),
                           static_cast<uint16_t>(s_.v_group), false};
    }
    return KvQuantFormat{KvCodec::kSymmetric, static_cast<uint8_t>(s_.v_bits), 0, false};
  }
  const QokvLayerCalibration* layer_calibration(int l) const {
    return s_.calibration ? &s_.calibration->layers[static_cast<size_t>(l)] : nullptr;
  }
  // The head's channel scales (set from the calibration on first use), or nullptr.
  const Tensor* scales_of(KvCache& cache, int l, int h) const {
    const QokvLayerCalibration* lc = layer_calibration(l);
    if (lc == nullptr || !s_.scales) return nullptr;
    if (cache.channel_scales(l, h) == nullptr) {
      cache.set_channel_scales(l, h, lc->k_scale[h], lc->v_scale[h]);
    }
    return cache.channel_scales(l, h);
  }
  static void divide_by_scales(const Tensor* sc, std::vector<float>& k, std::vector<float>& v,
                               int64_t d) {
    const float* sk = sc->data<float>();
    const float* sv = sk + d;
    for (size_t r = 0; r < k.size() / static_cast<size_t>(d); ++r) {
      for (int64_t i = 0; i < d; ++i) k[r * d + i] /= sk[i], v[r * d + i] /= sv[i];
    }
  }

  QokvSettings s_;
  KvCacheShape shape_;
  // [layer * n_kv_heads + head]: position of a full-precision token -> attention it received.
  std::vector<std::unordered_map<int32_t, QokvAttention>> attention_;
};

double extra_number(const KvPolicyOptions& o, const std::string& key, double fallback,
                    const char* policy) {
  auto it = o.extra.find(key);
  if (it == o.extra.end()) return fallback;
  try {
    size_t used = 0;
    const double v = std::stod(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument("trailing");
    return v;
  } catch (const std::exception&) {
    throw InvalidArgument(cat(policy, ": setting ", key, "='", it->second, "' is not a number"));
  }
}

KvPolicyFactory block_factory(std::string name, KvQuantFormat kq, KvQuantFormat vq,
                              int64_t residual) {
  return [=](const KvPolicyOptions& o, const KvCacheShape&) -> std::shared_ptr<KvPolicy> {
    const double r = extra_number(o, "residual", static_cast<double>(residual), name.c_str());
    if (r < 0) throw InvalidArgument(cat(name, ": residual ", r, " must be >= 0"));
    return std::make_shared<BlockQuantPolicy>(name, kq, vq, static_cast<int64_t>(r));
  };
}

constexpr KvQuantFormat affine(int bits, int group) {
  return KvQuantFormat{KvCodec::kAffine, static_cast<uint8_t>(bits), static_cast<uint16_t>(group),
                       false};
}

const KvPolicyRegistration kInt8("int8", "uniform int8 K and V per token (scale + zero)",
                                 block_factory("int8", affine(8, 0), affine(8, 0), 0),
                                 {"residual"});
const KvPolicyRegistration kInt4("int4", "uniform int4 K and V per token (scale + zero)",
                                 block_factory("int4", affine(4, 0), affine(4, 0), 0),
                                 {"residual"});
const KvPolicyRegistration kQ80("q8_0", "llama.cpp q8_0 K and V (32-value blocks, f16 scale)",
                                block_factory("q8_0", {KvCodec::kBlock32, 8, 0, false},
                                              {KvCodec::kBlock32, 8, 0, false}, 0),
                                {"residual"});
const KvPolicyRegistration kQ40("q4_0", "llama.cpp q4_0 K and V (32-value blocks, f16 scale)",
                                block_factory("q4_0", {KvCodec::kBlock32, 4, 0, false},
                                              {KvCodec::kBlock32, 4, 0, false}, 0),
                                {"residual"});
const KvPolicyRegistration kKivi2(
    "kivi2", "KIVI 2-bit: K per channel, V per token (groups of 32), f32 residual of 32 tokens",
    block_factory("kivi2", {KvCodec::kChannel, 2, 0, false}, affine(2, 32), 32), {"residual"});
const KvPolicyRegistration kKivi4(
    "kivi4", "KIVI 4-bit: K per channel, V per token (groups of 32), f32 residual of 32 tokens",
    block_factory("kivi4", {KvCodec::kChannel, 4, 0, false}, affine(4, 32), 32), {"residual"});

const KvPolicyRegistration kQokv(
    "qokv",
    "QoKV: top-10% tokens by attention per calibrated group (and per decoded block) keep 8-bit K, "
    "rest 4-bit; V 4-bit affine; f16 residual of 32",
    [](const KvPolicyOptions& o, const KvCacheShape& shape) -> std::shared_ptr<KvPolicy> {
      QokvSettings s;
      s.ratio = extra_number(o, "ratio", s.ratio, "qokv");
      s.decode_ratio = extra_number(o, "decode_ratio", s.ratio, "qokv");
      s.groups = static_cast<int>(extra_number(o, "groups", s.groups, "qokv"));
      s.residual = static_cast<int64_t>(extra_number(o, "residual", 32, "qokv"));
      s.v_bits = static_cast<int>(extra_number(o, "vbits", s.v_bits, "qokv"));
      if (!o.calibration_path.empty()) {
        s.calibration =
            std::make_shared<const QokvCalibration>(load_qokv_calibration(o.calibration_path));
        if (s.calibration->value_group >= 0) s.v_group = s.calibration->value_group;
      }
      s.v_group = static_cast<int>(extra_number(o, "vgroup", s.v_group, "qokv"));
      s.scales = extra_number(o, "scales", 1, "qokv") != 0;
      s.f16_residual = extra_number(o, "f16_residual", 1, "qokv") != 0;
      s.window = static_cast<int>(extra_number(o, "window", s.window, "qokv"));
      if (s.ratio < 0 || s.ratio > 1 || s.decode_ratio < 0 || s.decode_ratio > 1 || s.groups < 1 ||
          s.residual < 0 || s.window < 0 || (s.v_bits != 4 && s.v_bits != 8) || s.v_group < 0 ||
          s.v_group > 4096) {
        throw InvalidArgument(
            cat("qokv: ratio ", s.ratio, " and decode_ratio ", s.decode_ratio, " (0..1), groups ",
                s.groups, " (>= 1), residual ", s.residual, " (>= 0), window ", s.window,
                " (>= 0, 0: all prefill queries), vbits ", s.v_bits, " (4 or 8), vgroup ",
                s.v_group, " (0: symmetric per token, else 1..4096 channels)"));
      }
      return std::make_shared<QokvPolicy>(std::move(s), shape);
    },
    {"ratio", "decode_ratio", "groups", "residual", "vbits", "vgroup", "scales", "f16_residual",
     "window"});

}  // namespace
}  // namespace tandem::llm
