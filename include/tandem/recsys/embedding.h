// SPDX-License-Identifier: Apache-2.0
// Embedding store: tables of f32, f16 or row-wise int8 rows, pooled lookups (sum or mean), hashing
// of raw ids, tables mapped from files larger than memory, and a hot-row cache with hit-rate
// statistics.
//
// Why: in recommendation models the embedding bags are the memory-bound half of the work (the
// recsys spec §2.8). A table stores `rows` rows of `dim` values; an int8 row is `dim` uint8 codes q
// followed by an f32 scale and an f32 bias, value = q * scale + bias (the FBGEMM row-wise layout).
// A pooled lookup reads, for each bag b, the rows ids[offsets[b] .. offsets[b+1]) and writes their
// sum (or mean) as f32. Raw ids (any int64) map to rows with hash_id() when a table is hashed.
//
//   auto t = tandem::rec::EmbeddingTable::generate("emb.0", 1000, 16, tandem::DType::kI8, 7,
//   0.25f); std::vector<int64_t> ids = {3, 5, 9}, off = {0, 2, 3}; std::vector<float> out(2 * 16);
//   t.pooled_lookup(ids.data(), off.data(), 2, tandem::rec::Pooling::kSum, out.data(), 16);
//
// Files (.temb): a 64-byte header (magic "TNDEMB01", u32 version 1, u32 dtype 0 f32 / 1 f16 /
// 2 i8-rowwise, u64 rows, u64 dim, u64 row bytes, u64 data offset 64, zero padding), then the rows.
// map_file() maps it read-only (MAP_SHARED): the kernel pages rows in on demand, so a table larger
// than RAM works and only its touched pages occupy memory. write_generated_file() streams the
// generated rows to disk without holding the table in memory.
//
// HotRowCache keeps recently used rows as f32 in a set-associative array (ways per set, LRU by
// timestamp within a set, sets chosen by a hash of the row), in front of any table; lookups count
// hits and misses. Thread-safety: tables are immutable and may be read concurrently; the cache
// locks per set and may be shared by concurrent lookups.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/core/dtype.h"
#include "tandem/export.h"
#include "tandem/recsys/config.h"
#include "tandem/recsys/weights.h"

namespace tandem::rec {

// Raw id -> row in [0, rows): splitmix64(id ^ salt) % rows.
TANDEM_API int64_t hash_id(int64_t id, uint64_t salt, int64_t rows);

struct CacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  double hit_rate() const { return hits + misses ? double(hits) / double(hits + misses) : 0.0; }
};

class TANDEM_API HotRowCache {
 public:
  // capacity_rows >= ways; ways in [1, 64].
  HotRowCache(int64_t capacity_rows, int64_t dim, int ways = 4);
  HotRowCache(const HotRowCache&) = delete;
  HotRowCache& operator=(const HotRowCache&) = delete;
  // Copies the cached row into out (dim floats) and returns true on a hit; counts the access.
  bool lookup(int64_t row, float* out);
  // Inserts (or refreshes) a row, evicting the least recently used way of its set.
  void insert(int64_t row, const float* values);
  CacheStats stats() const { return {hits_.load(), misses_.load()}; }
  void reset_stats();
  int64_t capacity_rows() const { return sets_ * ways_; }
  int64_t dim() const { return dim_; }

 private:
  struct Set {
    std::mutex mu;
  };
  int64_t sets_, ways_, dim_;
  std::vector<int64_t> keys_;     // sets_ * ways_, -1 = empty
  std::vector<uint64_t> stamps_;  // last use
  std::vector<float> values_;     // sets_ * ways_ * dim_
  std::unique_ptr<Set[]> locks_;
  std::atomic<uint64_t> clock_{0};
  std::atomic<int64_t> hits_{0}, misses_{0};
};

class TANDEM_API EmbeddingTable {
 public:
  EmbeddingTable() = default;
  // A generated table (weights.h rule, tensor name `name`), stored in `dtype` (f32, f16, i8):
  // the f32 values are generated and then converted row by row.
  static EmbeddingTable generate(const std::string& name, int64_t rows, int64_t dim, DType dtype,
                                 uint64_t model_seed, float scale);
  // From f32 values [rows, dim] (converted to dtype).
  static EmbeddingTable from_f32(const std::string& name, const float* values, int64_t rows,
                                 int64_t dim, DType dtype);
  // From stored rows (rows * row_bytes(dtype, dim) bytes), copied.
  static EmbeddingTable from_rows(const std::string& name, const uint8_t* data, int64_t rows,
                                  int64_t dim, DType dtype);
  // Maps a .temb file; ParseError naming the file and field for a bad header or size.
  static EmbeddingTable map_file(const std::string& path, const std::string& name = "");
  // Writes this table as .temb.
  void write_file(const std::string& path) const;
  // Streams a generated table to a .temb file chunk by chunk (memory stays O(chunk)).
  static void write_generated_file(const std::string& path, const std::string& name, int64_t rows,
                                   int64_t dim, DType dtype, uint64_t model_seed, float scale);

  static int64_t row_bytes(DType dtype, int64_t dim);  // f32 4d, f16 2d, i8 d + 8

  const std::string& name() const { return name_; }
  int64_t rows() const { return rows_; }
  int64_t dim() const { return dim_; }
  DType dtype() const { return dtype_; }
  bool mapped() const { return mapped_; }
  int64_t bytes() const { return rows_ * row_bytes_; }
  const uint8_t* row_data(int64_t row) const { return base_ + row * row_bytes_; }

  // Dequantized row into out[dim]; throws InvalidArgument for a row outside [0, rows).
  void read_row(int64_t row, float* out) const;
  // out[b * out_stride + d] = pool over ids[offsets[b] .. offsets[b+1]) of row(ids)[d].
  // ids must lie in [0, rows) (InvalidArgument naming the table otherwise); an empty bag gives 0.
  // With a cache, rows are served from it when present and inserted after a miss.
  void pooled_lookup(const int64_t* ids, const int64_t* offsets, int64_t bags, Pooling mode,
                     float* out, int64_t out_stride, HotRowCache* cache = nullptr) const;
  // Early touch (the recsys spec §2.8, prefetch on the CPU executor): reads one byte of every page
  // the rows [rows[i]] span, so that a mapped table's pages are resident before a lookup needs
  // them (page faults taken here, on the caller's thread, not in the lookup). Returns the distinct
  // pages read; 0 for a table in memory (nothing to fetch). Rows outside [0, rows) are skipped.
  int64_t touch_rows(const int64_t* rows, int64_t n) const;
  // Same, but ids are hashed to rows with `salt` first.
  void pooled_lookup_hashed(const int64_t* raw_ids, const int64_t* offsets, int64_t bags,
                            uint64_t salt, Pooling mode, float* out, int64_t out_stride,
                            HotRowCache* cache = nullptr) const;

 private:
  void accumulate_row(int64_t row, float* acc, HotRowCache* cache) const;
  std::string name_;
  int64_t rows_ = 0, dim_ = 0, row_bytes_ = 0;
  DType dtype_ = DType::kF32;
  bool mapped_ = false;
  std::shared_ptr<void> storage_;  // owned bytes or the mapping
  const uint8_t* base_ = nullptr;
};

}  // namespace tandem::rec
