// SPDX-License-Identifier: Apache-2.0
// KV-eviction policies on crafted attention patterns: DBAC finds a dense range, ClusterAttn keeps
// a known cluster whole, StreamingLLM keeps its sinks and the recent tokens, SnapKV keeps the
// top-k tokens, AdaKV moves budget to the head with spread attention, PyramidKV's layer budgets
// fall with depth and average the budget, H2O evicts its lowest-scored token per decode step,
// every scored policy keeps a planted needle key; the scoring helpers; registry chains; the
// ClusterAttn calibration file round trip and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>

#include "common/temp_dir.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_policies.h"
#include "tandem/llm/kv_policy_registry.h"

namespace tandem::llm {
namespace {

constexpr int kDim = 8;

// A one-layer cache whose heads hold T tokens at positions 0..T-1; key t of head h is
// keys(h, t) (a kDim vector), values are the token index.
template <typename KeyFn>
KvCache crafted_cache(int heads, int tokens, KeyFn keys, std::shared_ptr<KvPolicy> policy,
                      int layers = 1) {
  KvCache cache(
      KvCacheShape{.n_layers = layers, .n_kv_heads = heads, .head_dim = kDim, .block_tokens = 16},
      std::move(policy));
  std::vector<float> k(static_cast<size_t>(tokens) * heads * kDim), v(k.size());
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      const std::vector<float> key = keys(h, t);
      for (int e = 0; e < kDim; ++e) {
        k[(static_cast<size_t>(t) * heads + h) * kDim + e] = key[e];
        v[(static_cast<size_t>(t) * heads + h) * kDim + e] = static_cast<float>(t);
      }
    }
  }
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  std::iota(pos.begin(), pos.end(), 0);
  const Tensor kt = Tensor::from_vector(k, {tokens, heads, kDim}, DType::kF32);
  const Tensor vt = Tensor::from_vector(v, {tokens, heads, kDim}, DType::kF32);
  for (int l = 0; l < layers; ++l) cache.append(l, kt, vt, pos);
  return cache;
}

// Window queries: `rows` queries per head (one query head per KV head) all equal to `dir`,
// at the last `rows` positions of a `tokens`-long prompt.
void observe_window(KvCache& cache, int heads, int tokens, int rows,
                    const std::vector<std::vector<float>>& dir, int layers = 1) {
  std::vector<float> q(static_cast<size_t>(rows) * heads * kDim);
  for (int r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      for (int e = 0; e < kDim; ++e) q[(static_cast<size_t>(r) * heads + h) * kDim + e] = dir[h][e];
    }
  }
  std::vector<int32_t> pos(static_cast<size_t>(rows));
  std::iota(pos.begin(), pos.end(), tokens - rows);
  const Tensor qt = Tensor::from_vector(q, {rows, heads, kDim}, DType::kF32);
  for (int l = 0; l < layers; ++l) cache.policy().observe_queries(cache, l, qt, pos, true);
}

std::vector<int32_t> kept_positions(const KvCache& cache, int layer, int head) {
  std::vector<int32_t> out;
  for (const KvBlock& b : cache.blocks(layer, head)) {
    out.insert(out.end(), b.positions.begin(), b.positions.begin() + b.used);
  }
  return out;
}

std::vector<float> unit(int axis, float scale = 1.0f) {
  std::vector<float> v(kDim, 0.0f);
  v[axis] = scale;
  return v;
}

// Keys: small deterministic noise, plus a strong component on axis 0 for "hot" tokens.
auto keys_with_hot(std::function<float(int, int)> hot) {
  return [hot](int h, int t) {
    std::vector<float> k(kDim);
    for (int e = 0; e < kDim; ++e) k[e] = 0.05f * std::sin(1.3f * t + 0.7f * e + h);
    k[0] += hot(h, t);
    return k;
  };
}

std::shared_ptr<KvPolicy> policy(const std::string& name, int64_t budget, int window,
                                 std::map<std::string, std::string> extra = {}) {
  KvPolicyOptions o;
  o.budget_tokens = budget;
  o.window = window;
  o.extra = std::move(extra);
  return make_kv_policy(name, o, KvCacheShape{.n_layers = 1, .n_kv_heads = 1, .head_dim = kDim});
}

TEST(Dbac, FindsTheDenseRangeWidenedByEps) {
  std::vector<float> x(100, 0.01f);
  for (int j = 40; j < 50; ++j) x[j] = 1.0f;
  const auto clusters = dbac_clusters(x, DbacParams{.eps = 2, .rho = 2.0, .min_len = 1});
  ASSERT_EQ(clusters.size(), 1u);
  // Core points: m[j] >= 2 * mean(m); the tokens of [40, 50) and up to 1 beyond each edge (their
  // eps-neighbourhood still holds >= 2 hot tokens), then widened by eps = 2.
  EXPECT_LE(clusters[0].begin, 40);
  EXPECT_GE(clusters[0].end, 50);
  EXPECT_GE(clusters[0].begin, 35);
  EXPECT_LE(clusters[0].end, 55);
  double mass = 0;
  for (int64_t j = clusters[0].begin; j < clusters[0].end; ++j) mass += x[j];
  EXPECT_NEAR(clusters[0].mass, mass, 1e-5);
}

TEST(Dbac, SeparatesDistantRangesAndDropsShortOnes) {
  std::vector<float> x(200, 0.0f);
  for (int j = 10; j < 30; ++j) x[j] = 1.0f;
  for (int j = 120; j < 150; ++j) x[j] = 1.0f;
  // An isolated spike: core points 79..81 (their eps-sums hold it), widened by eps: 5 < min_len.
  x[80] = 1.0f;
  // mean(m) = 3 * 51 / 200, so the threshold 0.38 makes every token within eps of a hot one core.
  const auto clusters = dbac_clusters(x, DbacParams{.eps = 1, .rho = 0.5, .min_len = 6});
  ASSERT_EQ(clusters.size(), 2u);
  EXPECT_EQ(clusters[0].begin, 8);  // cores 9..30 widened by 1
  EXPECT_EQ(clusters[0].end, 32);
  EXPECT_EQ(clusters[1].begin, 118);
  EXPECT_EQ(clusters[1].end, 152);
  EXPECT_EQ(dbac_clusters(x, DbacParams{.eps = 1, .rho = 0.5, .min_len = 5}).size(), 3u);
  EXPECT_THROW(dbac_clusters(x, DbacParams{.eps = -1}), InvalidArgument);
}

TEST(Scoring, PoolingAndTopK) {
  const std::vector<float> x = {0, 3, 0, 0, 6, 0};
  EXPECT_EQ(avg_pool_1d(x, 3), (std::vector<float>{1.5f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f}));
  EXPECT_EQ(max_pool_1d(x, 3), (std::vector<float>{3, 3, 3, 6, 6, 6}));
  EXPECT_EQ(avg_pool_1d(x, 0), x);
  EXPECT_EQ(top_k_indices(x, 2), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(top_k_indices(x, 10).size(), x.size());
}

TEST(Scoring, WindowAttentionIsASoftmaxSumPerQuery) {
  // Two queries over 4 keys, one head; the first query (position 2) sees keys 0..2 only.
  auto cache = crafted_cache(
      1, 4, [](int, int t) { return unit(0, static_cast<float>(t)); }, nullptr);
  const Tensor q =
      Tensor::from_vector(std::vector<float>{1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0},
                          {2, 1, kDim}, DType::kF32);
  const std::vector<int32_t> pos = {2, 3};
  const auto s = window_attention_scores(cache, 0, q, pos);
  ASSERT_EQ(s.size(), 1u);
  ASSERT_EQ(s[0].size(), 4u);
  const double scale = 1.0 / std::sqrt(double{kDim});
  double z2 = 0, z3 = 0;
  for (int t = 0; t < 3; ++t) z2 += std::exp(t * scale);
  for (int t = 0; t < 4; ++t) z3 += std::exp(t * scale);
  for (int t = 0; t < 4; ++t) {
    const double want = (t < 3 ? std::exp(t * scale) / z2 : 0.0) + std::exp(t * scale) / z3;
    EXPECT_NEAR(s[0][t], want, 1e-5) << t;
  }
  EXPECT_NEAR(std::accumulate(s[0].begin(), s[0].end(), 0.0), 2.0, 1e-5);
}

TEST(Scoring, F16BlocksScoreLikeF32) {
  std::vector<float> k(40 * kDim), v(k.size(), 0.0f);
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<int32_t> pos(40);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<std::vector<float>> scores;
  for (DType dt : {DType::kF32, DType::kF16}) {
    KvCache c(KvCacheShape{
        .n_layers = 1, .n_kv_heads = 1, .head_dim = kDim, .block_tokens = 16, .dtype = dt});
    c.append(0, Tensor::from_vector(k, {40, 1, kDim}, DType::kF32),
             Tensor::from_vector(v, {40, 1, kDim}, DType::kF32), pos);
    const std::vector<int32_t> qpos = {38, 39};
    scores.push_back(window_attention_scores(
        c, 0, Tensor::from_vector(std::vector<float>(2 * kDim, 0.5f), {2, 1, kDim}, DType::kF32),
        qpos)[0]);
  }
  ASSERT_EQ(scores[0].size(), scores[1].size());
  for (size_t j = 0; j < scores[0].size(); ++j) EXPECT_NEAR(scores[0][j], scores[1][j], 1e-3) << j;
}

// Tokens [20, 30): a strong cluster the window attends to; [60, 63): a weaker one.
auto two_cluster_keys() {
  return keys_with_hot([](int, int t) {
    if (t >= 20 && t < 30) return 3.0f;
    if (t >= 60 && t < 63) return 2.0f;
    return 0.0f;
  });
}

TEST(KvPolicies, ClusterAttnKeepsAKnownClusterWhole) {
  // Tokens [20, 30) are a cluster the window attends to; [60, 63) a weaker one; budget allows the
  // strong cluster (plus its eps border) but not both.
  auto keys = two_cluster_keys();
  auto p = policy("clusterattn", 4 + 14, 4,
                  {{"eps", "1"}, {"rho", "1.5"}, {"min_len", "2"}, {"pool", "0"}});
  auto cache = crafted_cache(1, 100, keys, p);
  observe_window(cache, 1, 100, 4, {unit(0, 3.0f)});
  cache.policy().on_prefill_done(cache);
  const auto kept = kept_positions(cache, 0, 0);
  for (int t = 20; t < 30; ++t) {
    EXPECT_NE(std::find(kept.begin(), kept.end(), t), kept.end()) << "cluster token " << t;
  }
  for (int t = 96; t < 100; ++t) {
    EXPECT_NE(std::find(kept.begin(), kept.end(), t), kept.end()) << "window token " << t;
  }
  EXPECT_LE(static_cast<int64_t>(kept.size()), 18);
  // The weak cluster (3 tokens + 2 border) does not fit beside the strong one (12 with border).
  EXPECT_EQ(std::find(kept.begin(), kept.end(), 61), kept.end());
  EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
}

// With fill, the budget the strong cluster leaves free goes to the highest-voted single tokens: the
// weak cluster's three, which do not fit whole (5 tokens with its border) beside the strong one
// (14 with its border) in 17.
TEST(KvPolicies, ClusterAttnFillSpendsTheFreeBudgetOnTheBestTokens) {
  auto keys = two_cluster_keys();
  auto p = policy("clusterattn", 4 + 17, 4,
                  {{"eps", "1"}, {"rho", "1.5"}, {"min_len", "2"}, {"pool", "0"}, {"fill", "1"}});
  auto cache = crafted_cache(1, 100, keys, p);
  observe_window(cache, 1, 100, 4, {unit(0, 3.0f)});
  cache.policy().on_prefill_done(cache);
  const auto kept = kept_positions(cache, 0, 0);
  EXPECT_EQ(static_cast<int64_t>(kept.size()), 21);  // the whole budget, window included
  for (int t : {20, 25, 29, 60, 61, 62, 96, 99}) {
    EXPECT_NE(std::find(kept.begin(), kept.end(), t), kept.end()) << "token " << t;
  }
  EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
}

TEST(KvPolicies, StreamingLlmKeepsSinksAndRecentAndRolls) {
  auto cache = crafted_cache(2, 50, keys_with_hot([](int, int) { return 0.0f; }),
                             policy("streamingllm", 12, 4));
  cache.policy().on_prefill_done(cache);
  std::vector<int32_t> want = {0, 1, 2, 3};
  for (int t = 42; t < 50; ++t) want.push_back(t);
  EXPECT_EQ(kept_positions(cache, 0, 0), want);
  EXPECT_EQ(kept_positions(cache, 0, 1), want);
  // A decode step appends one token; the oldest non-sink token leaves.
  const Tensor kv = Tensor::zeros({1, 2, kDim}, DType::kF32);
  const int32_t p50[1] = {50};
  cache.append(0, kv, kv, p50);
  cache.policy().on_decode_step(cache);
  want.erase(want.begin() + 4);
  want.push_back(50);
  EXPECT_EQ(kept_positions(cache, 0, 0), want);
}

TEST(KvPolicies, SnapKvKeepsTheTopScoredTokensPlusWindow) {
  auto keys =
      keys_with_hot([](int, int t) { return (t == 5 || t == 37 || t == 61) ? 4.0f : 0.0f; });
  auto cache = crafted_cache(1, 80, keys, policy("snapkv", 3 + 8, 8, {{"pool", "0"}}));
  observe_window(cache, 1, 80, 8, {unit(0, 4.0f)});
  cache.policy().on_prefill_done(cache);
  std::vector<int32_t> want = {5, 37, 61};
  for (int t = 72; t < 80; ++t) want.push_back(t);
  EXPECT_EQ(kept_positions(cache, 0, 0), want);
}

TEST(KvPolicies, AdaKvMovesBudgetToTheHeadWithSpreadAttention) {
  // Head 0 attends to one token; head 1 spreads over 12 tokens. keep = 6 per head, alpha 0.2.
  auto keys = keys_with_hot([](int h, int t) {
    if (h == 0) return t == 10 ? 6.0f : 0.0f;
    return (t >= 30 && t < 42) ? 3.0f : 0.0f;
  });
  KvPolicyOptions o{.budget_tokens = 6 + 4, .window = 4};
  o.extra = {{"pool", "0"}};
  auto p =
      make_kv_policy("adakv", o, KvCacheShape{.n_layers = 1, .n_kv_heads = 2, .head_dim = kDim});
  auto cache = crafted_cache(2, 64, keys, p);
  observe_window(cache, 2, 64, 4, {unit(0, 6.0f), unit(0, 3.0f)});
  cache.policy().on_prefill_done(cache);
  const int64_t n0 = cache.tokens(0, 0), n1 = cache.tokens(0, 1);
  EXPECT_EQ(n0 + n1, 2 * (6 + 4));  // the layer total is exact
  EXPECT_GT(n1, n0);
  EXPECT_GE(n0 - 4, 1);  // the safeguard: floor(0.2 * 6) = 1 token at least
  const auto kept0 = kept_positions(cache, 0, 0);
  EXPECT_NE(std::find(kept0.begin(), kept0.end(), 10), kept0.end());
}

TEST(KvPolicies, PyramidKvLayerBudgetsFallWithDepthAndAverageTheBudget) {
  const int layers = 4;
  KvPolicyOptions o{.budget_tokens = 20 + 4, .window = 4};
  auto p = make_kv_policy("pyramidkv", o,
                          KvCacheShape{.n_layers = layers, .n_kv_heads = 1, .head_dim = kDim});
  auto cache =
      crafted_cache(1, 100, keys_with_hot([](int, int t) { return t % 7 == 0; }), p, layers);
  observe_window(cache, 1, 100, 4, {unit(0, 1.0f)}, layers);
  cache.policy().on_prefill_done(cache);
  int64_t total = 0;
  for (int l = 0; l < layers; ++l) {
    total += cache.tokens(l, 0);
    if (l > 0) {
      EXPECT_LT(cache.tokens(l, 0), cache.tokens(l - 1, 0)) << l;
    }
  }
  EXPECT_EQ(total, layers * 24);
}

TEST(KvPolicies, RandomIsSeededAndExact) {
  auto run = [](uint64_t seed) {
    KvPolicyOptions o{.budget_tokens = 16, .window = 4, .seed = seed};
    auto p =
        make_kv_policy("random", o, KvCacheShape{.n_layers = 1, .n_kv_heads = 1, .head_dim = kDim});
    auto cache = crafted_cache(1, 60, keys_with_hot([](int, int) { return 0.0f; }), p);
    cache.policy().on_prefill_done(cache);
    return kept_positions(cache, 0, 0);
  };
  const auto a = run(1), b = run(1), c = run(2);
  EXPECT_EQ(a.size(), 16u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a.back(), 59);  // the window is kept
}

TEST(KvPolicies, H2oEvictsTheLowestScoredOlderTokenEachDecodeStep) {
  auto keys = keys_with_hot([](int, int t) { return (t == 3 || t == 17) ? 4.0f : 0.0f; });
  auto cache = crafted_cache(1, 40, keys, policy("h2o", 8, 4));
  EXPECT_TRUE(cache.policy().observes_decode_queries());
  observe_window(cache, 1, 40, 4, {unit(0, 4.0f)});
  cache.policy().on_prefill_done(cache);
  auto kept = kept_positions(cache, 0, 0);
  ASSERT_EQ(kept.size(), 8u);  // 4 heavy + 4 recent
  EXPECT_NE(std::find(kept.begin(), kept.end(), 3), kept.end());
  EXPECT_NE(std::find(kept.begin(), kept.end(), 17), kept.end());
  for (int step = 0; step < 5; ++step) {
    const int32_t p[1] = {40 + step};
    const Tensor k = Tensor::from_vector(unit(1, 0.1f), {1, 1, kDim}, DType::kF32);
    cache.append(0, k, k, p);
    const Tensor q = Tensor::from_vector(unit(0, 4.0f), {1, 1, kDim}, DType::kF32);
    cache.policy().observe_queries(cache, 0, q, p, false);
    cache.policy().on_decode_step(cache);
    EXPECT_EQ(cache.tokens(0, 0), 8);
  }
  kept = kept_positions(cache, 0, 0);
  EXPECT_NE(std::find(kept.begin(), kept.end(), 3), kept.end());  // heavy hitters survive
  EXPECT_NE(std::find(kept.begin(), kept.end(), 17), kept.end());
  EXPECT_EQ(kept.back(), 44);
}

TEST(KvPolicies, EveryScoredPolicyKeepsAPlantedNeedle) {
  // A needle key at token 123 matched to the window queries, in 256 tokens of weak noise keys.
  auto keys = keys_with_hot([](int, int t) { return t == 123 ? 5.0f : 0.0f; });
  for (const std::string name : {"snapkv", "pyramidkv", "adakv", "h2o", "clusterattn"}) {
    auto cache = crafted_cache(1, 256, keys, policy(name, 32, 8));
    observe_window(cache, 1, 256, 8, {unit(0, 5.0f)});
    cache.policy().on_prefill_done(cache);
    const auto kept = kept_positions(cache, 0, 0);
    EXPECT_NE(std::find(kept.begin(), kept.end(), 123), kept.end()) << name;
    EXPECT_LE(static_cast<int64_t>(kept.size()), 32) << name;
  }
}

TEST(KvPolicies, ShortPromptsAreNotCompressedAndRatioBudgetsResolve) {
  auto cache =
      crafted_cache(1, 20, keys_with_hot([](int, int) { return 0.0f; }), policy("snapkv", 32, 4));
  observe_window(cache, 1, 20, 4, {unit(0, 1.0f)});
  cache.policy().on_prefill_done(cache);
  EXPECT_EQ(cache.tokens(0, 0), 20);
  KvPolicyOptions o{.budget_ratio = 0.25, .window = 4};
  EXPECT_EQ(resolve_kv_budget(o, 100, "x"), 25);
  EXPECT_EQ(resolve_kv_budget(o, 101, "x"), 26);
  auto p =
      make_kv_policy("snapkv", o, KvCacheShape{.n_layers = 1, .n_kv_heads = 1, .head_dim = kDim});
  auto c2 = crafted_cache(1, 100, keys_with_hot([](int, int) { return 0.0f; }), p);
  observe_window(c2, 1, 100, 4, {unit(0, 1.0f)});
  c2.policy().on_prefill_done(c2);
  EXPECT_EQ(c2.tokens(0, 0), 25);
}

TEST(KvPolicies, BadOptionsAreRejectedWithTheirName) {
  const KvCacheShape s{.n_layers = 1, .n_kv_heads = 1, .head_dim = kDim};
  for (const std::string name :
       {"snapkv", "pyramidkv", "adakv", "h2o", "clusterattn", "random", "streamingllm"}) {
    try {
      make_kv_policy(name, KvPolicyOptions{}, s);
      ADD_FAILURE() << name << " accepted a missing budget";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  KvPolicyOptions o{.budget_tokens = 8};
  o.extra = {{"pool", "five"}};
  EXPECT_THROW(make_kv_policy("snapkv", o, s), InvalidArgument);
  o.extra = {{"alpha", "2"}};
  EXPECT_THROW(make_kv_policy("adakv", o, s), InvalidArgument);
  // A scored policy that saw no window queries says so instead of guessing.
  auto cache =
      crafted_cache(1, 40, keys_with_hot([](int, int) { return 0.0f; }), policy("snapkv", 8, 4));
  EXPECT_THROW(cache.policy().on_prefill_done(cache), InvalidArgument);
}

TEST(KvPolicyRegistry, CalibrationFilesPerChainMember) {
  KvPolicyOptions o{.budget_tokens = 20, .window = 6};
  set_kv_calibration(o, "plain.json");
  EXPECT_EQ(o.calibration_path, "plain.json");
  set_kv_calibration(o, "clusterattn=c.json,/dir/x=y.json");  // a path with '/' is a file
  EXPECT_EQ(o.calibration_by_policy,
            (std::map<std::string, std::string>{{"clusterattn", "c.json"}}));
  EXPECT_EQ(o.calibration_path, "/dir/x=y.json");
  EXPECT_THROW(set_kv_calibration(o, "nosuch=a.json"), InvalidArgument);
  EXPECT_THROW(set_kv_calibration(o, "clusterattn="), InvalidArgument);
  EXPECT_THROW(set_kv_calibration(o, "a.json,,b.json"), InvalidArgument);
  // Only the member named in calibration_by_policy reads that file: a missing file fails the
  // chain only when it is given to clusterattn, never to streamingllm.
  const KvCacheShape s{.n_layers = 1, .n_kv_heads = 1, .head_dim = kDim};
  KvPolicyOptions a{.budget_tokens = 20, .window = 6};
  a.calibration_by_policy["streamingllm"] = "/nonexistent/calibration.json";
  EXPECT_NO_THROW(make_kv_policy("streamingllm+clusterattn", a, s));
  KvPolicyOptions b{.budget_tokens = 20, .window = 6};
  b.calibration_by_policy["clusterattn"] = "/nonexistent/calibration.json";
  EXPECT_THROW(make_kv_policy("streamingllm+clusterattn", b, s), Error);
}

TEST(KvPolicyRegistry, EvictionPoliciesAreRegisteredAndChain) {
  std::vector<std::string> names;
  for (const auto& info : kv_policies()) names.push_back(info.name);
  for (const std::string want :
       {"full", "streamingllm", "h2o", "snapkv", "pyramidkv", "adakv", "random", "clusterattn"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  KvPolicyOptions o{.budget_tokens = 20, .window = 6};
  const KvCacheShape s{.n_layers = 1, .n_kv_heads = 1, .head_dim = kDim};
  // snapkv to 20 tokens, then streamingllm trims to 12 (4 sinks + 8 most recent of those kept).
  KvPolicyOptions o2 = o;
  auto chain = make_kv_policy("snapkv+streamingllm", o, s);
  EXPECT_EQ(chain->name(), "snapkv+streamingllm");
  EXPECT_EQ(chain->query_window(), 6);
  auto keys = keys_with_hot([](int, int t) { return t % 9 == 0 ? 3.0f : 0.0f; });
  auto a = crafted_cache(1, 90, keys, chain);
  observe_window(a, 1, 90, 6, {unit(0, 3.0f)});
  a.policy().on_prefill_done(a);
  auto b = crafted_cache(1, 90, keys, make_kv_policy("snapkv", o, s));
  observe_window(b, 1, 90, 6, {unit(0, 3.0f)});
  b.policy().on_prefill_done(b);
  EXPECT_EQ(kept_positions(a, 0, 0), kept_positions(b, 0, 0));  // the same budget: no-op second
  o2.budget_tokens = 12;
  auto c = crafted_cache(1, 90, keys, make_kv_policy("snapkv+streamingllm", o2, s));
  observe_window(c, 1, 90, 6, {unit(0, 3.0f)});
  c.policy().on_prefill_done(c);
  EXPECT_EQ(c.tokens(0, 0), 12);
  EXPECT_THROW(make_kv_policy("snapkv+nosuch", o, s), InvalidArgument);
}

TEST(ClusterAttnCalibration, RoundTripAndErrors) {
  const tandem::fixtures::TempDir dir("kvcal");
  const std::string path = dir.file("cal.json");
  ClusterAttnParams p;
  p.window = 48;
  p.pool = 7;
  p.dbac = DbacParams{.eps = 3, .rho = 1.75, .min_len = 6};
  p.per_head_fixed = true;
  p.fill = true;
  save_clusterattn_params(path, p, "unit test");
  const ClusterAttnParams q = load_clusterattn_params(path);
  EXPECT_EQ(q.window, 48);
  EXPECT_EQ(q.pool, 7);
  EXPECT_EQ(q.dbac.eps, 3);
  EXPECT_DOUBLE_EQ(q.dbac.rho, 1.75);
  EXPECT_EQ(q.dbac.min_len, 6);
  EXPECT_TRUE(q.per_head_fixed);
  EXPECT_TRUE(q.fill);
  // The policy loads it through calibration_path.
  KvPolicyOptions o{.budget_tokens = 16, .window = 4, .calibration_path = path};
  EXPECT_EQ(make_kv_policy("clusterattn", o,
                           KvCacheShape{.n_layers = 1, .n_kv_heads = 1, .head_dim = kDim})
                ->name(),
            "clusterattn");
  auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  write("{\"eps\": 3,");  // truncated
  EXPECT_THROW(load_clusterattn_params(path), ParseError);
  write("{\"eps\": \"three\"}");
  try {
    load_clusterattn_params(path);
    ADD_FAILURE() << "a string eps was accepted";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("eps"), std::string::npos) << e.what();
  }
  write("{\"rho\": -1}");
  EXPECT_THROW(load_clusterattn_params(path), ParseError);
  write("[1, 2]");
  EXPECT_THROW(load_clusterattn_params(path), ParseError);
  write("{\"policy\": \"qokv\"}");
  EXPECT_THROW(load_clusterattn_params(path), ParseError);
  // No "policy" at all ({} or a QoKV file) used to give the defaults silently.
  for (const char* text : {"{}", R"({"format": "tandem-qokv-calibration", "version": 1})"}) {
    write(text);
    try {
      load_clusterattn_params(path);
      ADD_FAILURE() << "accepted as a ClusterAttn calibration: " << text;
    } catch (const ParseError& e) {
      EXPECT_NE(std::string(e.what()).find("field 'policy' must be \"clusterattn\""),
                std::string::npos)
          << e.what();
    }
  }
  write(R"({"policy": "clusterattn", "rho": 1e999})");  // was "unexpected error: ...406"
  EXPECT_THROW(load_clusterattn_params(path), ParseError);
  try {
    load_clusterattn_params(dir.path());  // was "unexpected error: basic_filebuf::underflow"
    ADD_FAILURE() << "a directory was read as a calibration file";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_kv_policy("clusterattn", o,
                              KvCacheShape{.n_layers = 1, .n_kv_heads = 1, .head_dim = kDim}),
               ParseError);
  EXPECT_THROW(load_clusterattn_params(dir.file("missing.json")), NotFound);
}

}  // namespace
}  // namespace tandem::llm
