// SPDX-License-Identifier: Apache-2.0
// h2o: heavy hitters + recent tokens. Every cached token carries the attention it received,
// accumulated over the observed prompt window queries and then every decode query (GQA groups
// averaged). When the prefill ends each head keeps its recent tail (extra "recent_ratio" of the
// budget, default 0.5: H2O's equal heavy/recent split) and the highest-scored older tokens; during
// decode, whenever a head exceeds the budget, its lowest-scored non-recent token is evicted.
#include <algorithm>
#include <cmath>

#include "llm/kv_policies/window_policy.h"

namespace tandem::llm {
namespace {

class H2oPolicy final : public WindowEvictionPolicy {
 public:
  H2oPolicy(const KvPolicyOptions& o, const KvCacheShape& s)
      : WindowEvictionPolicy("h2o", o, s, o.window),
        recent_ratio_(kv_extra_number(o, "recent_ratio", 0.5, 0, 1, "h2o")),
        acc_(static_cast<size_t>(s.n_layers) * s.n_kv_heads) {}

  bool observes_decode_queries() const override { return true; }

  void observe_queries(const KvCache& cache, int layer, const Tensor& q,
                       std::span<const int32_t> positions, bool prefill) override {
    if (prefill) {
      WindowEvictionPolicy::observe_queries(cache, layer, q, positions, prefill);
      return;
    }
    const auto scores = window_attention_scores(cache, layer, q, positions);
    for (int h = 0; h < cache.shape().n_kv_heads; ++h) {
      auto& acc = head_acc(layer, h);
      acc.resize(scores[h].size(), 0.0f);  // newly appended tokens start at zero
      for (size_t j = 0; j < acc.size(); ++j) acc[j] += scores[h][j];
    }
  }

  void on_prefill_done(KvCache& cache) override {
    budget_ = resolve_kv_budget(options(), cache.max_tokens(), "h2o");
    for (auto& a : acc_) a.clear();
    WindowEvictionPolicy::on_prefill_done(cache);
  }

  void on_decode_step(KvCache& cache) override {
    if (budget_ <= 0) return;
    const int64_t recent = recent_tokens(budget_);
    for (int l = 0; l < cache.shape().n_layers; ++l) {
      for (int h = 0; h < cache.shape().n_kv_heads; ++h) {
        const int64_t n = cache.tokens(l, h);
        if (n <= budget_) continue;
        auto& acc = head_acc(l, h);
        acc.resize(static_cast<size_t>(n), 0.0f);
        // Evict the lowest-scored tokens outside the recent tail until the head fits.
        std::vector<int64_t> order(static_cast<size_t>(n - recent));
        for (size_t j = 0; j < order.size(); ++j) order[j] = static_cast<int64_t>(j);
        const int64_t drop = n - budget_;
        std::partial_sort(order.begin(), order.begin() + drop, order.end(),
                          [&](int64_t a, int64_t b) { return acc[a] < acc[b]; });
        std::vector<char> gone(static_cast<size_t>(n), 0);
        for (int64_t i = 0; i < drop; ++i) gone[order[i]] = 1;
        std::vector<int64_t> slots;
        std::vector<float> kept;
        for (int64_t j = 0; j < n; ++j) {
          if (gone[j]) continue;
          slots.push_back(j);
          kept.push_back(acc[j]);
        }
        cache.retain(l, h, slots);
        acc = std::move(kept);
      }
    }
  }

 protected:
  int64_t recent_tokens(int64_t budget) const override {
    return std::min<int64_t>(budget, static_cast<int64_t>(std::llround(recent_ratio_ * budget)));
  }
  std::vector<std::vector<int64_t>> select(int layer, const std::vector<HeadView>& heads,
                                           int64_t keep) override {
    (void)layer;
    std::vector<std::vector<int64_t>> out;
    for (const HeadView& h : heads) out.push_back(top_k_indices(h.scores, keep));
    return out;
  }
  void on_retained(int layer, int head, std::span<const int64_t> slots,
                   const std::vector<float>& scores) override {
    auto& acc = head_acc(layer, head);
    acc.clear();
    for (int64_t s : slots) acc.push_back(scores[s]);
  }

 private:
  std::vector<float>& head_acc(int layer, int head) {
    return acc_[static_cast<size_t>(layer) * shape().n_kv_heads + head];
  }

  double recent_ratio_;
  std::vector<std::vector<float>> acc_;  // [layer * n_kv_heads + head][slot]
  int64_t budget_ = 0;
};

KvPolicyRegistration h2o_registration(
    "h2o", "heavy hitters by accumulated attention + recent tokens (extra recent_ratio=0.5)",
    [](const KvPolicyOptions& o, const KvCacheShape& s) {
      return std::make_shared<H2oPolicy>(o, s);
    },
    {"recent_ratio"});

}  // namespace
}  // namespace tandem::llm
