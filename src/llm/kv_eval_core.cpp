// SPDX-License-Identifier: Apache-2.0
// kv-eval building blocks: recorded prefill, compressed copies with attention probes,
// teacher-forced log-probabilities (kv_eval_internal.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/clock.h"
#include "llm/kv_eval_internal.h"
#include "tandem/core/allocator.h"
#include "tandem/core/error.h"

namespace tandem::llm::kv_eval_detail {
namespace {

// Keeps the last `window` prompt query rows of every layer.
class RecorderPolicy final : public KvPolicy {
 public:
  RecorderPolicy(int layers, int window) : window_(window), rows_(layers), pos_(layers) {}
  std::string name() const override { return "full"; }
  int query_window() const override { return window_; }
  void observe_queries(const KvCache&, int layer, const Tensor& q,
                       std::span<const int32_t> positions, bool prefill) override {
    if (!prefill) return;
    row_ = q.size(1) * q.size(2);
    heads_ = q.size(1);
    const Tensor qc = q.contiguous();
    auto& r = rows_[layer];
    auto& p = pos_[layer];
    r.insert(r.end(), qc.data<float>(), qc.data<float>() + q.numel());
    p.insert(p.end(), positions.begin(), positions.end());
    const int64_t extra = static_cast<int64_t>(p.size()) - window_;
    if (extra > 0) {
      r.erase(r.begin(), r.begin() + extra * row_);
      p.erase(p.begin(), p.begin() + extra);
    }
  }
  int window_;
  int64_t row_ = 0, heads_ = 0;
  std::vector<std::vector<float>> rows_;
  std::vector<std::vector<int32_t>> pos_;
};

// Row `slot` of a block as f32.
void read_row(const KvBlock& b, const Tensor& t, int64_t slot, int64_t d, float* out) {
  if (b.dtype == DType::kF32) {
    std::memcpy(out, t.data<float>() + slot * d, d * sizeof(float));
  } else if (b.dtype == DType::kF16) {
    const auto* h = static_cast<const uint16_t*>(t.raw_data()) + slot * d;
    for (int64_t i = 0; i < d; ++i) out[i] = f16_to_f32(h[i]);
  } else {
    throw Unsupported(cat("kv-eval attention probe: blocks of dtype ", dtype_name(b.dtype)));
  }
}

}  // namespace

std::vector<int32_t> encode_prefix(const Tokenizer& tokenizer, const std::string& text,
                                   int64_t need, const std::string& what) {
  size_t chars = static_cast<size_t>(need) * 6;
  while (true) {
    std::vector<int32_t> ids =
        tokenizer.encode(text.substr(0, std::min(chars, text.size())), true, false);
    if (static_cast<int64_t>(ids.size()) >= need) return ids;
    if (chars >= text.size()) {
      throw InvalidArgument(cat(what, ": the text has ", ids.size(), " tokens, ", need, " needed"));
    }
    chars *= 2;
  }
}

Prefilled prefill_recorded(const Model& model, std::span<const int32_t> tokens, int window,
                           int chunk) {
  const int layers = model.config().n_layers;
  auto recorder = std::make_shared<RecorderPolicy>(layers, window);
  Prefilled p{model.make_cache(recorder), {}, {}, {}, 0};
  const auto t0 = std::chrono::steady_clock::now();
  Tensor logits;
  std::vector<int32_t> pos;
  for (size_t off = 0; off < tokens.size(); off += static_cast<size_t>(chunk)) {
    const size_t n = std::min<size_t>(static_cast<size_t>(chunk), tokens.size() - off);
    pos.resize(n);
    std::iota(pos.begin(), pos.end(), static_cast<int32_t>(off));
    logits = model.forward(tokens.subspan(off, n), pos, p.cache, {.last_only = true});
  }
  p.prefill_s = seconds_since(t0);
  p.last_logits.assign(logits.data<float>(), logits.data<float>() + logits.numel());
  for (int l = 0; l < layers; ++l) {
    const int64_t w = static_cast<int64_t>(recorder->pos_[l].size());
    p.queries.push_back(Tensor::from_vector(
        recorder->rows_[l], {w, recorder->heads_, recorder->row_ / recorder->heads_}, DType::kF32));
    p.positions.push_back(recorder->pos_[l]);
  }
  return p;
}

void ProbePolicy::set_shadow(KvCache* shadow) {
  shadow_ = shadow;
  const int layers = shadow ? shadow->shape().n_layers : 0;
  err_sum_.assign(layers, 0.0);
  err_count_.assign(layers, 0);
}

void ProbePolicy::observe_queries(const KvCache& cache, int layer, const Tensor& q,
                                  std::span<const int32_t> positions, bool prefill) {
  if (prefill || inner_->observes_decode_queries()) {
    const int w = inner_->query_window();
    const int64_t rows = q.size(0);
    if (prefill && w <= 0) {
      // the inner policy wants no queries
    } else if (prefill && w < rows) {
      inner_->observe_queries(cache, layer, q.slice(0, rows - w, rows).contiguous(),
                              positions.subspan(positions.size() - w), true);
    } else {
      inner_->observe_queries(cache, layer, q, positions, prefill);
    }
  }
  if (prefill || shadow_ == nullptr) return;
  // The step's K/V: the last slot of every head of the compressed cache.
  const KvCacheShape& s = cache.shape();
  const int64_t d = s.head_dim, hkv = s.n_kv_heads;
  std::vector<float> k(static_cast<size_t>(hkv * d)), v(k.size());
  std::vector<int32_t> pos(1, -1);
  for (int h = 0; h < hkv; ++h) {
    const KvBlock& b = cache.blocks(layer, h).back();
    read_row(b, b.k, b.used - 1, d, k.data() + h * d);
    read_row(b, b.v, b.used - 1, d, v.data() + h * d);
    pos[0] = b.positions[b.used - 1];
  }
  shadow_->append(layer, Tensor::from_vector(k, {1, hkv, d}, DType::kF32),
                  Tensor::from_vector(v, {1, hkv, d}, DType::kF32), pos);
  Tensor o = Tensor::empty(q.shape(), DType::kF32), o2 = Tensor::empty(q.shape(), DType::kF32);
  cache_attention(q, positions, *shadow_, layer, o);
  cache_attention(q, positions, cache, layer, o2);
  double num = 0, den = 0;
  for (int64_t i = 0; i < o.numel(); ++i) {
    const double a = o.data<float>()[i], b = o2.data<float>()[i];
    num += (a - b) * (a - b);
    den += a * a;
  }
  err_sum_[layer] += den > 0 ? std::sqrt(num / den) : 0.0;
  ++err_count_[layer];
}

std::vector<double> ProbePolicy::attention_errors() const {
  std::vector<double> out(err_sum_.size(), 0.0);
  for (size_t l = 0; l < out.size(); ++l) {
    if (err_count_[l] > 0) out[l] = err_sum_[l] / static_cast<double>(err_count_[l]);
  }
  return out;
}

Compressed compress_copy(const Prefilled& p, std::shared_ptr<KvPolicy> policy) {
  const int64_t before = memory_stats(p.cache.shape().device).current_bytes;
  auto probe = std::make_shared<ProbePolicy>(std::move(policy));
  Compressed c{p.cache.clone(probe), probe, 0, 0, 0};
  for (size_t l = 0; l < p.queries.size(); ++l) {
    if (probe->query_window() > 0) {
      probe->observe_queries(c.cache, static_cast<int>(l), p.queries[l], p.positions[l], true);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  c.cache.policy().on_prefill_done(c.cache);
  c.compress_s = seconds_since(t0);
  c.bytes = memory_stats(p.cache.shape().device).current_bytes - before;
  const KvCacheShape& s = c.cache.shape();
  int64_t total = 0;
  for (int l = 0; l < s.n_layers; ++l) {
    for (int h = 0; h < s.n_kv_heads; ++h) total += c.cache.tokens(l, h);
  }
  c.tokens_per_head = static_cast<double>(total) / (s.n_layers * s.n_kv_heads);
  return c;
}

std::vector<double> log_softmax(std::span<const float> logits) {
  double mx = -INFINITY;
  for (float x : logits) mx = std::max(mx, static_cast<double>(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(x - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - lse;
  return out;
}

std::vector<std::vector<double>> teacher_forced_log_probs(const Model& model, KvCache& cache,
                                                          std::span<const int32_t> tokens,
                                                          int32_t start, DecodeArithmetic decode) {
  std::vector<std::vector<double>> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t tok[1] = {tokens[i]}, pos[1] = {start + static_cast<int32_t>(i)};
    const Tensor logits = model.forward(tok, pos, cache, {.last_only = true, .decode = decode});
    cache.policy().on_decode_step(cache);
    out.push_back(log_softmax(std::span<const float>(logits.data<float>(), logits.numel())));
  }
  return out;
}

}  // namespace tandem::llm::kv_eval_detail
