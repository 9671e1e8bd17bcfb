// SPDX-License-Identifier: Apache-2.0
// KV-eviction policies over the ragged per-(layer, KV head) KvCache, and the scoring pieces they
// share. Each policy is registered by name in the KV-policy registry (kv_policy_registry.h):
//
//   full          keeps everything (registered with the registry itself)
//   streamingllm  the first `sinks` tokens + the most recent ones, rolling during decode
//   h2o           heavy hitters (attention accumulated over the observed window queries and every
//                 decode query) + recent tokens; evicts the lowest-scored non-recent token per step
//   snapkv        observation-window attention, avg-pooled, top-k per head, window appended
//   pyramidkv     SnapKV scores with per-layer budgets falling linearly from layer 0 to the last
//   adakv         SnapKV scores, one top-k over all heads of a layer with a per-head safeguard
//   random        uniformly random prefix tokens (seeded), window appended: the floor
//   clusterattn   window attention summed per token ("votes"), avg-pooled, density clustering of
//                 contiguous token ranges (DBAC), whole clusters kept by mass up to the layer's
//                 budget, window appended (llm spec section 2.2)
//
// Budgets: KvPolicyOptions::budget_tokens B tokens per (layer, KV head), the window included; or
// budget_ratio r, B = ceil(r * prompt tokens). A prompt of at most B tokens is not compressed.
// Every policy compresses once a prefill ends (KvPolicy::on_prefill_done) through
// KvCache::retain(), which frees the dropped blocks; the tokens generated afterwards are appended
// uncompressed (streamingllm and h2o keep evicting during decode). Attention then reads the ragged
// per-head lists in place (cache_attention / ops::paged_attention): nothing is padded back.
//
// Query windows reach a policy through KvPolicy::observe_queries, called by the model for the
// last query_window() prompt rows of every layer (kept per layer until the prefill ends).
//
//   llm::KvPolicyOptions opt{.budget_tokens = 256, .window = 32};
//   auto policy = llm::make_kv_policy("clusterattn", opt, model.cache_shape());
//   llm::KvCache cache = model.make_cache(policy);   // generate() then compresses after prefill
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/export.h"
#include "tandem/llm/kv_cache.h"
#include "tandem/llm/kv_policy_registry.h"

namespace tandem::llm {

// Per KV head of one layer: attention weights of the window queries summed over those queries,
// for every cached slot of that head (slot order as KvCache::blocks lists them). Query head h
// belongs to KV head h / (n_heads / n_kv_heads); the weights of a group's query heads are averaged.
// Each query's softmax runs over the slots whose position <= the query's (scale 1/sqrt(head_dim)).
// q: f32 [W, n_heads, head_dim] on the host; positions: W entries. f32 and f16 blocks (blocks of a
// GPU cache are copied to the host for this pass).
TANDEM_API std::vector<std::vector<float>> window_attention_scores(
    const KvCache& cache, int layer, const Tensor& q, std::span<const int32_t> positions);

// 1-D pooling with "same" padding (the window shrinks at the edges); kernel <= 1 copies.
TANDEM_API std::vector<float> avg_pool_1d(std::span<const float> x, int kernel);
TANDEM_API std::vector<float> max_pool_1d(std::span<const float> x, int kernel);

// Indices of the k largest values (ties: lower index first), ascending.
TANDEM_API std::vector<int64_t> top_k_indices(std::span<const float> x, int64_t k);

// DBAC, the 1-D density clustering of ClusterAttn (spec 2.2 step 3). For token j,
// m[j] = sum of x over [j - eps, j + eps]; j is a core point when m[j] >= rho * mean(m). A cluster
// is a maximal run of core points whose consecutive members are at most eps apart, widened by
// eps on both sides (clipped to [0, n)), overlapping clusters merged; clusters shorter than
// min_len are dropped. O(n) with prefix sums.
struct DbacParams {
  int eps = 2;
  double rho = 1.0;
  int min_len = 1;
};
struct TokenCluster {
  int64_t begin = 0;  // first token
  int64_t end = 0;    // one past the last
  double mass = 0;    // sum of x over [begin, end)
};
TANDEM_API std::vector<TokenCluster> dbac_clusters(std::span<const float> x, const DbacParams& p);

// ClusterAttn's parameters. The calibration file (tandem kv-calibrate) is JSON:
//   {"policy": "clusterattn", "window": 32, "pool": 5, "eps": 2, "rho": 1.0, "min_len": 1,
//    "per_head_fixed": false, "fill": false, ...extra keys ignored}; "policy": "clusterattn" is
//    required.
struct ClusterAttnParams {
  int window = 32;              // observation window (tokens), kept whole
  int pool = 5;                 // avg-pool kernel over the votes (0 or 1: off)
  DbacParams dbac;              // eps, rho, min_len
  bool per_head_fixed = false;  // budget per head instead of per layer (spec 2.2 budget mode)
  // After the whole clusters, spend the budget they leave free on the highest-voted single tokens
  // (an option beyond the paper, whose unused budget stays free: measured in docs/kv-eviction.md).
  bool fill = false;
};
// ParseError naming the file and the field for a malformed or out-of-range file, NotFound for a
// missing one.
TANDEM_API ClusterAttnParams load_clusterattn_params(const std::string& path);
// Writes params (plus `note`, a free-text provenance string) as JSON; IoError when unwritable.
TANDEM_API void save_clusterattn_params(const std::string& path, const ClusterAttnParams& params,
                                        const std::string& note = "");

// Tokens per (layer, head) a policy keeps for a prompt of `prompt_tokens`: budget_tokens, or
// ceil(budget_ratio * prompt_tokens); InvalidArgument naming `policy` when neither is positive or
// the ratio exceeds 1.
TANDEM_API int64_t resolve_kv_budget(const KvPolicyOptions& options, int64_t prompt_tokens,
                                     const std::string& policy);

}  // namespace tandem::llm
