// SPDX-License-Identifier: Apache-2.0
// KV quantization on a whole (tiny, generated-weight) model: perplexity's policy protocol with the
// full policy equals the plain protocol; quantized policies stay close and report fewer bits; the
// attention tap sees every layer's queries; QoKV calibration runs end to end through the tap.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>

#include "common/temp_dir.h"
#include "tandem/llm/kv_policy_registry.h"
#include "tandem/llm/kv_quant.h"
#include "tandem/llm/model.h"
#include "tandem/llm/perplexity.h"
#include "tandem/llm/synthetic_model.h"

namespace tandem::llm {
namespace {

constexpr int kVocab = 64;

std::string write_tiny() {
  SyntheticLlamaConfig c;
  c.name = "tiny_kvq";
  c.n_layers = 2;
  c.d_model = 128;
  c.d_ff = 128;
  c.n_heads = 4;
  c.n_kv_heads = 2;  // head_dim 32
  c.vocab_size = kVocab;
  c.context_length = 256;
  c.seed = 5;
  static const tandem::fixtures::TempDir dir("kvq-model");  // this process's own, removed at exit
  const std::string path = dir.file("tiny.gguf");
  write_synthetic_llama(c, path);
  return path;
}

std::vector<int32_t> tokens(int64_t n) {
  std::mt19937_64 rng(9);
  std::uniform_int_distribution<int32_t> u(1, kVocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = u(rng);
  return t;
}

TEST(KvQuantModel, PerplexityPolicyProtocolAndBits) {
  const Model m = Model::load(write_tiny());
  const auto ids = tokens(256);
  PerplexityOptions plain{.ctx = 96, .chunks = 1};
  const PerplexityResult ref = perplexity(m, ids, plain);
  const KvCacheShape shape = m.make_cache().shape();
  PerplexityOptions full = plain;
  full.kv_policy = make_kv_policy("full", {}, shape);
  const PerplexityResult rf = perplexity(m, ids, full);
  EXPECT_NEAR(rf.ppl, ref.ppl, 1e-4 * ref.ppl);  // same attention, other step sizes
  EXPECT_NEAR(rf.kv_bits_per_element, 32.0, 1e-9);
  for (const char* name : {"int8", "q4_0", "kivi2", "qokv"}) {
    SCOPED_TRACE(name);
    PerplexityOptions q = plain;
    q.kv_policy = make_kv_policy(name, {}, shape);
    const PerplexityResult r = perplexity(m, ids, q);
    EXPECT_LT(r.kv_bits_per_element, 26.0);  // 96 tokens: the f32 residual weighs a lot
    EXPECT_LT(r.kv_bytes, rf.kv_bytes);
    EXPECT_NEAR(r.ppl, ref.ppl, 0.1 * ref.ppl);
  }
}

TEST(KvQuantModel, TapSeesEveryLayerAndCalibrationRunsOnRecordedQueries) {
  const Model m = Model::load(write_tiny());
  const auto ids = tokens(64);
  std::vector<int32_t> pos(ids.size());
  std::iota(pos.begin(), pos.end(), 0);
  KvCache cache = m.make_cache();
  std::vector<std::vector<float>> q(2);
  {
    ScopedAttentionTap tap(
        [&](const KvCache&, int layer, const Tensor& qt, std::span<const int32_t> p) {
          EXPECT_EQ(p.size(), ids.size());
          q[layer].assign(qt.data<float>(), qt.data<float>() + qt.numel());
        });
    m.forward(ids, pos, cache, {.last_only = true});
  }
  const int64_t d = cache.shape().head_dim;
  for (int l = 0; l < 2; ++l) {
    ASSERT_EQ(static_cast<int64_t>(q[l].size()), 64 * 4 * d);
    QokvSample s;
    s.n = 64;
    s.q = q[l];
    // Sizes from an unsigned head_dim: GCC 12 otherwise sees a negative int64_t product reach
    // std::fill (-Wstringop-overflow false positive in a Release build).
    const size_t rows = 64 * 2 * static_cast<size_t>(d);
    s.k.assign(rows, 0.0f);
    s.v.assign(rows, 0.0f);
    for (int h = 0; h < 2; ++h) {
      std::vector<float> k, v;
      int64_t t = 0;
      for (const KvBlock& b : cache.blocks(l, h)) {
        kv_block_rows(cache, l, h, b, k, v);
        for (int r = 0; r < b.used; ++r, ++t) {
          std::copy_n(k.data() + r * d, d, s.k.data() + (t * 2 + h) * d);
          std::copy_n(v.data() + r * d, d, s.v.data() + (t * 2 + h) * d);
        }
      }
    }
    const std::vector<QokvSample> samples = {s};
    const QokvLayerCalibration c = calibrate_qokv_layer(samples, 4, 2, static_cast<int>(d));
    EXPECT_EQ(c.group_fractions.size(), 10u);
    EXPECT_NEAR(std::accumulate(c.group_fractions.begin(), c.group_fractions.end(), 0.0), 1.0,
                1e-9);
    EXPECT_EQ(c.k_scale.size(), 2u);
  }
  // Outside the tap's scope nothing is recorded.
  q[0].clear();
  const int32_t p = 64, tok = 3;
  m.forward({&tok, 1}, {&p, 1}, cache, {.last_only = true});
  EXPECT_TRUE(q[0].empty());
}

// Counts the prefill query deliveries per layer.
class CountingPolicy final : public KvPolicy {
 public:
  std::string name() const override { return "counting"; }
  int query_window() const override { return 8; }
  void observe_queries(const KvCache&, int layer, const Tensor& q, std::span<const int32_t> pos,
                       bool prefill) override {
    EXPECT_TRUE(prefill);
    EXPECT_EQ(q.size(0), 8);
    EXPECT_EQ(pos.back(), 39);
    ++calls[layer];
  }
  std::map<int, int> calls;
};

TEST(KvQuantModel, PrefillQueriesReachThePolicyExactlyOncePerLayer) {
  // The model hands each layer's last query_window() prefill queries to the policy, once.
  const Model m = Model::load(write_tiny());
  auto counting = std::make_shared<CountingPolicy>();
  KvCache cache = m.make_cache(counting);
  const auto ids = tokens(40);
  std::vector<int32_t> pos(ids.size());
  std::iota(pos.begin(), pos.end(), 0);
  m.forward(ids, pos, cache, {.last_only = true});
  EXPECT_EQ(counting->calls, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(cache.policy().name(), "counting");
}

}  // namespace
}  // namespace tandem::llm
