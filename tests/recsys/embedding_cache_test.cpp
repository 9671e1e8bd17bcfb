// SPDX-License-Identifier: Apache-2.0
// The GPU-cache level (embedding_cache.h): MurmurHash3 against its published test vectors, sizing
// from a byte budget, LRU eviction order within a set, capacity, hit/miss and window accounting,
// the tau insertion rule, values round-tripping, bad arguments, and concurrent query/replace.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/recsys/embedding_cache.h"

namespace tandem::rec {
namespace {

// A cache of exactly `sets` sets of `assoc` x `warp` slots of dim values.
EmbeddingCacheOptions sized(int64_t sets, int assoc, int warp, int64_t dim) {
  EmbeddingCacheOptions o;
  o.dim = dim;
  o.set_associativity = assoc;
  o.warp_size = warp;
  o.budget_bytes = sets * assoc * warp * EmbeddingCache::row_bytes(dim);
  return o;
}

std::vector<float> value_of(int64_t key, int64_t dim) {
  std::vector<float> v(static_cast<size_t>(dim));
  for (int64_t d = 0; d < dim; ++d) v[size_t(d)] = float(key) * 0.5f + float(d);
  return v;
}

void put(EmbeddingCache& c, int64_t key) {
  const auto v = value_of(key, c.dim());
  c.replace(&key, 1, v.data());
}

bool hit(EmbeddingCache& c, int64_t key) {
  std::vector<float> v(size_t(c.dim()));
  return c.query(&key, 1, v.data()).missing_keys.empty();
}

TEST(RecEmbeddingCache, Murmur3MatchesPublishedVectors) {
  EXPECT_EQ(murmur3_32("", 0, 0), 0u);
  EXPECT_EQ(murmur3_32("", 0, 1), 0x514E28B7u);
  EXPECT_EQ(murmur3_32("", 0, 0xffffffffu), 0x81F16F39u);
  const char zeros[4] = {0, 0, 0, 0};
  EXPECT_EQ(murmur3_32(zeros, 4, 0), 0x2362F9DEu);
  EXPECT_EQ(murmur3_32("aaaa", 4, 0x9747b28cu), 0x5A97808Au);
  const std::string hello = "Hello, world!";
  EXPECT_EQ(murmur3_32(hello.data(), hello.size(), 0x9747b28cu), 0x24884CBAu);
  const std::string fox = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(murmur3_32(fox.data(), fox.size(), 0x9747b28cu), 0x2FA826CDu);
}

TEST(RecEmbeddingCache, SizingFollowsTheBudget) {
  EXPECT_EQ(EmbeddingCache::row_bytes(16), 16 * 4 + 8 + 4);
  EXPECT_EQ(EmbeddingCache::rows_for_budget(1000, 16), 1000 / 76);
  // 10 sets' worth plus a part of a set: the part is unused.
  EmbeddingCacheOptions o = sized(10, 2, 4, 8);
  o.budget_bytes += EmbeddingCache::row_bytes(8) * 5;
  const EmbeddingCache c(o);
  EXPECT_EQ(c.sets(), 10);
  EXPECT_EQ(c.capacity(), 80);
}

TEST(RecEmbeddingCache, EvictsTheLeastRecentlyUsedSlotOfTheSet) {
  EmbeddingCache c(sized(1, 2, 2, 4));  // one set of 4 slots: every key maps to it
  for (int64_t k : {10, 11, 12, 13}) put(c, k);
  EXPECT_TRUE(hit(c, 10));  // 10 is now the most recent; 11 the least
  put(c, 14);               // evicts 11
  EXPECT_FALSE(c.contains(11));
  for (int64_t k : {10, 12, 13, 14}) EXPECT_TRUE(c.contains(k)) << k;
  put(c, 12);  // a refresh, not an insertion: 13 is now the least recent
  put(c, 15);
  EXPECT_FALSE(c.contains(13));
  const auto s = c.stats();
  EXPECT_EQ(s.inserted, 6);
  EXPECT_EQ(s.evicted, 2);
  EXPECT_EQ(s.updated, 1);
}

TEST(RecEmbeddingCache, HoldsAtMostItsCapacity) {
  EmbeddingCache c(sized(8, 2, 4, 2));
  for (int64_t k = 0; k < 1000; ++k) put(c, k);
  int64_t resident = 0;
  for (int64_t k = 0; k < 1000; ++k) resident += c.contains(k);
  EXPECT_EQ(resident, c.capacity());  // every set filled, none over
  EXPECT_EQ(c.stats().inserted - c.stats().evicted, c.capacity());
  for (int64_t k = 992; k < 1000; ++k) EXPECT_TRUE(c.contains(k)) << k;  // the newest survive
}

TEST(RecEmbeddingCache, QueryReportsMissesAndRoundTripsValues) {
  const int64_t dim = 5;
  EmbeddingCache c(sized(64, 2, 8, dim));
  const std::vector<int64_t> keys = {3, -7, 3, 1LL << 40, 42};
  std::vector<float> out(keys.size() * dim, -1.0f);
  auto r = c.query(keys.data(), int64_t(keys.size()), out.data());
  EXPECT_EQ(r.missing_index, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(r.missing_keys, keys);
  std::vector<float> miss_values;
  for (int64_t k : r.missing_keys) {
    const auto v = value_of(k, dim);
    miss_values.insert(miss_values.end(), v.begin(), v.end());
  }
  c.replace(r.missing_keys.data(), int64_t(r.missing_keys.size()), miss_values.data());
  const std::vector<int64_t> again = {42, 99, -7, 1LL << 40, 3};
  r = c.query(again.data(), int64_t(again.size()), out.data());
  EXPECT_EQ(r.missing_index, (std::vector<int64_t>{1}));
  EXPECT_EQ(r.missing_keys, (std::vector<int64_t>{99}));
  for (size_t i : {0u, 2u, 3u, 4u})
    EXPECT_EQ(std::vector<float>(out.begin() + long(i * dim), out.begin() + long((i + 1) * dim)),
              value_of(again[i], dim))
        << again[i];
  const auto s = c.stats();
  EXPECT_EQ(s.hits, 4);
  EXPECT_EQ(s.misses, 6);
  EXPECT_DOUBLE_EQ(s.hit_rate(), 0.4);
  // A probe that is not counted (a prefetch) leaves the counters alone.
  c.query(again.data(), int64_t(again.size()), out.data(), false);
  EXPECT_EQ(c.stats().hits, 4);
}

TEST(RecEmbeddingCache, WindowHitRateDecidesTheInsertionMode) {
  EmbeddingCacheOptions o = sized(16, 2, 4, 2);
  o.window = 2;
  o.tau = 0.5;
  EmbeddingCache c(o);
  std::vector<float> out(8);
  EXPECT_TRUE(c.insert_synchronously());  // nothing seen: hit rate 0
  const std::vector<int64_t> a = {1, 2, 3, 4};
  c.query(a.data(), 4, out.data());  // 0 / 4
  for (int64_t k : a) put(c, k);
  c.query(a.data(), 4, out.data());  // 4 / 4: window 4 / 8
  EXPECT_DOUBLE_EQ(c.window_hit_rate(), 0.5);
  EXPECT_FALSE(c.insert_synchronously());  // 0.5 is not below tau 0.5
  c.query(a.data(), 4, out.data());        // the first call leaves the window: 8 / 8
  EXPECT_DOUBLE_EQ(c.window_hit_rate(), 1.0);
  const std::vector<int64_t> b = {5, 6, 7, 8};
  c.query(b.data(), 4, out.data());
  c.query(b.data(), 4, out.data());  // 0 / 8
  EXPECT_DOUBLE_EQ(c.window_hit_rate(), 0.0);
  EXPECT_TRUE(c.insert_synchronously());
  o.tau = 1;  // synchronous only, even after a perfect window
  EmbeddingCache sync_only(o);
  put(sync_only, 1);
  sync_only.query(a.data(), 1, out.data());
  EXPECT_DOUBLE_EQ(sync_only.window_hit_rate(), 1.0);
  EXPECT_TRUE(sync_only.insert_synchronously());
}

TEST(RecEmbeddingCache, BadArgumentsAreRefusedClearly) {
  auto refuses = [](EmbeddingCacheOptions o, const std::string& what) {
    try {
      EmbeddingCache c(o);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const EmbeddingCacheOptions good = sized(4, 2, 4, 8);
  auto refuses_change = [&](auto change, const std::string& what) {
    EmbeddingCacheOptions o = good;
    change(o);
    refuses(o, what);
  };
  for (int w : {0, 3, 64, -1}) refuses_change([w](auto& o) { o.warp_size = w; }, "warp_size");
  refuses_change([](auto& o) { o.budget_bytes = 0; }, "budget_bytes");
  refuses_change([](auto& o) { o.budget_bytes = EmbeddingCache::row_bytes(8) * 7; },
                 "fewer than one set");  // one set needs 8 rows
  refuses_change([](auto& o) { o.dim = 0; }, "dim");
  refuses_change([](auto& o) { o.set_associativity = 0; }, "set_associativity");
  refuses_change([](auto& o) { o.tau = 1.5; }, "tau");
  refuses_change([](auto& o) { o.window = 0; }, "window");
  EmbeddingCache c(good);
  const int64_t empty = EmbeddingCache::kEmptyKey;
  float v[8] = {};
  EXPECT_THROW(c.query(&empty, 1, v), InvalidArgument);
  EXPECT_THROW(c.replace(&empty, 1, v), InvalidArgument);
}

// Threads query and insert overlapping keys at once; a value read is always the one its key was
// stored with (never a torn or foreign row), and the counters add up.
TEST(RecEmbeddingCache, ConcurrentQueryAndReplaceStayConsistent) {
  const int64_t dim = 4;
  EmbeddingCache c(sized(32, 2, 4, dim));  // 256 slots for 512 keys: evictions happen
  constexpr int kThreads = 4, kRounds = 300, kBatch = 16;
  std::vector<std::thread> threads;
  std::atomic<int64_t> bad{0}, looked{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::vector<int64_t> keys(kBatch);
      std::vector<float> out(kBatch * dim);
      for (int r = 0; r < kRounds; ++r) {
        for (int i = 0; i < kBatch; ++i) keys[size_t(i)] = (t * 131 + r * 17 + i * 7) % 512;
        const auto q = c.query(keys.data(), kBatch, out.data());
        looked += kBatch;
        size_t m = 0;
        for (int i = 0; i < kBatch; ++i) {
          if (m < q.missing_index.size() && q.missing_index[m] == i) {
            ++m;
            continue;
          }
          const auto want = value_of(keys[size_t(i)], dim);
          for (int64_t d = 0; d < dim; ++d) bad += out[size_t(i * dim + d)] != want[size_t(d)];
        }
        std::vector<float> vals;
        for (int64_t k : q.missing_keys) {
          const auto v = value_of(k, dim);
          vals.insert(vals.end(), v.begin(), v.end());
        }
        c.replace(q.missing_keys.data(), int64_t(q.missing_keys.size()), vals.data());
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  const auto s = c.stats();
  EXPECT_EQ(s.hits + s.misses, looked.load());
  EXPECT_GT(s.hits, 0);
  EXPECT_GT(s.evicted, 0);
}

}  // namespace
}  // namespace tandem::rec
