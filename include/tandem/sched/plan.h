// SPDX-License-Identifier: Apache-2.0
// PipelinePlan: the one plan type of tandem. Every planner writes it (HPipe and its baselines, the
// edge CNN planners, the recommender schedulers), the simulator predicts it and the runtime
// (pipeline.h) runs it; `tandem ... plan -o json` prints it and `tandem pipeline run` reads it.
//
// A plan is a chain of stages. A stage runs one stage kind (stage.h: "llm.layers", "cnn.tiles",
// ...) configured by `stage`, on one device or on a group of devices; each device of a group has
// its share of the stage's work (a token slice, an output region, a channel range, a query lane),
// which the stage kind interprets. JSON (additive optional top-level fields are kept in `extra`):
//   { "version": 1, "system": "hpipe", "cluster": "configs/clusters/hetero3.json",
//     "prompt_len": 512, "micro_batches": 1, "batch": 1, "slices": [192, 160, 160],
//     "stages": [ { "device": "p100-0", "stage": { "kind": "llm.layers", ... } },
//                 { "devices": [ { "device": "pi0", "share": { "rows": [0, 28] } },
//                                { "device": "pi1", "share": { "rows": [28, 56] } } ],
//                   "stage": { "kind": "cnn.tiles", ... } } ],
//     "predicted": { "latency_s": 0.8, "period_s": 0.3, "throughput_per_s": 640,
//                    "unit": "tokens", "per_stage_busy_s": [...], "source": "..." } }
// A one-device stage is written with "device" (HPipe's plans look as they always did), a group
// with "devices". LLM plans split a request into token slices (`slices`, summing to prompt_len)
// and run `micro_batches` requests together; other systems leave both out.
//
// from_json checks types and invariants through the core JSON field reader and throws ParseError
// naming the source and the JSON path ("plan.json: stages[1].devices[0].device: expected a
// non-empty string"): version 1, at least one stage, each with a device or a non-empty group of
// distinct devices and a stage object with a string kind, positive slices summing to prompt_len.
// What a stage kind requires of its config is checked by the kind (e.g. hpipe::layer_stages).
//
//   auto plan = sched::PipelinePlan::from_json_file("plan.json");
//   for (const auto& s : plan.stages) std::cout << s.device() << " " << s.kind() << "\n";
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/export.h"

namespace tandem::sched {

// One device of a stage and its part of the stage's work (interpreted by the stage kind; empty
// for a one-device stage).
struct DeviceShare {
  std::string device;                               // a ClusterSpec device name
  nlohmann::json share = nlohmann::json::object();  // e.g. {"rows": [0, 28]}
};

struct TANDEM_API PlanStage {
  std::vector<DeviceShare> devices;                 // at least one; distinct
  nlohmann::json stage = nlohmann::json::object();  // make_stage() config, with "kind"

  PlanStage() = default;
  PlanStage(std::string device, nlohmann::json config)  // a one-device stage
      : devices{{std::move(device), nlohmann::json::object()}}, stage(std::move(config)) {}
  PlanStage(std::vector<DeviceShare> group, nlohmann::json config)
      : devices(std::move(group)), stage(std::move(config)) {}

  // The first device: the only one of a one-device stage, the split/stitch master of a group.
  const std::string& device() const;
  std::string kind() const;  // stage["kind"], "" when absent
  bool is_group() const { return devices.size() > 1; }
};

// What the planner predicted for the plan (its cost model, usually through the simulator).
struct TANDEM_API PlanPrediction {
  double latency_s = 0;         // one request (LLM: the batch) end to end
  double period_s = 0;          // steady state: seconds between outputs (0: not predicted)
  double throughput_per_s = 0;  // `unit`s per second
  std::string unit;             // what throughput counts: "tokens", "frames", "queries"
  std::vector<double> per_stage_busy_s;
  double energy_j = 0;  // dynamic energy (0: not predicted)
  std::string source;   // how it was predicted: "cost-model+simulator", ...
  nlohmann::json extra = nlohmann::json::object();  // planner-specific figures, kept as read

  nlohmann::json to_json() const;
  static PlanPrediction from_json(const nlohmann::json& j, const std::string& where);
};

struct TANDEM_API PipelinePlan {
  int version = 1;
  std::string system;           // the planner that wrote it ("hpipe", "pico", ...)
  std::string cluster;          // path or name of the ClusterSpec
  int64_t prompt_len = 0;       // LLM: tokens per request (0: not stated)
  int64_t micro_batches = 1;    // requests run together (GPipe-style)
  int64_t batch = 0;            // requests the prediction covers (0: not stated)
  std::vector<int64_t> slices;  // LLM: token slices of a request, summing to prompt_len
  std::vector<PlanStage> stages;
  PlanPrediction predicted;
  nlohmann::json extra = nlohmann::json::object();  // other top-level keys, written back unchanged

  // Every device the plan uses, in stage order, each once.
  std::vector<std::string> devices() const;
  nlohmann::json to_json() const;
  static PipelinePlan from_json(const nlohmann::json& j, const std::string& where = "plan");
  static PipelinePlan from_json_file(const std::string& path);  // IoError / ParseError
  void save(const std::string& path) const;                     // IoError
};

}  // namespace tandem::sched
