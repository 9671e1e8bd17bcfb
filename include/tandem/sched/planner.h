// SPDX-License-Identifier: Apache-2.0
// The planner registry: every system that writes a PipelinePlan (HPipe and its baselines, the
// edge CNN planners, the recommender schedulers) registers a Planner under its system name, so
// the command line and the benchmarks find them all the same way (`tandem planners` lists them).
//
// A planner reads what it plans over from the PlanRequest: the cluster, the path of its model
// input (an HPipe model profile, an ONNX graph, ...) and its options as JSON (each planner
// documents its keys and refuses unknown ones).
//
//   sched::PlanRequest req{cluster, "configs/clusters/hetero3.json", "smollm2.hpipe.json",
//                          {{"prompt_len", 2048}}};
//   sched::PipelinePlan plan = sched::make_plan("hpipe", req);
//   for (const auto& [name, p] : sched::planner_registry().entries()) puts(name.c_str());
//
// Thread-safety: the registry is (core/registry.h); planners are pure functions of the request.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "tandem/core/cluster.h"
#include "tandem/core/registry.h"
#include "tandem/export.h"
#include "tandem/sched/plan.h"

namespace tandem::sched {

struct PlanRequest {
  ClusterSpec cluster;
  std::string cluster_name;  // written into the plan ("cluster")
  std::string model;         // path of the planner's model input
  nlohmann::json options = nlohmann::json::object();
};

struct Planner {
  std::string domain;       // "llm", "cnn", "recsys"
  std::string description;  // one line for `tandem planners`
  std::function<PipelinePlan(const PlanRequest&)> plan;
};

TANDEM_API Registry<Planner>& planner_registry();

// planner_registry().get(system).plan(request): InvalidArgument listing the planners for an
// unknown system; the planner's own errors otherwise.
TANDEM_API PipelinePlan make_plan(const std::string& system, const PlanRequest& request);

}  // namespace tandem::sched
