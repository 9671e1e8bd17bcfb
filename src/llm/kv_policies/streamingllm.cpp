// SPDX-License-Identifier: Apache-2.0
// streamingllm: the first `sinks` tokens (attention sinks, extra "sinks", default 4) and the most
// recent budget - sinks tokens of every head, kept so during decode too (the oldest non-sink token
// leaves as each new one arrives). Positions are kept as they were rotated; the paper re-assigns
// positions inside the cache, which only matters beyond the model's trained context.
#include <algorithm>

#include "llm/kv_policies/window_policy.h"
#include "tandem/core/error.h"

namespace tandem::llm {
namespace {

class StreamingLlmPolicy final : public KvPolicy {
 public:
  StreamingLlmPolicy(const KvPolicyOptions& o, const KvCacheShape& s)
      : options_(o),
        sinks_(static_cast<int64_t>(kv_extra_number(o, "sinks", 4, 0, 1 << 20, "streamingllm"))) {
    resolve_kv_budget(o, 1, "streamingllm");  // rejects a missing budget now
    (void)s;
  }
  std::string name() const override { return "streamingllm"; }
  void on_prefill_done(KvCache& cache) override {
    budget_ = resolve_kv_budget(options_, cache.max_tokens(), "streamingllm");
    trim(cache);
  }
  void on_decode_step(KvCache& cache) override {
    if (budget_ > 0) trim(cache);
  }

 private:
  void trim(KvCache& cache) const {
    const KvCacheShape& s = cache.shape();
    const int64_t sinks = std::min(sinks_, budget_);
    for (int l = 0; l < s.n_layers; ++l) {
      for (int h = 0; h < s.n_kv_heads; ++h) {
        const int64_t n = cache.tokens(l, h);
        if (n <= budget_) continue;
        std::vector<int64_t> slots;
        for (int64_t j = 0; j < sinks; ++j) slots.push_back(j);
        for (int64_t j = n - (budget_ - sinks); j < n; ++j) slots.push_back(j);
        cache.retain(l, h, slots);
      }
    }
  }

  KvPolicyOptions options_;
  int64_t sinks_;
  int64_t budget_ = 0;  // resolved when the prefill ends
};

KvPolicyRegistration streamingllm_registration(
    "streamingllm", "attention sinks (extra sinks=4) + the most recent tokens, rolling in decode",
    [](const KvPolicyOptions& o, const KvCacheShape& s) {
      return std::make_shared<StreamingLlmPolicy>(o, s);
    },
    {"sinks"});

}  // namespace
}  // namespace tandem::llm
