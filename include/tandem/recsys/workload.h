// SPDX-License-Identifier: Apache-2.0
// Workload kit: embedding index generators (uniform, Zipf, stack distance), query-size
// distributions, Poisson arrivals, and a QueryFactory that turns them into model inputs.
//
// Index generators return rows in [0, rows). Zipf(s) draws rank k with probability ∝ k^-s by
// rejection inversion (Hörmann and Derflinger, 1996), O(1) per draw for any table size; s = 0 is
// uniform. Ranks go through a fixed pseudo-random permutation of the rows (x -> (a x + b) mod rows,
// gcd(a, rows) = 1), so hot rows are not contiguous (the recsys spec §2.9). The stack-distance
// generator reproduces the LRU reuse profile of a trace (DLRM's trace_profile / trace_generate_lru
// idea): sample a distance d from the profile; d = 0 takes the next never-seen row, else the row at
// LRU depth d is re-referenced and moves to the top. profile_stack_distances() measures a trace.
//
// Query sizes (candidate rows per query) are fixed, normal (DeepRecSys: mean 165, sd 4), lognormal,
// uniform, or drawn from a quantile list (MLPerf's 100-700 distribution file), clipped to
// [min, max]. Pooled tables draw a bag of `pooling` ids per row (fixed) or 1..pooling (variable).
//
//   tandem::rec::WorkloadOptions w;
//   w.index.dist = tandem::rec::IndexDist::kZipf;  w.index.zipf_s = 1.05;
//   tandem::rec::QueryFactory f(cfg, w);
//   tandem::rec::QueryInputs q = f.make(0);      // a query of a sampled size
//
// Thread-safety: generators are not thread-safe (they hold RNG and LRU state); QueryFactory::make
// locks, so one factory may be shared. Results are deterministic for a seed and call sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "tandem/export.h"
#include "tandem/recsys/model.h"

namespace tandem::rec {

enum class IndexDist { kUniform, kZipf, kStackDistance };
TANDEM_API IndexDist parse_index_dist(const std::string& s);  // "uniform", "zipf", "stack"

// LRU stack-distance profile: cdf[d] = P(distance <= d), d = 0 the cold (first-touch) bucket.
struct StackProfile {
  std::vector<double> cdf;
};
// The profile of a trace, distances above max_distance counted as cold.
TANDEM_API StackProfile profile_stack_distances(const std::vector<int64_t>& trace,
                                                int64_t max_distance = 4096);
// A synthetic profile: `cold` first touches, the rest ∝ 1/d over d in [1, max_distance].
TANDEM_API StackProfile default_stack_profile(double cold = 0.1, int64_t max_distance = 4096);
// Hit rate of an LRU cache of `capacity` rows on a trace (for comparing traces).
TANDEM_API double lru_hit_rate(const std::vector<int64_t>& trace, int64_t capacity);

struct IndexOptions {
  IndexDist dist = IndexDist::kUniform;
  double zipf_s = 1.05;  // exponent (0 = uniform)
  bool permute = true;   // scatter hot ranks over the table
  StackProfile stack;    // empty = default_stack_profile()
};

class TANDEM_API IndexGenerator {
 public:
  virtual ~IndexGenerator() = default;
  virtual int64_t next(std::mt19937_64& rng) = 0;
  int64_t rows() const { return rows_; }

 protected:
  explicit IndexGenerator(int64_t rows) : rows_(rows) {}
  int64_t rows_;
};

TANDEM_API std::unique_ptr<IndexGenerator> make_index_generator(int64_t rows,
                                                                const IndexOptions& opt,
                                                                uint64_t seed = 0);

enum class SizeDist { kFixed, kNormal, kLognormal, kUniform, kQuantiles };
TANDEM_API SizeDist
parse_size_dist(const std::string& s);  // fixed normal lognormal uniform quantiles

struct QuerySizeOptions {
  SizeDist dist = SizeDist::kFixed;
  double mean = 0;    // fixed/normal/lognormal; 0 = the model's query_size
  double stddev = 4;  // normal: sd; lognormal: sd of the log
  int64_t min = 1, max = 1024;
  std::vector<int64_t> quantiles;  // kQuantiles: equally likely sizes (e.g. 100 values)
};
// Query sizes from a quantile file (MLPerf DLRM's tools/dist_quantile.txt format: sizes separated
// by commas and/or white space, '#' starts a comment); ParseError naming the line on a bad size.
TANDEM_API std::vector<int64_t> read_size_quantiles(const std::string& path);
// Sets `o` to draw equally likely sizes from `sizes` (max = the largest).
TANDEM_API void use_size_quantiles(QuerySizeOptions& o, std::vector<int64_t> sizes);
TANDEM_API int64_t sample_query_size(const QuerySizeOptions& o, int64_t model_default,
                                     std::mt19937_64& rng);

struct WorkloadOptions {
  IndexOptions index;
  QuerySizeOptions size;
  bool variable_pooling = false;  // bags of 1..pooling ids instead of exactly pooling
  uint64_t seed = 1;
};

class TANDEM_API QueryFactory {
 public:
  QueryFactory(const ModelConfig& cfg, const WorkloadOptions& opt);
  // A query of `rows` rows (0 = sampled). `tag` (e.g. the query index) is folded into the dense
  // features' RNG so distinct queries differ.
  QueryInputs make(uint64_t tag, int64_t rows = 0);

 private:
  ModelConfig cfg_;
  WorkloadOptions opt_;
  std::mutex mu_;
  std::mt19937_64 rng_;
  std::vector<std::unique_ptr<IndexGenerator>> tables_, items_;
};

// Open-loop arrivals: exponential gaps with mean 1/rate_qps.
class TANDEM_API PoissonArrivals {
 public:
  PoissonArrivals(double rate_qps, uint64_t seed);
  double next_gap_s();

 private:
  std::mt19937_64 rng_;
  std::exponential_distribution<double> gap_;
};

}  // namespace tandem::rec
