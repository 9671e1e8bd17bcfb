// SPDX-License-Identifier: Apache-2.0
// EmbeddingCache: the GPU-cache level of the embedding store, with the semantics of HugeCTR's
// gpu_cache (the recsys spec §2.8): a set-associative cache of 64-bit keys and float vectors that
// sits between a query's keys and the host table.
//
// Why: a table in host memory costs a host-link transfer per row; the hot rows of a skewed ID
// stream fit in a small cache in device memory. This is the data structure itself, on the host:
// SimExecutor (sim_executor.h) runs every lookup op's real keys through it to price hits and
// misses, so hit rates are those of the real key stream through the real cache.
//
// Layout: `sets` sets, each `set_associativity` slabs of `warp_size` (key, value, timestamp)
// slots. MurmurHash3 (x86, 32-bit) of the key's 8 bytes, modulo sets, picks the set; a key lives
// in one slot of its set. Every access stamps the slot with its set's counter; a replace into a
// full set evicts the slot with the oldest stamp (LRU within the set). Sizing from a byte budget:
// rows = floor(budget / (dim * 4 + key bytes 8 + meta bytes 4)), sets = rows / (set_associativity
// * warp_size), capacity = sets * set_associativity * warp_size.
//
// Insertion policy (HPS's hit_rate_threshold): the hit rate over the last `window` counted
// query() calls decides how a caller inserts the keys a query missed: synchronously (before the
// lookup returns) while it is below tau, asynchronously (later, off the critical path) otherwise.
// tau = 1 inserts synchronously always (the synchronous-only ablation).
//
//   tandem::rec::EmbeddingCache c({.dim = 16, .budget_bytes = 1 << 20});
//   std::vector<float> v(keys.size() * 16);
//   auto r = c.query(keys.data(), n, v.data());           // hits filled, r.missing_* listed
//   ... read the missing rows from the host table into miss_values ...
//   c.replace(r.missing_keys.data(), r.missing_keys.size(), miss_values.data());
//
// Thread-safety: query and replace lock the key's set (one mutex per set) and may run
// concurrently from any number of threads; counters are atomic.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "tandem/export.h"

namespace tandem::rec {

// MurmurHash3_x86_32 of `len` bytes (Austin Appleby's public-domain algorithm).
TANDEM_API uint32_t murmur3_32(const void* data, size_t len, uint32_t seed);

struct EmbeddingCacheOptions {
  int64_t dim = 0;            // floats per value, >= 1
  int64_t budget_bytes = 0;   // device memory for keys, values and timestamps, > 0
  int set_associativity = 2;  // slabs per set, >= 1 (2 or 4 recommended)
  int warp_size = 32;         // slots per slab: 1, 2, 4, 8, 16 or 32
  double tau = 0.9;           // synchronous insertion while the window hit rate < tau, in [0, 1]
  int window = 16;            // counted query() calls in the hit-rate window, >= 1
  uint32_t seed = 0;          // MurmurHash3 seed
};

struct EmbeddingCacheStats {
  int64_t hits = 0, misses = 0;  // counted query() keys
  int64_t inserted = 0;          // replace() keys that took a slot (empty or evicted)
  int64_t evicted = 0;           // of those, the ones that evicted a resident key
  int64_t updated = 0;           // replace() keys already resident (value and stamp refreshed)
  double hit_rate() const { return hits + misses ? double(hits) / double(hits + misses) : 0.0; }
};

struct EmbeddingCacheQuery {
  std::vector<int64_t> missing_index;  // positions in the queried keys, ascending
  std::vector<int64_t> missing_keys;   // the keys at those positions
};

class TANDEM_API EmbeddingCache {
 public:
  static constexpr int64_t kKeyBytes = 8, kMetaBytes = 4;
  static constexpr int64_t kEmptyKey = std::numeric_limits<int64_t>::max();  // not a valid key

  // InvalidArgument naming the option for a dim < 1, warp_size outside {1, 2, 4, 8, 16, 32},
  // set_associativity < 1, tau outside [0, 1], window < 1, or a budget below one set.
  explicit EmbeddingCache(const EmbeddingCacheOptions& options);
  EmbeddingCache(const EmbeddingCache&) = delete;
  EmbeddingCache& operator=(const EmbeddingCache&) = delete;

  // Bytes one cached row costs, and rows a budget holds: floor(budget / row_bytes(dim)).
  static int64_t row_bytes(int64_t dim) { return dim * 4 + kKeyBytes + kMetaBytes; }
  static int64_t rows_for_budget(int64_t budget_bytes, int64_t dim);
  // The constructor's checks of the layout options alone (warp_size, set_associativity, tau,
  // window), for a caller that sizes its caches later.
  static void check_layout(const EmbeddingCacheOptions& options);

  // For each of the n keys: on a hit, copies its value into values[i * dim ..] and stamps it; on a
  // miss, lists i and the key. `count`: the keys go into the hit/miss counters and the window
  // (false for a prefetch's probe). InvalidArgument for kEmptyKey.
  EmbeddingCacheQuery query(const int64_t* keys, int64_t n, float* values, bool count = true);
  // Stores values[i * dim ..] under keys[i]: refreshes a resident key, else takes an empty slot
  // of its set or evicts the set's least recently used one.
  void replace(const int64_t* keys, int64_t n, const float* values);
  // True when a query's misses should be inserted synchronously: window hit rate < tau, or tau = 1.
  bool insert_synchronously() const;
  double window_hit_rate() const;
  EmbeddingCacheStats stats() const;
  bool contains(int64_t key) const;

  int64_t capacity() const { return sets_ * ways_; }
  int64_t sets() const { return sets_; }
  int64_t dim() const { return opt_.dim; }
  const EmbeddingCacheOptions& options() const { return opt_; }

 private:
  int64_t set_of(int64_t key) const;
  // The slot holding key in its set, or -1; the caller holds the set's lock.
  int64_t find(int64_t set, int64_t key) const;
  void count_window(int64_t hits, int64_t lookups);

  EmbeddingCacheOptions opt_;
  int64_t ways_ = 0, sets_ = 0;   // ways_ = set_associativity * warp_size slots per set
  std::vector<int64_t> keys_;     // sets_ * ways_, kEmptyKey = free
  std::vector<uint64_t> stamps_;  // last access, by the set's counter
  std::vector<uint64_t> clocks_;  // per set
  std::vector<float> values_;     // sets_ * ways_ * dim
  std::unique_ptr<std::mutex[]> locks_;
  std::atomic<int64_t> hits_{0}, misses_{0}, inserted_{0}, evicted_{0}, updated_{0};
  mutable std::mutex window_mu_;
  std::vector<std::pair<int64_t, int64_t>> window_;  // (hits, lookups) per counted call, a ring
  size_t window_next_ = 0;
  int64_t window_hits_ = 0, window_lookups_ = 0;
};

}  // namespace tandem::rec
