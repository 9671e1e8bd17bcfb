// SPDX-License-Identifier: Apache-2.0
// The KV-quantization policies (uniform int8/int4, llama.cpp q8_0/q4_0, KIVI, QoKV) and their
// registration; see kv_quant.h.
#include <algorithm>
#include <map>
#include <memory>
#include <string>

#include "tandem/core/error.h"
#include "tandem/core/log.h"
#include "tandem/llm/kv_policy_registry.h"
#include "tandem/llm/kv_quant.h"

namespace tandem::llm {
namespace {

// Quantizes the full f32/f16 blocks of every head that lie entirely before the `residual` most
// recent tokens, with K format kq and V format vq (channel-scaled when the head has scales and
// use_scales is set).
void quantize_old_blocks(KvCache& cache, const KvQuantFormat& kq, const KvQuantFormat& vq,
                         int64_t residual, bool use_scales) {
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
      const Tensor* sc = use_scales ? cache.channel_scales(l, h) : nullptr;
      std::vector<KvBlock> out;
      after = cache.tokens(l, h);
      for (const KvBlock& b : list) {
        after -= b.used;
        if (b.quantized() || b.used != cs.block_tokens || after < residual) {
          out.push_back(b);
          continue;
        }
        kv_block_rows(cache, l, h, b, k, v);
        if (sc != nullptr) {
          const float* sk = sc->data<float>();
          const float* sv = sk + cs.head_dim;
          for (int32_t s = 0; s < b.used; ++s) {
            for (int i = 0; i < cs.head_dim; ++i) {
              k[s * cs.head_dim + i] /= sk[i];
              v[s * cs.head_dim + i] /= sv[i];
            }
          }
        }
        out.push_back(
            kv_make_block(cache, kq, vq, k.data(), v.data(), b.positions, {}, sc != nullptr));
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
  void on_prefill_done(KvCache& cache) override {
    quantize_old_blocks(cache, kq_, vq_, residual_, false);
  }
  void on_decode_step(KvCache& cache) override {
    quantize_old_blocks(cache, kq_, vq_, residual_, false);
  }

 private:
  std::string name_;
  KvQuantFormat kq_, vq_;
  int64_t residual_;
};

struct QokvSettings {
  double ratio = 0.1;     // fraction of prompt tokens with 8-bit keys
  int groups = 10;        // contiguous groups when there is no calibration
  int window = 32;        // observed queries
  int64_t residual = 32;  // decode tokens kept f32
  std::shared_ptr<const QokvCalibration> calibration;
};

class QokvPolicy final : public KvPolicy {
 public:
  QokvPolicy(QokvSettings s, const KvCacheShape& shape) : s_(std::move(s)), shape_(shape) {
    importance_.resize(static_cast<size_t>(shape.n_layers) * shape.n_kv_heads);
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
  int query_window() const override { return s_.window; }

  void observe_queries(const KvCache& cache, int layer, const Tensor& q,
                       std::span<const int32_t> positions, bool prefill) override {
    if (!prefill) return;
    const KvCacheShape& cs = cache.shape();
    const int n_heads = static_cast<int>(q.size(1)), group = n_heads / cs.n_kv_heads;
    std::vector<float> k, v, kh;
    std::vector<int32_t> kpos;
    for (int h = 0; h < cs.n_kv_heads; ++h) {
      kh.clear(), kpos.clear();
      for (const KvBlock& b : cache.blocks(layer, h)) {
        if (b.quantized()) continue;  // earlier turns' codes are not re-selected
        kv_block_rows(cache, layer, h, b, k, v);
        kh.insert(kh.end(), k.begin(), k.end());
        kpos.insert(kpos.end(), b.positions.begin(), b.positions.end());
      }
      const std::vector<float> a = qokv_importance(q.data<float>(), positions, n_heads, h * group,
                                                   group, kh.data(), kpos, cs.head_dim);
      auto& imp = importance_[static_cast<size_t>(layer) * cs.n_kv_heads + h];
      for (size_t j = 0; j < kpos.size(); ++j) imp[kpos[j]] = a[j];
    }
  }

  void on_prefill_done(KvCache& cache) override {
    const KvCacheShape& cs = cache.shape();
    const int64_t d = cs.head_dim;
    std::vector<float> k, v, kk, vv, imp;
    std::vector<int32_t> pos;
    bool warned = false;
    for (int l = 0; l < cs.n_layers; ++l) {
      const QokvLayerCalibration* lc =
          s_.calibration ? &s_.calibration->layers[static_cast<size_t>(l)] : nullptr;
      for (int h = 0; h < cs.n_kv_heads; ++h) {
        if (lc != nullptr && cache.channel_scales(l, h) == nullptr) {
          cache.set_channel_scales(l, h, lc->k_scale[h], lc->v_scale[h]);
        }
        const Tensor* sc = lc != nullptr ? cache.channel_scales(l, h) : nullptr;
        auto& seen = importance_[static_cast<size_t>(l) * cs.n_kv_heads + h];
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
            imp.push_back(it != seen.end() ? it->second : 0.0f);
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
        if (sc != nullptr) {
          const float* sk = sc->data<float>();
          const float* sv = sk + d;
          for (size_t s = 0; s < pos.size(); ++s) {
            for (int64_t i = 0; i < d; ++i) kk[s * d + i] /= sk[i], vv[s * d + i] /= sv[i];
          }
        }
        const KvQuantFormat kq{KvCodec::kSymmetric, 8, 0, true};
        const KvQuantFormat vq{KvCodec::kSymmetric, 4, 0, false};
        for (size_t s = 0; s < pos.size(); s += cs.block_tokens) {
          const size_t n = std::min<size_t>(cs.block_tokens, pos.size() - s);
          out.push_back(kv_make_block(cache, kq, vq, kk.data() + s * d, vv.data() + s * d,
                                      std::span<const int32_t>(pos).subspan(s, n),
                                      std::span<const uint8_t>(wide).subspan(s, n), sc != nullptr));
        }
        cache.replace_blocks(l, h, std::move(out));
      }
    }
  }

  // Reconstruction (decode): tokens leaving the residual get 4-bit keys and values.
  void on_decode_step(KvCache& cache) override {
    quantize_old_blocks(cache, KvQuantFormat{KvCodec::kSymmetric, 4, 0, false},
                        KvQuantFormat{KvCodec::kSymmetric, 4, 0, false}, s_.residual, true);
  }

 private:
  QokvSettings s_;
  KvCacheShape shape_;
  std::vector<std::map<int32_t, float>> importance_;  // [layer * n_kv_heads + head]: pos -> ā
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
                                 block_factory("int8", affine(8, 0), affine(8, 0), 0));
const KvPolicyRegistration kInt4("int4", "uniform int4 K and V per token (scale + zero)",
                                 block_factory("int4", affine(4, 0), affine(4, 0), 0));
const KvPolicyRegistration kQ80("q8_0", "llama.cpp q8_0 K and V (32-value blocks, f16 scale)",
                                block_factory("q8_0", {KvCodec::kBlock32, 8, 0, false},
                                              {KvCodec::kBlock32, 8, 0, false}, 0));
const KvPolicyRegistration kQ40("q4_0", "llama.cpp q4_0 K and V (32-value blocks, f16 scale)",
                                block_factory("q4_0", {KvCodec::kBlock32, 4, 0, false},
                                              {KvCodec::kBlock32, 4, 0, false}, 0));
const KvPolicyRegistration kKivi2(
    "kivi2", "KIVI 2-bit: K per channel, V per token (groups of 32), f32 residual of 32 tokens",
    block_factory("kivi2", {KvCodec::kChannel, 2, 0, false}, affine(2, 32), 32));
const KvPolicyRegistration kKivi4(
    "kivi4", "KIVI 4-bit: K per channel, V per token (groups of 32), f32 residual of 32 tokens",
    block_factory("kivi4", {KvCodec::kChannel, 4, 0, false}, affine(4, 32), 32));

const KvPolicyRegistration kQokv(
    "qokv",
    "QoKV: top-10% tokens by window attention per calibrated group keep 8-bit K, rest 4-bit; V "
    "4-bit",
    [](const KvPolicyOptions& o, const KvCacheShape& shape) -> std::shared_ptr<KvPolicy> {
      QokvSettings s;
      s.ratio = extra_number(o, "ratio", s.ratio, "qokv");
      s.groups = static_cast<int>(extra_number(o, "groups", s.groups, "qokv"));
      s.residual = static_cast<int64_t>(extra_number(o, "residual", 32, "qokv"));
      s.window = o.window;
      if (s.ratio < 0 || s.ratio > 1 || s.groups < 1 || s.residual < 0 || s.window < 1) {
        throw InvalidArgument(cat("qokv: ratio ", s.ratio, " (0..1), groups ", s.groups,
                                  " (>= 1), residual ", s.residual, " (>= 0), window ", s.window,
                                  " (>= 1)"));
      }
      if (!o.calibration_path.empty()) {
        s.calibration =
            std::make_shared<const QokvCalibration>(load_qokv_calibration(o.calibration_path));
      }
      return std::make_shared<QokvPolicy>(std::move(s), shape);
    });

}  // namespace
}  // namespace tandem::llm
