// SPDX-License-Identifier: Apache-2.0
// RecFlow statistics file reader and request generator (recflow.h).
#include "tandem/recsys/recflow.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_set>

#include "core/json_reader.h"
#include "tandem/core/error.h"

namespace tandem::rec {

using detail::JsonField;

RecFlowStats parse_recflow_stats(const nlohmann::json& j, const std::string& source) {
  const JsonField f(j, source, "");
  f.expect_object({"source", "note", "assumed", "dataset", "schema_model", "stages", "candidates",
                   "seq_len", "profile_tables", "item_zipf_s", "user_zipf_s"});
  RecFlowStats s;
  s.source = f.at("source").non_empty_string();
  s.schema_model = f.at("schema_model").non_empty_string();
  const JsonField st = f.at("stages");
  if (st.array_size() == 0) st.fail("need at least one stage");
  for (size_t i = 0; i < st.array_size(); ++i) {
    const JsonField e = st[i];
    e.expect_object({"name", "model", "keep"});
    s.stages.push_back({e.at("name").non_empty_string(), e.at("model").non_empty_string(),
                        e.at("keep").positive_integer()});
  }
  const JsonField c = f.at("candidates");
  c.expect_object({"median", "sigma", "min", "max"});
  s.candidates_median = c.at("median").positive_number();
  s.candidates_sigma = c.at("sigma").non_negative_number();
  s.candidates_min = c.at("min").positive_integer();
  s.candidates_max = c.at("max").positive_integer();
  if (s.candidates_min > s.candidates_max)
    c.at("min").fail(cat("min ", s.candidates_min, " exceeds max ", s.candidates_max));
  if (s.candidates_max > (int64_t{1} << 24)) c.at("max").fail("at most 2^24 candidates");
  s.seq_len = f.at("seq_len").positive_integer();
  s.profile_tables = f.at("profile_tables").positive_integer();
  s.item_zipf_s = f.at("item_zipf_s").non_negative_number();
  s.user_zipf_s = f.at("user_zipf_s").non_negative_number();
  if (f.has("dataset")) {
    const JsonField d = f.at("dataset");
    for (const auto& [key, v] : d.members()) v.non_negative_number();  // counts, never negative
    s.dataset = d.value();
  }
  return s;
}

RecFlowStats read_recflow_stats(const std::string& path) {
  return parse_recflow_stats(detail::read_json_file(path), path);
}

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A fixed attribute of an entity (a video's author, a user's age): row of table k for id.
int64_t attribute(int64_t id, size_t k, int64_t rows) {
  return static_cast<int64_t>(mix(mix(static_cast<uint64_t>(id)) + k) %
                              static_cast<uint64_t>(rows));
}

}  // namespace

RecFlowRequests::RecFlowRequests(const ModelConfig& schema, const RecFlowStats& stats,
                                 uint64_t seed)
    : schema_(schema), stats_(stats), seed_(seed) {
  if (schema_.item_tables.empty())
    throw InvalidArgument(
        cat("RecFlow requests: schema model '", schema_.name, "' has no item tables"));
  if (static_cast<int64_t>(schema_.tables.size()) < stats_.profile_tables)
    throw InvalidArgument(cat("RecFlow requests: schema model '", schema_.name, "' has ",
                              schema_.tables.size(), " user tables, fewer than profile_tables ",
                              stats_.profile_tables));
  if (schema_.seq_len != stats_.seq_len)
    throw InvalidArgument(cat("RecFlow requests: schema model '", schema_.name, "' reads ",
                              schema_.seq_len, " behaviours, the statistics say ", stats_.seq_len));
  IndexOptions io;
  io.dist = IndexDist::kZipf;
  io.zipf_s = stats_.item_zipf_s;
  items_ = make_index_generator(schema_.item_tables[0].rows, io, seed);
  io.zipf_s = stats_.user_zipf_s;
  if (!schema_.tables.empty()) users_ = make_index_generator(schema_.tables[0].rows, io, seed + 1);
}

RecFlowRequests::~RecFlowRequests() = default;

QueryInputs RecFlowRequests::make(uint64_t tag) {
  std::lock_guard lk(mu_);
  std::mt19937_64 rng(mix(seed_ * 0x100000001b3ull + tag));
  const double z = std::normal_distribution<double>(0, 1)(rng);
  const double n_real = stats_.candidates_median * std::exp(stats_.candidates_sigma * z);
  // Distinct candidates where the table allows; a tiny table repeats videos.
  const int64_t n =
      std::clamp<int64_t>(std::llround(n_real), stats_.candidates_min, stats_.candidates_max);
  std::vector<int64_t> cand;
  std::unordered_set<int64_t> seen;
  for (int64_t tries = 0; static_cast<int64_t>(cand.size()) < n; ++tries) {
    const int64_t v = items_->next(rng);
    if (seen.insert(v).second || tries >= 20 * n) cand.push_back(v);
  }
  const int64_t L = schema_.seq_len;
  std::vector<int64_t> seq(static_cast<size_t>(L));
  for (auto& v : seq) v = items_->next(rng);
  const int64_t user = users_ ? users_->next(rng) : 0;

  QueryInputs q;
  q.rows = n;
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  q.dense.resize(static_cast<size_t>(n * schema_.dense_features));
  for (auto& d : q.dense) d = u01(rng);
  for (size_t t = 0; t < schema_.tables.size(); ++t) {
    const TableConfig& tc = schema_.tables[t];
    std::vector<int64_t> bag(static_cast<size_t>(tc.pooling));
    const bool profile = static_cast<int64_t>(t) < stats_.profile_tables;
    for (size_t b = 0; b < bag.size(); ++b) {
      const int64_t key = user * int64_t{1024} + static_cast<int64_t>(b);
      if (t == 0 && b == 0)
        bag[b] = user;
      else if (profile)
        bag[b] = attribute(key, t, tc.rows);
      else  // context: per request
        bag[b] = static_cast<int64_t>(rng() % static_cast<uint64_t>(tc.rows));
    }
    std::vector<int64_t> ids, offsets{0};
    for (int64_t r = 0; r < n; ++r) {
      ids.insert(ids.end(), bag.begin(), bag.end());
      offsets.push_back(static_cast<int64_t>(ids.size()));
    }
    q.ids.push_back(std::move(ids));
    q.offsets.push_back(std::move(offsets));
  }
  for (size_t k = 0; k < schema_.item_tables.size(); ++k) {
    const int64_t rows = schema_.item_tables[k].rows;
    auto of = [&](int64_t vid) { return k == 0 ? vid : attribute(vid, 100 + k, rows); };
    std::vector<int64_t> items, behaviours;
    for (int64_t v : cand) items.push_back(of(v));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t v : seq) behaviours.push_back(of(v));
    q.item_ids.push_back(std::move(items));
    q.seq_ids.push_back(std::move(behaviours));
  }
  return q;
}

}  // namespace tandem::rec
