// SPDX-License-Identifier: Apache-2.0
// Sampler: greedy, top-k, top-p cuts, seeded reproducibility, and the sampled distribution.
#include "tandem/llm/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tandem/core/error.h"

namespace tandem::llm {
namespace {

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s;
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.sample(logits), 1);
  EXPECT_EQ(argmax(logits), 1);
  EXPECT_THROW(argmax({}), InvalidArgument);
}

TEST(Sampler, TopKOneIsGreedyAtAnyTemperature) {
  Sampler s({.temperature = 5.0f, .top_k = 1, .seed = 3});
  const std::vector<float> logits = {0.0f, 0.5f, 0.4f, -2.0f};
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(logits), 1);
}

TEST(Sampler, TopKNeverPicksOutsideTheTopK) {
  Sampler s({.temperature = 10.0f, .top_k = 2, .seed = 4});
  const std::vector<float> logits = {1.0f, 3.0f, 2.9f, 2.8f};
  int seen[4] = {0, 0, 0, 0};
  for (int i = 0; i < 400; ++i) ++seen[s.sample(logits)];
  EXPECT_EQ(seen[0], 0);
  EXPECT_EQ(seen[3], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[2], 0);
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // Probabilities 0.5, 0.3, 0.2: top_p 0.7 keeps {0, 1}; top_p 0.4 keeps {0}.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler a({.temperature = 1.0f, .top_p = 0.7f, .seed = 5});
  int seen[3] = {0, 0, 0};
  for (int i = 0; i < 400; ++i) ++seen[a.sample(logits)];
  EXPECT_EQ(seen[2], 0);
  EXPECT_GT(seen[1], 0);
  Sampler b({.temperature = 1.0f, .top_p = 0.4f, .seed = 5});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(b.sample(logits), 0);
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  // 20000 draws with a fixed seed: each frequency within 0.02 of its probability (over 5 standard
  // deviations for these sizes).
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s({.temperature = 1.0f, .seed = 6});
  int seen[3] = {0, 0, 0};
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++seen[s.sample(logits)];
  EXPECT_NEAR(seen[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(seen[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(seen[2] / double(n), 0.2, 0.02);
  // Temperature 2 flattens: p ~ sqrt(p0), normalised.
  Sampler t({.temperature = 2.0f, .seed = 7});
  int hot[3] = {0, 0, 0};
  for (int i = 0; i < n; ++i) ++hot[t.sample(logits)];
  const double z = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.2);
  EXPECT_NEAR(hot[0] / double(n), std::sqrt(0.5) / z, 0.02);
  EXPECT_NEAR(hot[2] / double(n), std::sqrt(0.2) / z, 0.02);
}

TEST(Sampler, SameSeedSameSequence) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = std::sin(i * 0.37f);
  Sampler a({.temperature = 1.5f, .top_k = 50, .top_p = 0.9f, .seed = 42});
  Sampler b({.temperature = 1.5f, .top_k = 50, .top_p = 0.9f, .seed = 42});
  Sampler c({.temperature = 1.5f, .top_k = 50, .top_p = 0.9f, .seed = 43});
  std::vector<int32_t> ra, rb, rc;
  for (int i = 0; i < 64; ++i) {
    ra.push_back(a.sample(logits));
    rb.push_back(b.sample(logits));
    rc.push_back(c.sample(logits));
  }
  EXPECT_EQ(ra, rb);
  EXPECT_NE(ra, rc);
}

TEST(Sampler, RejectsBadOptions) {
  EXPECT_THROW(Sampler({.top_k = -1}), InvalidArgument);
  EXPECT_THROW(Sampler({.top_p = 0.0f}), InvalidArgument);
  EXPECT_THROW(Sampler({.top_p = 1.5f}), InvalidArgument);
  EXPECT_THROW(Sampler({.temperature = INFINITY}), InvalidArgument);
}

}  // namespace
}  // namespace tandem::llm
