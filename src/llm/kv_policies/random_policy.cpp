// SPDX-License-Identifier: Apache-2.0
// random: keeps uniformly random prefix tokens of every head (seeded by KvPolicyOptions::seed) plus
// the window, at the same budget as the others: the floor every scored policy must beat.
#include <algorithm>
#include <numeric>
#include <random>

#include "llm/kv_policies/window_policy.h"

namespace tandem::llm {
namespace {

class RandomPolicy final : public WindowEvictionPolicy {
 public:
  RandomPolicy(const KvPolicyOptions& o, const KvCacheShape& s)
      : WindowEvictionPolicy("random", o, s, 0), rng_(o.seed) {}

 protected:
  bool needs_scores() const override { return false; }
  std::vector<std::vector<int64_t>> select(int layer, const std::vector<HeadView>& heads,
                                           int64_t keep) override {
    (void)layer;
    std::vector<std::vector<int64_t>> out;
    for (const HeadView& h : heads) {
      std::vector<int64_t> idx(static_cast<size_t>(h.prefix));
      std::iota(idx.begin(), idx.end(), 0);
      std::shuffle(idx.begin(), idx.end(), rng_);
      idx.resize(static_cast<size_t>(std::min<int64_t>(keep, h.prefix)));
      std::sort(idx.begin(), idx.end());
      out.push_back(std::move(idx));
    }
    return out;
  }

 private:
  std::mt19937_64 rng_;
};

KvPolicyRegistration random_policy_registration("random",
                                                "uniformly random prefix tokens (seeded) + window",
                                                [](const KvPolicyOptions& o,
                                                   const KvCacheShape& s) {
                                                  return std::make_shared<RandomPolicy>(o, s);
                                                });

}  // namespace
}  // namespace tandem::llm
