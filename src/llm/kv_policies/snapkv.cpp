// SPDX-License-Identifier: Apache-2.0
// snapkv: observation-window attention scores, pooled (avg, or max with pool_type=max), top-k
// prefix tokens per head, the window appended (llm spec 3.2).
#include "llm/kv_policies/window_policy.h"

namespace tandem::llm {
namespace {

class SnapKvPolicy final : public WindowEvictionPolicy {
 public:
  SnapKvPolicy(const KvPolicyOptions& o, const KvCacheShape& s)
      : WindowEvictionPolicy("snapkv", o, s, o.window),
        pool_(static_cast<int>(kv_extra_number(o, "pool", 5, 0, 1024, "snapkv"))),
        max_pool_(kv_extra_number(o, "max_pool", 0, 0, 1, "snapkv") != 0) {}

 protected:
  std::vector<std::vector<int64_t>> select(int layer, const std::vector<HeadView>& heads,
                                           int64_t keep) override {
    (void)layer;
    std::vector<std::vector<int64_t>> out;
    for (const HeadView& h : heads) {
      const auto pooled = max_pool_ ? max_pool_1d(h.scores, pool_) : avg_pool_1d(h.scores, pool_);
      out.push_back(top_k_indices(pooled, keep));
    }
    return out;
  }

 private:
  int pool_;
  bool max_pool_;
};

KvPolicyRegistration snapkv_registration(
    "snapkv", "window attention, pooled (extra pool=5, max_pool=0), top-k per head + window",
    [](const KvPolicyOptions& o, const KvCacheShape& s) {
      return std::make_shared<SnapKvPolicy>(o, s);
    },
    {"pool", "max_pool"});

}  // namespace
}  // namespace tandem::llm
