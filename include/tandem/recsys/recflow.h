// SPDX-License-Identifier: Apache-2.0
// RecFlow-shaped requests for the multi-stage pipeline (pipeline.h), generated from a statistics
// file, not from the dataset: the stage funnel (which zoo model scores each stage and how many rows
// it keeps), the retrieval candidate count per request, the behaviour-sequence length and the ID
// skew. configs/recsys/recflow-stats.json holds the numbers of RecFlow's published description
// (the recsys spec §2.9) and marks the ones that are assumptions; no RecFlow data is in the tree.
//
// A request is one QueryInputs of the schema model (RecFlow's DIN: the 8 user-side and 5 video
// tables), one row per retrieval candidate, every row with the same user and behaviours:
//   candidates  n = clip(round(median * exp(sigma * N(0, 1))), min, max), distinct videos drawn
//               Zipf(item_zipf_s) over the first item table (video id), through a fixed permutation
//   behaviours  seq_len videos, Zipf(item_zipf_s) too
//   video attributes (item tables 1..): a fixed hash of the video id, so a video always has the
//               same author and categories
//   user        table 0 (user id) Zipf(user_zipf_s); tables 1 .. profile_tables-1 a fixed hash of
//               the user id (device, gender, age, province); the rest (weekday, hour, minute)
//               uniform per request
//
//   auto stats = tandem::rec::read_recflow_stats("configs/recsys/recflow-stats.json");
//   tandem::rec::RecFlowRequests gen(tandem::rec::zoo_config(stats.schema_model), stats, 1);
//   tandem::rec::QueryInputs request = gen.make(0);
//
// Thread-safety: make() locks, so one generator may be shared; deterministic for a seed and tag.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/export.h"
#include "tandem/recsys/model.h"
#include "tandem/recsys/workload.h"

namespace tandem::rec {

struct RecFlowStats {
  struct Stage {
    std::string name;
    std::string model;  // a zoo name or a model file
    int64_t keep = 1;   // rows passed on (top-k)
  };
  std::string source;        // where the numbers come from
  std::string schema_model;  // the zoo model whose tables a request fills (RecFlow's DIN)
  std::vector<Stage> stages;
  double candidates_median = 0, candidates_sigma = 0;  // retrieval candidates, lognormal
  int64_t candidates_min = 1, candidates_max = 1;
  int64_t seq_len = 0;
  int64_t profile_tables = 1;  // user-side tables fixed per user (the rest per request)
  double item_zipf_s = 0, user_zipf_s = 0;
  nlohmann::json dataset;  // the published sizes, reported with results (users, items, ...)
};

// ParseError naming the source and the field ("recflow-stats.json: stages[2].keep: expected a
// positive integer, got -5") for a missing field, a wrong type, a negative or zero count, min >
// max, or an unknown key.
TANDEM_API RecFlowStats parse_recflow_stats(const nlohmann::json& j, const std::string& source);
TANDEM_API RecFlowStats read_recflow_stats(const std::string& path);

class TANDEM_API RecFlowRequests {
 public:
  // InvalidArgument when the schema has no item tables, fewer user tables than profile_tables, or
  // a sequence length other than the statistics'.
  RecFlowRequests(const ModelConfig& schema, const RecFlowStats& stats, uint64_t seed);
  ~RecFlowRequests();
  // A request; `tag` (e.g. its index) selects its random draws.
  QueryInputs make(uint64_t tag);

 private:
  ModelConfig schema_;
  RecFlowStats stats_;
  uint64_t seed_;
  std::mutex mu_;
  std::unique_ptr<IndexGenerator> items_, users_;
};

}  // namespace tandem::rec
