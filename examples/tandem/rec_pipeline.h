// SPDX-License-Identifier: Apache-2.0
// `tandem rec-serve --pipeline recflow`: the RecFlow-shaped multi-stage pipeline (retrieval ->
// pre-rank -> coarse -> rank -> re-rank, tandem/recsys/pipeline.h) served under closed- or
// open-loop load on the CPU executor or a simulated GPU, with per-stage and end-to-end latency,
// throughput and (on a simulated device) the latency-bounded throughput.
//
//   tandem rec-serve --pipeline recflow --device sim:h100 --policy recos --clients 8 --ltp
//   tandem rec-serve --pipeline recflow --device sim:h100 --clients 8 --ltp \
//       --recstream configs/recsys/recstream/sim-h100.json     # RecStream's pick per stage
#pragma once

#include <cstdint>
#include <string>

#include "tandem/recsys/serving.h"

namespace tandem::cli {

struct RecPipelineRun {
  std::string pipeline = "recflow";
  std::string stats_path;       // the RecFlow statistics file (recflow.h)
  std::string requests_path;    // real requests (recflow_data.h); empty: generated from the stats
  std::string device = "cpu";   // cpu or sim:NAME
  std::string output = "md";    // md or json
  double table_budget_mib = 0;  // all stages' tables together
  int pool = 16;                // distinct requests generated and reused
  uint64_t seed = 1;
  double jitter = 0;
  bool timing_only = false;  // --sim-timing-only
  bool ltp = false;
  // A RecStream weight file: each stage's stream configuration is RecStream's prediction for its
  // model and load (the stage's rows, the clients or rate); empty: po for every stage.
  std::string recstream;
  rec::PolicyOptions po;  // every stage's policy; po.sla_ms is the end-to-end SLA
  rec::LoadOptions lo;
};

// Prints the table (md) or the JSON record; returns 1 when a request failed.
int run_rec_pipeline(const RecPipelineRun& r);

}  // namespace tandem::cli
