// SPDX-License-Identifier: Apache-2.0
// The set-associative embedding cache with HugeCTR gpu_cache semantics (embedding_cache.h).
#include "tandem/recsys/embedding_cache.h"

#include <algorithm>
#include <cstring>

#include "tandem/core/error.h"

namespace tandem::rec {

namespace {
uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }
uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}
}  // namespace

uint32_t murmur3_32(const void* data, size_t len, uint32_t seed) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  constexpr uint32_t c1 = 0xcc9e2d51u, c2 = 0x1b873593u;
  uint32_t h = seed;
  const size_t blocks = len / 4;
  for (size_t i = 0; i < blocks; ++i) {
    uint32_t k = 0;
    std::memcpy(&k, bytes + 4 * i, 4);  // little-endian hosts, as the reference
    k *= c1;
    k = rotl32(k, 15);
    k *= c2;
    h ^= k;
    h = rotl32(h, 13);
    h = h * 5 + 0xe6546b64u;
  }
  const uint8_t* tail = bytes + 4 * blocks;
  uint32_t k = 0;
  switch (len & 3) {
    case 3:
      k ^= uint32_t(tail[2]) << 16;
      [[fallthrough]];
    case 2:
      k ^= uint32_t(tail[1]) << 8;
      [[fallthrough]];
    case 1:
      k ^= tail[0];
      k *= c1;
      k = rotl32(k, 15);
      k *= c2;
      h ^= k;
  }
  h ^= static_cast<uint32_t>(len);
  return fmix32(h);
}

int64_t EmbeddingCache::rows_for_budget(int64_t budget_bytes, int64_t dim) {
  if (dim < 1) throw InvalidArgument(cat("EmbeddingCache: dim must be >= 1, got ", dim));
  if (budget_bytes <= 0)
    throw InvalidArgument(cat("EmbeddingCache: budget_bytes must be > 0, got ", budget_bytes));
  return budget_bytes / row_bytes(dim);
}

void EmbeddingCache::check_layout(const EmbeddingCacheOptions& o) {
  const int w = o.warp_size;
  if (w != 1 && w != 2 && w != 4 && w != 8 && w != 16 && w != 32)
    throw InvalidArgument(
        cat("EmbeddingCache: warp_size must be 1, 2, 4, 8, 16 or 32, got ", o.warp_size));
  if (o.set_associativity < 1)
    throw InvalidArgument(
        cat("EmbeddingCache: set_associativity must be >= 1, got ", o.set_associativity));
  if (!(o.tau >= 0 && o.tau <= 1))
    throw InvalidArgument(cat("EmbeddingCache: tau must lie in [0, 1], got ", o.tau));
  if (o.window < 1)
    throw InvalidArgument(cat("EmbeddingCache: window must be >= 1, got ", o.window));
}

EmbeddingCache::EmbeddingCache(const EmbeddingCacheOptions& o) : opt_(o) {
  check_layout(o);
  const int w = o.warp_size;
  const int64_t rows = rows_for_budget(o.budget_bytes, o.dim);
  ways_ = int64_t(o.set_associativity) * w;
  sets_ = rows / ways_;
  if (sets_ < 1)
    throw InvalidArgument(cat("EmbeddingCache: a budget of ", o.budget_bytes, " bytes holds ", rows,
                              " rows of dim ", o.dim, ", fewer than one set (", ways_,
                              " = set_associativity x warp_size)"));
  const auto slots = static_cast<size_t>(sets_ * ways_);
  keys_.assign(slots, kEmptyKey);
  stamps_.assign(slots, 0);
  clocks_.assign(static_cast<size_t>(sets_), 0);
  values_.assign(slots * static_cast<size_t>(o.dim), 0.0f);
  locks_ = std::make_unique<std::mutex[]>(static_cast<size_t>(sets_));
  window_.assign(static_cast<size_t>(o.window), {0, 0});
}

int64_t EmbeddingCache::set_of(int64_t key) const {
  if (key == kEmptyKey)
    throw InvalidArgument(cat("EmbeddingCache: key ", key, " is the reserved empty key"));
  return int64_t(murmur3_32(&key, sizeof key, opt_.seed) % uint64_t(sets_));
}

int64_t EmbeddingCache::find(int64_t set, int64_t key) const {
  const int64_t first = set * ways_;
  for (int64_t s = first; s < first + ways_; ++s)
    if (keys_[size_t(s)] == key) return s;
  return -1;
}

EmbeddingCacheQuery EmbeddingCache::query(const int64_t* keys, int64_t n, float* values,
                                          bool count) {
  EmbeddingCacheQuery r;
  const auto dim = size_t(opt_.dim);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t set = set_of(keys[i]);
    std::lock_guard lock(locks_[size_t(set)]);
    const int64_t s = find(set, keys[i]);
    if (s < 0) {
      r.missing_index.push_back(i);
      r.missing_keys.push_back(keys[i]);
      continue;
    }
    stamps_[size_t(s)] = ++clocks_[size_t(set)];
    std::memcpy(values + size_t(i) * dim, &values_[size_t(s) * dim], dim * sizeof(float));
  }
  if (count) {
    const auto missed = int64_t(r.missing_index.size());
    hits_ += n - missed;
    misses_ += missed;
    count_window(n - missed, n);
  }
  return r;
}

void EmbeddingCache::replace(const int64_t* keys, int64_t n, const float* values) {
  const auto dim = size_t(opt_.dim);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t set = set_of(keys[i]);
    std::lock_guard lock(locks_[size_t(set)]);
    int64_t s = find(set, keys[i]);
    if (s >= 0) {
      ++updated_;
    } else {
      s = find(set, kEmptyKey);
      if (s < 0) {  // full: the least recently used slot of the set
        const auto first = stamps_.begin() + set * ways_;
        s = set * ways_ + (std::min_element(first, first + ways_) - first);
        ++evicted_;
      }
      ++inserted_;
      keys_[size_t(s)] = keys[i];
    }
    stamps_[size_t(s)] = ++clocks_[size_t(set)];
    std::memcpy(&values_[size_t(s) * dim], values + size_t(i) * dim, dim * sizeof(float));
  }
}

bool EmbeddingCache::contains(int64_t key) const {
  const int64_t set = set_of(key);
  std::lock_guard lock(locks_[size_t(set)]);
  return find(set, key) >= 0;
}

void EmbeddingCache::count_window(int64_t hits, int64_t lookups) {
  std::lock_guard lock(window_mu_);
  auto& slot = window_[window_next_];
  window_hits_ += hits - slot.first;
  window_lookups_ += lookups - slot.second;
  slot = {hits, lookups};
  window_next_ = (window_next_ + 1) % window_.size();
}

double EmbeddingCache::window_hit_rate() const {
  std::lock_guard lock(window_mu_);
  return window_lookups_ ? double(window_hits_) / double(window_lookups_) : 0.0;
}

bool EmbeddingCache::insert_synchronously() const {
  return opt_.tau >= 1 || window_hit_rate() < opt_.tau;
}

EmbeddingCacheStats EmbeddingCache::stats() const {
  return {hits_.load(), misses_.load(), inserted_.load(), evicted_.load(), updated_.load()};
}

}  // namespace tandem::rec
