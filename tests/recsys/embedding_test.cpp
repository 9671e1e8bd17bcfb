// SPDX-License-Identifier: Apache-2.0
// Embedding store: generated rows follow the weights.h rule, pooled sum/mean lookups match a plain
// loop for f32/f16/int8, hashing, .temb files (written, mapped, streamed, rejected when bad) and
// the hot-row cache (hits, LRU eviction, statistics, identical results with and without it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "tandem/core/allocator.h"
#include "tandem/core/error.h"
#include "tandem/recsys/embedding.h"

namespace tandem::rec {
namespace {

std::string temp_path(const std::string& name) {
  return "/tmp/tandem_rec_" + std::to_string(::getpid()) + "_" + name;
}

TEST(RecEmbedding, GeneratedRowsFollowTheRule) {
  const auto t = EmbeddingTable::generate("emb.0", 100, 8, DType::kF32, 7, 0.5f);
  const GeneratedTensor g{tensor_seed(7, "emb.0"), 0.5f, 0.0f};
  std::vector<float> row(8);
  t.read_row(42, row.data());
  for (int d = 0; d < 8; ++d) EXPECT_EQ(row[d], g.at(42 * 8 + d));
  for (int d = 0; d < 8; ++d) EXPECT_LE(std::abs(row[d]), 0.5f);
  EXPECT_THROW(t.read_row(100, row.data()), InvalidArgument);
}

TEST(RecEmbedding, GeneratedTablesAreAccounted) {
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  {
    const auto t = EmbeddingTable::generate("emb.0", 1000, 16, DType::kI8, 1, 0.5f);
    EXPECT_EQ(t.bytes(), 1000 * 24);
    EXPECT_GE(memory_stats(Device::cpu()).current_bytes - before, 1000 * 24);
  }
  EXPECT_EQ(memory_stats(Device::cpu()).current_bytes, before);
}

class PooledLookup : public ::testing::TestWithParam<DType> {};

TEST_P(PooledLookup, SumAndMeanMatchAPlainLoop) {
  const DType dt = GetParam();
  const int64_t rows = 50, dim = 12;
  std::vector<float> v(rows * dim);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : v) x = u(rng);
  const auto t = EmbeddingTable::from_f32("t", v.data(), rows, dim, dt);
  // The tolerance of the storage format: f16 ~ 2^-11 relative, int8 ~ range / 255 / 2.
  const float tol = dt == DType::kF32 ? 1e-6f : dt == DType::kF16 ? 2e-3f : 2.0f / 255.0f;
  std::vector<int64_t> ids = {1, 7, 7, 49, 0, 3, 3, 3, 22};
  std::vector<int64_t> off = {0, 4, 4, 9};  // bags of 4, 0 and 5 ids
  for (Pooling mode : {Pooling::kSum, Pooling::kMean}) {
    std::vector<float> out(3 * dim, -99.0f);
    t.pooled_lookup(ids.data(), off.data(), 3, mode, out.data(), dim);
    for (int b = 0; b < 3; ++b)
      for (int d = 0; d < dim; ++d) {
        double want = 0;
        for (int64_t i = off[b]; i < off[b + 1]; ++i) want += v[ids[i] * dim + d];
        const int64_t n = off[b + 1] - off[b];
        if (mode == Pooling::kMean && n) want /= n;
        EXPECT_NEAR(out[b * dim + d], want, tol * std::max<int64_t>(n, 1)) << b << " " << d;
      }
  }
  std::vector<int64_t> bad = {50};
  std::vector<int64_t> off1 = {0, 1};
  std::vector<float> out(dim);
  EXPECT_THROW(t.pooled_lookup(bad.data(), off1.data(), 1, Pooling::kSum, out.data(), dim),
               InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PooledLookup,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kI8));

TEST(RecEmbedding, HashedLookupsUseHashId) {
  const auto t = EmbeddingTable::generate("h", 37, 4, DType::kF32, 2, 1.0f);
  const uint64_t salt = 99;
  std::vector<int64_t> raw = {123456789012345, -5, 37};
  std::vector<int64_t> off = {0, 3};
  std::vector<float> out(4), want(4, 0.0f), row(4);
  t.pooled_lookup_hashed(raw.data(), off.data(), 1, salt, Pooling::kSum, out.data(), 4);
  for (int64_t id : raw) {
    const int64_t r = hash_id(id, salt, 37);
    ASSERT_GE(r, 0);
    ASSERT_LT(r, 37);
    t.read_row(r, row.data());
    for (int d = 0; d < 4; ++d) want[d] += row[d];
  }
  for (int d = 0; d < 4; ++d) EXPECT_FLOAT_EQ(out[d], want[d]);
}

TEST(RecEmbedding, FilesRoundTripAndMap) {
  const std::string path = temp_path("t.temb");
  const auto t = EmbeddingTable::generate("emb.3", 300, 10, DType::kI8, 5, 0.3f);
  t.write_file(path);
  const auto m = EmbeddingTable::map_file(path, "emb.3");
  EXPECT_TRUE(m.mapped());
  EXPECT_EQ(m.rows(), 300);
  EXPECT_EQ(m.dim(), 10);
  EXPECT_EQ(m.dtype(), DType::kI8);
  std::vector<float> a(10), b(10);
  for (int64_t r : {0, 17, 299}) {
    t.read_row(r, a.data());
    m.read_row(r, b.data());
    EXPECT_EQ(a, b);
  }
  // Streaming writer: the same bytes as the in-memory generator.
  const std::string path2 = temp_path("t2.temb");
  EmbeddingTable::write_generated_file(path2, "emb.3", 300, 10, DType::kI8, 5, 0.3f);
  const auto m2 = EmbeddingTable::map_file(path2);
  EXPECT_EQ(0, std::memcmp(m2.row_data(0), t.row_data(0), t.bytes()));
  std::remove(path.c_str());
  std::remove(path2.c_str());
}

TEST(RecEmbedding, BadFilesGiveClearErrors) {
  const std::string path = temp_path("bad.temb");
  auto expect_parse = [&](const std::string& bytes, const std::string& what) {
    std::ofstream(path, std::ios::binary) << bytes;
    try {
      EmbeddingTable::map_file(path);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const ParseError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  expect_parse("TNDEMB01", "no 64-byte header");
  expect_parse(std::string(64, 'x'), "bad magic");
  // A valid header for 10 rows of f32 x 4, truncated data.
  const auto t = EmbeddingTable::generate("e", 10, 4, DType::kF32, 1, 1.0f);
  t.write_file(path);
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  expect_parse(bytes.substr(0, bytes.size() - 3), "but 10 rows need");
  std::string wrong_dtype = bytes;
  wrong_dtype[12] = 7;
  expect_parse(wrong_dtype, "unknown dtype code 7");
  EXPECT_THROW(EmbeddingTable::map_file("/nonexistent/x.temb"), IoError);
  std::remove(path.c_str());
}

TEST(RecEmbedding, HotRowCacheHitsEvictsAndCounts) {
  HotRowCache c(8, 2, 2);  // 4 sets x 2 ways
  float v[2] = {1, 2}, out[2];
  EXPECT_FALSE(c.lookup(5, out));
  c.insert(5, v);
  EXPECT_TRUE(c.lookup(5, out));
  EXPECT_EQ(out[1], 2.0f);
  // Fill far beyond capacity: at most 8 rows stay.
  for (int64_t r = 100; r < 200; ++r) c.insert(r, v);
  int present = 0;
  for (int64_t r = 100; r < 200; ++r) present += c.lookup(r, out);
  EXPECT_LE(present, 8);
  EXPECT_GE(present, 1);
  const CacheStats s = c.stats();
  EXPECT_EQ(s.hits + s.misses, 102);
  EXPECT_EQ(s.hits, 1 + present);
  c.reset_stats();
  EXPECT_EQ(c.stats().hits, 0);
  EXPECT_THROW(HotRowCache(1, 4, 2), InvalidArgument);
}

TEST(RecEmbedding, CacheGivesTheSameResultsAndAHighHitRateOnASkewedStream) {
  const auto t = EmbeddingTable::generate("e", 1000, 8, DType::kF16, 3, 1.0f);
  HotRowCache cache(64, 8, 4);
  std::mt19937 rng(1);
  std::vector<int64_t> ids;
  for (int i = 0; i < 4000; ++i) ids.push_back(rng() % 100 < 90 ? rng() % 16 : rng() % 1000);
  std::vector<int64_t> off;
  for (int i = 0; i <= 1000; ++i) off.push_back(4 * i);
  std::vector<float> a(1000 * 8), b(1000 * 8);
  t.pooled_lookup(ids.data(), off.data(), 1000, Pooling::kSum, a.data(), 8);
  t.pooled_lookup(ids.data(), off.data(), 1000, Pooling::kSum, b.data(), 8, &cache);
  EXPECT_EQ(a, b);
  EXPECT_GT(cache.stats().hit_rate(), 0.8);
}

}  // namespace
}  // namespace tandem::rec
