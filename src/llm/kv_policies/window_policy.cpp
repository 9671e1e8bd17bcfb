// SPDX-License-Identifier: Apache-2.0
// WindowEvictionPolicy: query recording and the score -> select -> retain frame (window_policy.h).
#include "llm/kv_policies/window_policy.h"

#include <algorithm>
#include <numeric>

#include "tandem/core/error.h"

namespace tandem::llm {

double kv_extra_number(const KvPolicyOptions& options, const std::string& key, double fallback,
                       double lo, double hi, const std::string& policy) {
  auto it = options.extra.find(key);
  if (it == options.extra.end()) return fallback;
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != it->second.size() || !(v >= lo && v <= hi)) {
    throw InvalidArgument(cat("KV policy '", policy, "': ", key, "=", it->second,
                              " is not a number in [", lo, ", ", hi, "]"));
  }
  return v;
}

WindowEvictionPolicy::WindowEvictionPolicy(std::string name, const KvPolicyOptions& options,
                                           const KvCacheShape& shape, int query_window)
    : name_(std::move(name)),
      options_(options),
      shape_(shape),
      window_(options.window),
      query_window_(query_window) {
  if (options.window < 0) {
    throw InvalidArgument(cat("KV policy '", name_, "': window ", options.window, " < 0"));
  }
  if (options.budget_tokens < 0 || options.budget_ratio < 0 || options.budget_ratio > 1 ||
      (options.budget_tokens == 0 && options.budget_ratio == 0)) {
    throw InvalidArgument(cat("KV policy '", name_, "': needs budget_tokens > 0 or budget_ratio ",
                              "in (0, 1] (got ", options.budget_tokens, " tokens, ratio ",
                              options.budget_ratio, ")"));
  }
  queries_.resize(shape.n_layers);
  query_positions_.resize(shape.n_layers);
}

void WindowEvictionPolicy::observe_queries(const KvCache& cache, int layer, const Tensor& q,
                                           std::span<const int32_t> positions, bool prefill) {
  (void)cache;
  if (!prefill || query_window_ <= 0) return;
  if (layer < 0 || layer >= shape_.n_layers || q.rank() != 3 || q.dtype() != DType::kF32 ||
      q.size(0) != static_cast<int64_t>(positions.size())) {
    throw InvalidArgument(cat("KV policy '", name_, "': observe_queries(layer ", layer,
                              ") got queries ", q.to_string()));
  }
  const Tensor qc = q.contiguous();
  const int64_t row = q.size(1) * q.size(2);
  if (query_row_ != 0 && row != query_row_) {
    throw InvalidArgument(
        cat("KV policy '", name_, "': query rows of ", row, " values after ", query_row_));
  }
  query_row_ = row;
  auto& rows = queries_[layer];
  auto& pos = query_positions_[layer];
  rows.insert(rows.end(), qc.data<float>(), qc.data<float>() + q.size(0) * row);
  pos.insert(pos.end(), positions.begin(), positions.end());
  const int64_t extra = static_cast<int64_t>(pos.size()) - query_window_;
  if (extra > 0) {  // keep only the last query_window_ rows
    rows.erase(rows.begin(), rows.begin() + extra * row);
    pos.erase(pos.begin(), pos.begin() + extra);
  }
}

void WindowEvictionPolicy::on_prefill_done(KvCache& cache) {
  const KvCacheShape& s = cache.shape();
  if (s.n_layers != shape_.n_layers || s.n_kv_heads != shape_.n_kv_heads) {
    throw InvalidArgument(cat("KV policy '", name_, "': built for ", shape_.n_layers, " layers x ",
                              shape_.n_kv_heads, " kv heads, used on ", s.n_layers, " x ",
                              s.n_kv_heads));
  }
  int64_t prompt = 0;
  for (int l = 0; l < s.n_layers; ++l) {
    for (int h = 0; h < s.n_kv_heads; ++h) prompt = std::max(prompt, cache.tokens(l, h));
  }
  const int64_t budget = resolve_kv_budget(options_, prompt, name_);
  const int64_t recent = recent_tokens(budget);
  const int64_t keep = budget - recent;
  for (int l = 0; l < s.n_layers; ++l) {
    bool over = false;
    for (int h = 0; h < s.n_kv_heads; ++h) over = over || cache.tokens(l, h) > budget;
    if (!over) continue;
    std::vector<std::vector<float>> scores;
    if (needs_scores()) {
      if (query_positions_[l].empty()) {
        throw InvalidArgument(cat("KV policy '", name_, "': no window queries were observed for ",
                                  "layer ", l, " before the prefill ended"));
      }
      const int64_t w = static_cast<int64_t>(query_positions_[l].size());
      const Tensor q = Tensor::from_vector(
          queries_[l], {w, query_row_ / s.head_dim, int64_t{s.head_dim}}, DType::kF32);
      scores = window_attention_scores(cache, l, q, query_positions_[l]);
    }
    std::vector<HeadView> heads(s.n_kv_heads);
    for (int h = 0; h < s.n_kv_heads; ++h) {
      const int64_t n = cache.tokens(l, h);
      heads[h].prefix = std::max<int64_t>(0, n - recent);
      if (needs_scores()) {
        heads[h].scores.assign(scores[h].begin(), scores[h].begin() + heads[h].prefix);
      }
    }
    const std::vector<std::vector<int64_t>> chosen = select(l, heads, keep);
    for (int h = 0; h < s.n_kv_heads; ++h) {
      const int64_t n = cache.tokens(l, h);
      std::vector<int64_t> slots = chosen.at(h);
      for (int64_t j = heads[h].prefix; j < n; ++j) slots.push_back(j);
      if (static_cast<int64_t>(slots.size()) == n) continue;
      cache.retain(l, h, slots);
      on_retained(l, h, slots, needs_scores() ? scores[h] : std::vector<float>{});
    }
  }
  for (auto& q : queries_) q.clear();
  for (auto& p : query_positions_) p.clear();
}

}  // namespace tandem::llm
