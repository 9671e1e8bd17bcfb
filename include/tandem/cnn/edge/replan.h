// SPDX-License-Identifier: Apache-2.0
// Re-planning an edge plan when devices are lost mid-run (spec cnn.md §3.1 runtime; issue 17): the
// same planner, on the same chain and cost model, over the devices still alive.
//
// What: replan_over_survivors() returns a sched::PlanReplanFn for PipelineOptions::replan_plan.
// When the runtime's heartbeats find devices gone, it plans `system` again over the problem's
// devices minus every device lost so far and hands the runtime the new cnn.tiles plan; the
// runtime re-runs the frames that were in flight, so none is lost or delivered twice.
//
//   sched::PipelineOptions po;
//   po.replan_plan = cnn::edge::replan_over_survivors("pico", problem, model_path, "pico-4");
//
// The problem (its chain and cost model) must outlive the function.
#pragma once

#include <string>

#include "tandem/cnn/edge/planners.h"
#include "tandem/export.h"
#include "tandem/sched/pipeline.h"

namespace tandem::cnn::edge {

// Throws (inside the returned function) Infeasible when no device is left.
TANDEM_API sched::PlanReplanFn replan_over_survivors(const std::string& system,
                                                     const EdgeProblem& problem,
                                                     const std::string& model,
                                                     const std::string& cluster,
                                                     const PlanOptions& options = {});

}  // namespace tandem::cnn::edge
