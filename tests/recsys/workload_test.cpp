// SPDX-License-Identifier: Apache-2.0
// Workload kit: generators stay in range and have the intended skew, the stack-distance generator
// reproduces a trace's LRU hit-rate curve, query sizes follow their distributions, Poisson gaps
// have the right mean, and the factory makes valid, deterministic queries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include "tandem/core/error.h"
#include "tandem/recsys/workload.h"

namespace tandem::rec {
namespace {

std::vector<int64_t> draw(IndexGenerator& g, int n, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(g.next(rng));
  return out;
}

TEST(RecWorkload, UniformCoversTheTable) {
  auto g = make_index_generator(100, {});
  const auto v = draw(*g, 20000);
  std::map<int64_t, int> count;
  for (int64_t x : v) {
    ASSERT_GE(x, 0);
    ASSERT_LT(x, 100);
    ++count[x];
  }
  EXPECT_EQ(count.size(), 100u);
  for (auto& [k, c] : count) EXPECT_NEAR(c, 200, 80) << k;
}

TEST(RecWorkload, ZipfFollowsItsLaw) {
  IndexOptions o;
  o.dist = IndexDist::kZipf;
  o.zipf_s = 1.2;
  o.permute = false;
  auto g = make_index_generator(1000000, o);
  const auto v = draw(*g, 200000);
  std::map<int64_t, int> count;
  for (int64_t x : v) {
    ASSERT_GE(x, 0);
    ASSERT_LT(x, 1000000);
    ++count[x];
  }
  // P(rank 1) / P(rank 2) = 2^1.2 = 2.30; P(1) / P(4) = 4^1.2 = 5.28.
  EXPECT_NEAR(double(count[0]) / count[1], 2.30, 0.15);
  EXPECT_NEAR(double(count[0]) / count[3], 5.28, 0.5);
  // With the permutation the hottest row is elsewhere, the skew the same.
  o.permute = true;
  auto gp = make_index_generator(1000000, o);
  std::map<int64_t, int> cp;
  for (int64_t x : draw(*gp, 200000)) ++cp[x];
  int best = 0;
  int64_t hottest = -1;
  for (auto& [k, c] : cp)
    if (c > best) best = c, hottest = k;
  EXPECT_NE(hottest, 0);
  EXPECT_NEAR(best, count[0], count[0] * 0.1);
  o.zipf_s = -1;
  EXPECT_THROW(make_index_generator(10, o), InvalidArgument);
}

TEST(RecWorkload, StackDistanceReproducesTheHitRateCurve) {
  IndexOptions z;
  z.dist = IndexDist::kZipf;
  z.zipf_s = 0.9;
  auto zipf = make_index_generator(5000, z);
  const auto trace = draw(*zipf, 20000, 3);
  IndexOptions s;
  s.dist = IndexDist::kStackDistance;
  s.stack = profile_stack_distances(trace, 2048);
  auto stack = make_index_generator(5000, s, 9);
  const auto synth = draw(*stack, 20000, 4);
  for (int64_t cap : {16, 128, 1024}) {
    const double a = lru_hit_rate(trace, cap), b = lru_hit_rate(synth, cap);
    EXPECT_NEAR(a, b, 0.05) << "capacity " << cap;
  }
  EXPECT_GT(lru_hit_rate(trace, 1024), lru_hit_rate(trace, 16));
}

TEST(RecWorkload, QuerySizes) {
  std::mt19937_64 rng(1);
  QuerySizeOptions o;
  EXPECT_EQ(sample_query_size(o, 77, rng), 77);
  o.dist = SizeDist::kNormal;
  o.mean = 165;
  o.stddev = 4;
  double sum = 0;
  for (int i = 0; i < 4000; ++i) sum += sample_query_size(o, 0, rng);
  EXPECT_NEAR(sum / 4000, 165, 0.5);
  o.dist = SizeDist::kQuantiles;
  o.quantiles = {100, 300, 700};
  for (int i = 0; i < 50; ++i) {
    const int64_t q = sample_query_size(o, 0, rng);
    EXPECT_TRUE(q == 100 || q == 300 || q == 700);
  }
  o.dist = SizeDist::kUniform;
  o.min = 3;
  o.max = 9;
  for (int i = 0; i < 200; ++i) {
    const int64_t q = sample_query_size(o, 0, rng);
    EXPECT_GE(q, 3);
    EXPECT_LE(q, 9);
  }
  EXPECT_THROW(parse_size_dist("gamma"), InvalidArgument);
  EXPECT_EQ(parse_index_dist("stack"), IndexDist::kStackDistance);
}

TEST(RecWorkload, SizeQuantileFileInMlperfFormat) {
  const std::string path = testing::TempDir() + "tandem_size_quantiles.txt";
  const auto write = [&](const char* text) { std::ofstream(path) << text; };
  write("# comment line\n100, 100, 200 # trailing\n 700,\n");
  EXPECT_EQ(read_size_quantiles(path), (std::vector<int64_t>{100, 100, 200, 700}));
  QuerySizeOptions o;
  use_size_quantiles(o, read_size_quantiles(path));
  EXPECT_EQ(o.dist, SizeDist::kQuantiles);
  EXPECT_EQ(o.max, 700);
  write("100, 200\n300, 4x0\n");
  try {
    read_size_quantiles(path);
    ADD_FAILURE() << "a bad size was accepted";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("4x0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  write("0, 5\n");
  EXPECT_THROW(read_size_quantiles(path), ParseError);
  write("# only a comment\n");
  EXPECT_THROW(read_size_quantiles(path), ParseError);
  EXPECT_THROW(read_size_quantiles(path + ".absent"), IoError);
  std::remove(path.c_str());
}

TEST(RecWorkload, PoissonGapsHaveTheRateAsMean) {
  PoissonArrivals p(200.0, 5);
  double sum = 0;
  for (int i = 0; i < 20000; ++i) sum += p.next_gap_s();
  EXPECT_NEAR(sum / 20000, 1.0 / 200, 0.0002);
  EXPECT_THROW(PoissonArrivals(0, 1), InvalidArgument);
}

TEST(RecWorkload, FactoryMakesValidDeterministicQueries) {
  for (const char* name : {"tiny-dlrm", "tiny-wnd", "tiny-din", "tiny-bst"}) {
    const ModelConfig cfg = zoo_config(name);
    const RecModel m = RecModel::generate(cfg);
    WorkloadOptions w;
    w.index.dist = IndexDist::kZipf;
    w.variable_pooling = true;
    QueryFactory a(cfg, w), b(cfg, w);
    for (uint64_t i = 0; i < 5; ++i) {
      const QueryInputs qa = a.make(i), qb = b.make(i);
      EXPECT_EQ(qa.rows, cfg.query_size);
      EXPECT_EQ(qa.ids, qb.ids);
      EXPECT_EQ(qa.dense, qb.dense);
      EXPECT_NO_THROW(m.validate(qa)) << name;
    }
  }
}

}  // namespace
}  // namespace tandem::rec
