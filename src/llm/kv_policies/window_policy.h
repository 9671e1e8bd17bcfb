// SPDX-License-Identifier: Apache-2.0
// Internal: the frame shared by the prefill-time eviction policies (snapkv, pyramidkv, adakv,
// random, clusterattn, h2o). It keeps the last query_window() prompt queries of every layer as the
// model observes them; when the prefill ends it scores each layer's slots by window attention,
// lets the policy pick which prefix slots of each head stay, and retains those plus the recent
// tail (the window) of each head, freeing the rest.
#pragma once

#include <string>
#include <vector>

#include "tandem/llm/kv_policies.h"

namespace tandem::llm {

// options.extra[key] as a number (default when absent); InvalidArgument naming the policy and the
// key when it does not parse or lies outside [lo, hi].
double kv_extra_number(const KvPolicyOptions& options, const std::string& key, double fallback,
                       double lo, double hi, const std::string& policy);

class WindowEvictionPolicy : public KvPolicy {
 public:
  WindowEvictionPolicy(std::string name, const KvPolicyOptions& options, const KvCacheShape& shape,
                       int query_window);
  std::string name() const override { return name_; }
  int query_window() const override { return query_window_; }
  void observe_queries(const KvCache& cache, int layer, const Tensor& q,
                       std::span<const int32_t> positions, bool prefill) override;
  void on_prefill_done(KvCache& cache) override;

 protected:
  // What one head of a layer offers the selection: scores of its prefix slots (those before the
  // recent tail) and how many of them the budget allows (per head; policies with other budget
  // splits use the layer total n_kv_heads * keep).
  struct HeadView {
    std::vector<float> scores;  // raw window-attention score per prefix slot
    int64_t prefix = 0;         // prefix slots (scores.size(), or the count when not scored)
  };
  // Returns, per head, the kept prefix slots (ascending indices into the head's prefix).
  virtual std::vector<std::vector<int64_t>> select(int layer, const std::vector<HeadView>& heads,
                                                   int64_t keep) = 0;
  // Tokens at the end of each head kept whole (the observation window; h2o: its recent half).
  virtual int64_t recent_tokens(int64_t budget) const { return std::min<int64_t>(window_, budget); }
  virtual bool needs_scores() const { return true; }
  // After retain(): the kept slots of (layer, head) and the full score vector they index.
  virtual void on_retained(int layer, int head, std::span<const int64_t> slots,
                           const std::vector<float>& scores) {
    (void)layer, (void)head, (void)slots, (void)scores;
  }

  const KvPolicyOptions& options() const { return options_; }
  const KvCacheShape& shape() const { return shape_; }
  int window() const { return window_; }

 private:
  std::string name_;
  KvPolicyOptions options_;
  KvCacheShape shape_;
  int window_;
  int query_window_;
  // Last query_window_ observed prompt query rows per layer: [rows * n_heads * head_dim].
  std::vector<std::vector<float>> queries_;
  std::vector<std::vector<int32_t>> query_positions_;
  int64_t query_row_ = 0;  // n_heads * head_dim
};

}  // namespace tandem::llm
