// SPDX-License-Identifier: Apache-2.0
// PipelinePlan: the JSON plan every pipeline planner writes (HPipe, its baselines, later PICO /
// DeepZoning / DECC) and the runtime (pipeline.h) executes.
//
// The contract (additive optional fields are allowed and kept in `extra`):
//   { "version": 1, "system": "hpipe", "cluster": "configs/clusters/hetero3.json",
//     "prompt_len": 512, "micro_batches": 1, "slices": [192, 160, 160],
//     "stages": [ { "device": "p100-0", "stage": { "kind": "llm.layers", ... } }, ... ],
//     "predicted": { "latency_s": 0.8, "throughput_tokens_per_s": 640, "per_stage_busy_s": [...],
//                    "source": "..." } }
// A request is split into slices (micro-batches of tokens, `slices`); `micro_batches` requests
// (GPipe-style) run together. from_json validates types and invariants (version 1, at least one
// stage, each with a device name and a stage object with a string kind, positive slices summing to
// prompt_len) and throws ParseError naming the source and the JSON path.
//
//   auto plan = sched::PipelinePlan::from_json_file("plan.json");
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/export.h"

namespace tandem::sched {

struct PlanStage {
  std::string device;                               // a ClusterSpec device name
  nlohmann::json stage = nlohmann::json::object();  // make_stage() config
};

struct TANDEM_API PipelinePlan {
  int version = 1;
  std::string system;
  std::string cluster;
  int64_t prompt_len = 0;
  int64_t micro_batches = 1;
  std::vector<int64_t> slices;
  std::vector<PlanStage> stages;
  nlohmann::json predicted = nlohmann::json::object();
  nlohmann::json extra = nlohmann::json::object();  // other top-level keys, written back unchanged

  nlohmann::json to_json() const;
  static PipelinePlan from_json(const nlohmann::json& j, const std::string& where = "plan");
  static PipelinePlan from_json_file(const std::string& path);  // IoError / ParseError
};

}  // namespace tandem::sched
