// SPDX-License-Identifier: Apache-2.0
// forward_prefill_observed: a prefill forward after which the cache's policy has seen its query
// window, whether or not the model delivers queries itself (see kv_quant.h).
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/llm/kv_quant.h"

namespace tandem::llm {
namespace {

class ObservedPolicy final : public KvPolicy {
 public:
  explicit ObservedPolicy(std::shared_ptr<KvPolicy> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  void on_prefill_done(KvCache& cache) override { inner_->on_prefill_done(cache); }
  void on_decode_step(KvCache& cache) override { inner_->on_decode_step(cache); }
  int query_window() const override { return inner_->query_window(); }
  bool observes_decode_queries() const override { return inner_->observes_decode_queries(); }
  void observe_queries(const KvCache& cache, int layer, const Tensor& q,
                       std::span<const int32_t> positions, bool prefill) override {
    if (prefill) seen_.insert(layer);
    inner_->observe_queries(cache, layer, q, positions, prefill);
  }
  KvPolicy& inner() { return *inner_; }
  std::set<int> seen_;  // layers the model delivered prefill queries for

 private:
  std::shared_ptr<KvPolicy> inner_;
};

struct Recorded {
  Tensor q;
  std::vector<int32_t> positions;
};

}  // namespace

std::shared_ptr<KvPolicy> observed_policy(std::shared_ptr<KvPolicy> inner) {
  if (!inner) throw InvalidArgument("observed_policy: no policy");
  return std::make_shared<ObservedPolicy>(std::move(inner));
}

Tensor forward_prefill_observed(const Model& model, std::span<const int32_t> tokens,
                                std::span<const int32_t> positions, KvCache& cache,
                                const ForwardOptions& options) {
  auto* policy = dynamic_cast<ObservedPolicy*>(&cache.policy());
  const int w = cache.policy().query_window();
  if (policy == nullptr || w <= 0) return model.forward(tokens, positions, cache, options);
  policy->seen_.clear();
  std::map<int, Recorded> recorded;
  Tensor logits;
  {
    ScopedAttentionTap tap(
        [&](const KvCache&, int layer, const Tensor& q, std::span<const int32_t> pos) {
          const int64_t rows = q.size(0), keep = std::min<int64_t>(w, rows);
          Recorded& r = recorded[layer];
          r.q = q.slice(0, rows - keep, rows).contiguous();
          r.positions.assign(pos.end() - keep, pos.end());
        });
    logits = model.forward(tokens, positions, cache, options);
  }
  for (auto& [layer, r] : recorded) {
    if (policy->seen_.count(layer) == 0) {
      policy->inner().observe_queries(cache, layer, r.q, r.positions, true);
    }
  }
  return logits;
}

}  // namespace tandem::llm
