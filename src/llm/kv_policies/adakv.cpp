// SPDX-License-Identifier: Apache-2.0
// adakv: head-wise budgets on SnapKV scores. Each head first gets its top alpha * keep tokens (the
// safeguard, extra "alpha", default 0.20); the rest of the layer's n_kv_heads * keep prefix budget
// goes to the highest remaining scores over all heads of the layer, so heads with concentrated
// attention give budget to heads with spread attention (llm spec 3.2).
#include <algorithm>
#include <cmath>
#include <tuple>

#include "llm/kv_policies/window_policy.h"

namespace tandem::llm {
namespace {

class AdaKvPolicy final : public WindowEvictionPolicy {
 public:
  AdaKvPolicy(const KvPolicyOptions& o, const KvCacheShape& s)
      : WindowEvictionPolicy("adakv", o, s, o.window),
        pool_(static_cast<int>(kv_extra_number(o, "pool", 5, 0, 1024, "adakv"))),
        alpha_(kv_extra_number(o, "alpha", 0.2, 0, 1, "adakv")) {}

 protected:
  std::vector<std::vector<int64_t>> select(int layer, const std::vector<HeadView>& heads,
                                           int64_t keep) override {
    (void)layer;
    const int64_t safe = static_cast<int64_t>(std::floor(alpha_ * static_cast<double>(keep)));
    std::vector<std::vector<float>> pooled;
    std::vector<std::vector<char>> taken;
    std::vector<std::vector<int64_t>> out;
    int64_t left = 0;
    for (const HeadView& h : heads) {
      pooled.push_back(avg_pool_1d(h.scores, pool_));
      out.push_back(top_k_indices(pooled.back(), safe));
      taken.emplace_back(h.scores.size(), 0);
      for (int64_t j : out.back()) taken.back()[j] = 1;
      left += std::min<int64_t>(keep, h.prefix) - static_cast<int64_t>(out.back().size());
    }
    // One top-k over every remaining (score, head, slot) of the layer.
    std::vector<std::tuple<float, int, int64_t>> rest;
    for (size_t h = 0; h < heads.size(); ++h) {
      for (size_t j = 0; j < pooled[h].size(); ++j) {
        if (!taken[h][j]) rest.emplace_back(pooled[h][j], static_cast<int>(h), j);
      }
    }
    left = std::min<int64_t>(left, static_cast<int64_t>(rest.size()));
    std::partial_sort(
        rest.begin(), rest.begin() + left, rest.end(), [](const auto& a, const auto& b) {
          return std::get<0>(a) > std::get<0>(b) ||
                 (std::get<0>(a) == std::get<0>(b) && std::tie(std::get<1>(a), std::get<2>(a)) <
                                                          std::tie(std::get<1>(b), std::get<2>(b)));
        });
    for (int64_t i = 0; i < left; ++i) out[std::get<1>(rest[i])].push_back(std::get<2>(rest[i]));
    for (auto& o : out) std::sort(o.begin(), o.end());
    return out;
  }

 private:
  int pool_;
  double alpha_;
};

KvPolicyRegistration adakv_registration(
    "adakv", "SnapKV scores, one top-k over a layer's heads with a per-head safeguard (alpha=0.2)",
    [](const KvPolicyOptions& o, const KvCacheShape& s) {
      return std::make_shared<AdaKvPolicy>(o, s);
    },
    {"pool", "alpha"});

}  // namespace
}  // namespace tandem::llm
