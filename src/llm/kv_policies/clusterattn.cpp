// SPDX-License-Identifier: Apache-2.0
// clusterattn: the ClusterAttn eviction (llm spec 2.2). Per layer, after the prefill: window
// attention votes per token (GQA-averaged), avg-pooled; DBAC finds contiguous high-density token
// ranges per head; all (head, cluster) pairs of the layer are ranked by mass and kept whole while
// the layer's total fits n_kv_heads * (budget - window) (a cluster that does not fit is skipped,
// the next one tried; unused budget stays free unless `fill` spends it on the highest-voted single
// tokens); the window is appended. Parameters come from a calibration file
// (KvPolicyOptions::calibration_path, written by tandem kv-calibrate) or the defaults, and extra
// keys pool / eps / rho / min_len / per_head_fixed / fill override either.
#include <algorithm>

#include "llm/kv_policies/window_policy.h"

namespace tandem::llm {
namespace {

ClusterAttnParams params_from(const KvPolicyOptions& o) {
  ClusterAttnParams p;
  if (!o.calibration_path.empty()) p = load_clusterattn_params(o.calibration_path);
  p.window = o.window;
  p.pool = static_cast<int>(kv_extra_number(o, "pool", p.pool, 0, 1024, "clusterattn"));
  p.dbac.eps = static_cast<int>(kv_extra_number(o, "eps", p.dbac.eps, 0, 1 << 20, "clusterattn"));
  p.dbac.rho = kv_extra_number(o, "rho", p.dbac.rho, 0, 1e6, "clusterattn");
  p.dbac.min_len =
      static_cast<int>(kv_extra_number(o, "min_len", p.dbac.min_len, 0, 1 << 20, "clusterattn"));
  p.per_head_fixed = kv_extra_number(o, "per_head_fixed", p.per_head_fixed, 0, 1, "clusterattn");
  p.fill = kv_extra_number(o, "fill", p.fill, 0, 1, "clusterattn");
  return p;
}

class ClusterAttnPolicy final : public WindowEvictionPolicy {
 public:
  ClusterAttnPolicy(const KvPolicyOptions& o, const KvCacheShape& s)
      : WindowEvictionPolicy("clusterattn", o, s, o.window), params_(params_from(o)) {}

 protected:
  std::vector<std::vector<int64_t>> select(int layer, const std::vector<HeadView>& heads,
                                           int64_t keep) override {
    (void)layer;
    struct Candidate {
      double mass;
      int head;
      TokenCluster cluster;
    };
    std::vector<Candidate> all;
    for (size_t h = 0; h < heads.size(); ++h) {
      for (const TokenCluster& c :
           dbac_clusters(avg_pool_1d(heads[h].scores, params_.pool), params_.dbac)) {
        all.push_back({c.mass, static_cast<int>(h), c});
      }
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const Candidate& a, const Candidate& b) { return a.mass > b.mass; });
    const int64_t layer_total = keep * static_cast<int64_t>(heads.size());
    int64_t used = 0;
    std::vector<int64_t> head_used(heads.size(), 0);
    std::vector<std::vector<int64_t>> out(heads.size());
    for (const Candidate& c : all) {
      const int64_t len = c.cluster.end - c.cluster.begin;
      const bool fits =
          params_.per_head_fixed ? head_used[c.head] + len <= keep : used + len <= layer_total;
      if (!fits) continue;
      used += len;
      head_used[c.head] += len;
      for (int64_t j = c.cluster.begin; j < c.cluster.end; ++j) out[c.head].push_back(j);
    }
    if (params_.fill) fill_budget(heads, keep, layer_total - used, head_used, out);
    for (auto& o : out) std::sort(o.begin(), o.end());
    return out;
  }

  // Adds the highest-voted tokens the clusters left out, while the budget (the layer's `free`
  // tokens, or each head's `keep` with per_head_fixed) allows.
  void fill_budget(const std::vector<HeadView>& heads, int64_t keep, int64_t free,
                   std::vector<int64_t>& head_used, std::vector<std::vector<int64_t>>& out) const {
    struct Token {
      float vote;
      int head;
      int64_t slot;
    };
    std::vector<Token> rest;
    for (size_t h = 0; h < heads.size(); ++h) {
      std::vector<char> kept(heads[h].scores.size(), 0);
      for (int64_t j : out[h]) kept[static_cast<size_t>(j)] = 1;
      for (size_t j = 0; j < heads[h].scores.size(); ++j) {
        if (!kept[j])
          rest.push_back({heads[h].scores[j], static_cast<int>(h), static_cast<int64_t>(j)});
      }
    }
    std::stable_sort(rest.begin(), rest.end(),
                     [](const Token& a, const Token& b) { return a.vote > b.vote; });
    for (const Token& t : rest) {
      if (!params_.per_head_fixed && free <= 0) break;
      if (params_.per_head_fixed && head_used[t.head] >= keep) continue;
      out[t.head].push_back(t.slot);
      ++head_used[t.head];
      --free;
    }
  }

 private:
  ClusterAttnParams params_;
};

KvPolicyRegistration clusterattn_registration(
    "clusterattn",
    "window-attention votes, DBAC density clusters kept whole by mass up to the layer budget, "
    "window appended (calibration file or extra pool/eps/rho/min_len/fill)",
    [](const KvPolicyOptions& o, const KvCacheShape& s) {
      return std::make_shared<ClusterAttnPolicy>(o, s);
    },
    {"pool", "eps", "rho", "min_len", "per_head_fixed", "fill"});

}  // namespace
}  // namespace tandem::llm
