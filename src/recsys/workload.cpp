// SPDX-License-Identifier: Apache-2.0
// Index generators, query sizes, arrivals and the query factory.
#include "tandem/recsys/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <list>
#include <numeric>
#include <sstream>
#include <unordered_map>

#include "tandem/core/error.h"

namespace tandem::rec {

IndexDist parse_index_dist(const std::string& s) {
  if (s == "uniform") return IndexDist::kUniform;
  if (s == "zipf") return IndexDist::kZipf;
  if (s == "stack") return IndexDist::kStackDistance;
  throw InvalidArgument(cat("unknown index distribution '", s, "' (uniform, zipf, stack)"));
}

SizeDist parse_size_dist(const std::string& s) {
  if (s == "fixed") return SizeDist::kFixed;
  if (s == "normal") return SizeDist::kNormal;
  if (s == "lognormal") return SizeDist::kLognormal;
  if (s == "uniform") return SizeDist::kUniform;
  if (s == "quantiles") return SizeDist::kQuantiles;
  throw InvalidArgument(cat("unknown query-size distribution '", s,
                            "' (fixed, normal, lognormal, uniform, quantiles)"));
}

std::vector<int64_t> read_size_quantiles(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw IoError(cat("cannot open query-size quantile file '", path, "'"));
  std::vector<int64_t> sizes;
  std::string line;
  for (int64_t line_no = 1; std::getline(f, line); ++line_no) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream in(line);
    std::string tok;
    while (in >> tok) {
      char* end = nullptr;
      const double v = std::strtod(tok.c_str(), &end);
      if (end == tok.c_str() || *end != '\0' || !(v >= 1) || v > double(int64_t{1} << 24))
        throw ParseError(path, -1,
                         cat("line ", line_no, ": bad query size '", tok, "' (1 .. 2^24 rows)"));
      sizes.push_back(static_cast<int64_t>(std::llround(v)));
    }
  }
  if (sizes.empty()) throw ParseError(path, -1, "no query sizes");
  return sizes;
}

void use_size_quantiles(QuerySizeOptions& o, std::vector<int64_t> sizes) {
  if (sizes.empty()) throw InvalidArgument("quantile query sizes need a non-empty list");
  o.dist = SizeDist::kQuantiles;
  o.max = *std::max_element(sizes.begin(), sizes.end());
  o.quantiles = std::move(sizes);
}

namespace {

double uniform01(std::mt19937_64& rng) { return (rng() >> 11) * (1.0 / 9007199254740992.0); }

// x -> (a x + b) mod n with gcd(a, n) = 1.
class Permutation {
 public:
  Permutation(int64_t n, uint64_t seed) : n_(n) {
    std::mt19937_64 r(seed);
    a_ = static_cast<int64_t>(r() % uint64_t(n)) | 1;
    while (std::gcd(a_, n_) != 1) a_ = (a_ + 2) % n_ == 0 ? 1 : (a_ + 2) % n_;
    b_ = static_cast<int64_t>(r() % uint64_t(n));
  }
  int64_t operator()(int64_t x) const {
    return static_cast<int64_t>((static_cast<unsigned __int128>(a_) * uint64_t(x) + uint64_t(b_)) %
                                uint64_t(n_));
  }

 private:
  int64_t n_, a_ = 1, b_ = 0;
};

class UniformGen final : public IndexGenerator {
 public:
  explicit UniformGen(int64_t rows) : IndexGenerator(rows) {}
  int64_t next(std::mt19937_64& rng) override {
    return static_cast<int64_t>(rng() % uint64_t(rows_));
  }
};

// Rejection-inversion sampling of Zipf(s) over ranks 1..n.
class ZipfGen final : public IndexGenerator {
 public:
  ZipfGen(int64_t rows, double s, bool permute, uint64_t seed)
      : IndexGenerator(rows), s_(s), perm_(rows, seed), permute_(permute) {
    h_x1_ = big_h(1.5) - 1.0;
    h_n_ = big_h(double(rows) + 0.5);
    s_div_ = 2.0 - big_h_inv(big_h(2.5) - h(2.0));
  }
  int64_t next(std::mt19937_64& rng) override {
    int64_t k;
    for (;;) {
      const double u = h_n_ + uniform01(rng) * (h_x1_ - h_n_);
      const double x = big_h_inv(u);
      k = static_cast<int64_t>(x + 0.5);
      k = std::clamp<int64_t>(k, 1, rows_);
      if (double(k) - x <= s_div_ || u >= big_h(double(k) + 0.5) - h(double(k))) break;
    }
    return permute_ ? perm_(k - 1) : k - 1;
  }

 private:
  double h(double x) const { return std::exp(-s_ * std::log(x)); }
  // H(x) = integral of h: (x^(1-s) - 1) / (1 - s), log x at s = 1.
  double big_h(double x) const {
    const double l = std::log(x);
    const double e = (1.0 - s_) * l;
    return std::abs(e) < 1e-8 ? l * (1.0 + e / 2.0) : std::expm1(e) / (1.0 - s_);
  }
  double big_h_inv(double y) const {
    const double t = y * (1.0 - s_);
    if (std::abs(t) < 1e-8) return std::exp(y * (1.0 - t / 2.0));
    return std::exp(std::log1p(t) / (1.0 - s_));
  }
  double s_, h_x1_, h_n_, s_div_;
  Permutation perm_;
  bool permute_;
};

class StackGen final : public IndexGenerator {
 public:
  StackGen(int64_t rows, StackProfile profile, uint64_t seed)
      : IndexGenerator(rows), cdf_(std::move(profile.cdf)), perm_(rows, seed) {
    if (cdf_.empty()) throw InvalidArgument("stack-distance profile is empty");
  }
  int64_t next(std::mt19937_64& rng) override {
    const double u = uniform01(rng) * cdf_.back();
    const int64_t d = std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
    int64_t row;
    if (d == 0 || d > static_cast<int64_t>(stack_.size())) {
      row = cold_ < rows_ ? perm_(cold_++) : static_cast<int64_t>(rng() % uint64_t(rows_));
    } else {
      const size_t at = stack_.size() - size_t(d);
      row = stack_[at];
      stack_.erase(stack_.begin() + static_cast<std::ptrdiff_t>(at));
    }
    stack_.push_back(row);  // most recent at the back
    if (stack_.size() > cdf_.size() + 1) stack_.erase(stack_.begin());
    return row;
  }

 private:
  std::vector<double> cdf_;
  Permutation perm_;
  std::vector<int64_t> stack_;
  int64_t cold_ = 0;
};

}  // namespace

std::unique_ptr<IndexGenerator> make_index_generator(int64_t rows, const IndexOptions& opt,
                                                     uint64_t seed) {
  if (rows <= 0) throw InvalidArgument(cat("index generator over ", rows, " rows"));
  switch (opt.dist) {
    case IndexDist::kUniform:
      return std::make_unique<UniformGen>(rows);
    case IndexDist::kZipf:
      if (!(opt.zipf_s >= 0) || !std::isfinite(opt.zipf_s))
        throw InvalidArgument(cat("Zipf exponent ", opt.zipf_s, " must be >= 0"));
      if (opt.zipf_s == 0) return std::make_unique<UniformGen>(rows);
      return std::make_unique<ZipfGen>(rows, opt.zipf_s, opt.permute, seed);
    case IndexDist::kStackDistance:
      return std::make_unique<StackGen>(
          rows, opt.stack.cdf.empty() ? default_stack_profile() : opt.stack, seed);
  }
  throw InvalidArgument("unknown index distribution");
}

StackProfile profile_stack_distances(const std::vector<int64_t>& trace, int64_t max_distance) {
  std::vector<double> hist(static_cast<size_t>(max_distance + 1), 0.0);
  std::vector<int64_t> stack;  // most recent at the back
  for (int64_t x : trace) {
    int64_t d = 0;
    for (size_t i = stack.size(); i > 0; --i)
      if (stack[i - 1] == x) {
        d = static_cast<int64_t>(stack.size() - i + 1);
        stack.erase(stack.begin() + static_cast<std::ptrdiff_t>(i - 1));
        break;
      }
    hist[d > max_distance ? 0 : d] += 1;
    stack.push_back(x);
    if (static_cast<int64_t>(stack.size()) > max_distance + 1) stack.erase(stack.begin());
  }
  StackProfile p;
  double acc = 0;
  const double n = std::max<double>(1, double(trace.size()));
  for (double h : hist) p.cdf.push_back(acc += h / n);
  while (p.cdf.size() > 1 && p.cdf.back() == p.cdf[p.cdf.size() - 2]) p.cdf.pop_back();
  return p;
}

StackProfile default_stack_profile(double cold, int64_t max_distance) {
  StackProfile p;
  double norm = 0;
  for (int64_t d = 1; d <= max_distance; ++d) norm += 1.0 / double(d);
  double acc = cold;
  p.cdf.push_back(acc);
  for (int64_t d = 1; d <= max_distance; ++d) p.cdf.push_back(acc += (1 - cold) / double(d) / norm);
  return p;
}

double lru_hit_rate(const std::vector<int64_t>& trace, int64_t capacity) {
  std::list<int64_t> lru;
  std::unordered_map<int64_t, std::list<int64_t>::iterator> where;
  int64_t hits = 0;
  for (int64_t x : trace) {
    auto it = where.find(x);
    if (it != where.end()) {
      ++hits;
      lru.erase(it->second);
    } else if (static_cast<int64_t>(lru.size()) == capacity) {
      where.erase(lru.back());
      lru.pop_back();
    }
    lru.push_front(x);
    where[x] = lru.begin();
  }
  return trace.empty() ? 0.0 : double(hits) / double(trace.size());
}

int64_t sample_query_size(const QuerySizeOptions& o, int64_t model_default, std::mt19937_64& rng) {
  const double mean = o.mean > 0 ? o.mean : double(model_default);
  double v = mean;
  switch (o.dist) {
    case SizeDist::kFixed:
      break;
    case SizeDist::kNormal:
      v = std::normal_distribution<double>(mean, o.stddev)(rng);
      break;
    case SizeDist::kLognormal:
      // Median `mean`, sd of the log `stddev`.
      v = std::exp(std::normal_distribution<double>(std::log(mean), o.stddev)(rng));
      break;
    case SizeDist::kUniform:
      v = double(o.min) + uniform01(rng) * double(o.max - o.min + 1);
      break;
    case SizeDist::kQuantiles:
      if (o.quantiles.empty()) throw InvalidArgument("quantile query sizes need a non-empty list");
      v = double(o.quantiles[rng() % o.quantiles.size()]);
      break;
  }
  return std::clamp<int64_t>(static_cast<int64_t>(std::llround(v)), std::max<int64_t>(1, o.min),
                             std::max<int64_t>(1, o.max));
}

QueryFactory::QueryFactory(const ModelConfig& cfg, const WorkloadOptions& opt)
    : cfg_(cfg), opt_(opt), rng_(opt.seed) {
  uint64_t s = opt.seed * 7919;
  for (const auto& t : cfg_.tables)
    tables_.push_back(make_index_generator(t.rows, opt.index, splitmix64(++s)));
  for (const auto& t : cfg_.item_tables)
    items_.push_back(make_index_generator(t.rows, opt.index, splitmix64(++s)));
}

QueryInputs QueryFactory::make(uint64_t tag, int64_t rows) {
  std::lock_guard lk(mu_);
  QueryInputs q;
  q.rows = rows > 0 ? rows : sample_query_size(opt_.size, cfg_.query_size, rng_);
  std::mt19937_64 dense_rng(splitmix64(opt_.seed ^ (tag * 0x9e3779b97f4a7c15ull)));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  q.dense.resize(static_cast<size_t>(q.rows * cfg_.dense_features));
  for (auto& v : q.dense) v = u(dense_rng);
  for (size_t t = 0; t < cfg_.tables.size(); ++t) {
    const int64_t pool = cfg_.tables[t].pooling;
    std::vector<int64_t> ids, off = {0};
    for (int64_t r = 0; r < q.rows; ++r) {
      const int64_t n = opt_.variable_pooling ? 1 + int64_t(rng_() % uint64_t(pool)) : pool;
      for (int64_t i = 0; i < n; ++i) ids.push_back(tables_[t]->next(rng_));
      off.push_back(static_cast<int64_t>(ids.size()));
    }
    q.ids.push_back(std::move(ids));
    q.offsets.push_back(std::move(off));
  }
  for (size_t k = 0; k < cfg_.item_tables.size(); ++k) {
    std::vector<int64_t> c(static_cast<size_t>(q.rows)),
        s(static_cast<size_t>(q.rows * cfg_.seq_len));
    for (auto& v : c) v = items_[k]->next(rng_);
    for (auto& v : s) v = items_[k]->next(rng_);
    q.item_ids.push_back(std::move(c));
    q.seq_ids.push_back(std::move(s));
  }
  return q;
}

PoissonArrivals::PoissonArrivals(double rate_qps, uint64_t seed) : rng_(seed), gap_(rate_qps) {
  if (!(rate_qps > 0)) throw InvalidArgument(cat("Poisson rate ", rate_qps, " must be positive"));
}

double PoissonArrivals::next_gap_s() { return gap_(rng_); }

}  // namespace tandem::rec
