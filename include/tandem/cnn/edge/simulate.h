// SPDX-License-Identifier: Apache-2.0
// What the pipeline runtime will do with an edge plan, frame by frame: the simulator whose error
// against `tandem edge run` is reported (issue 17), beside the planners' closed form (eq. 6-11).
//
// Why a second composition: eq. 9 charges a stage all of its transfers on top of its slowest
// device, one frame at a time. The runtime (sched::Pipeline) does better and differently: one
// thread per stage and per link, so frame f+1's transfers overlap frame f's compute; a group
// stage's master computes its own share with no transfer, and the other members' tiles cross the
// medium one at a time while the members that have theirs compute; the whole stitched tensor
// crosses once from one stage's master to the next one's; a device computes one task at a time.
//
// How: frames enter at time 0, in order; each stage node and link node takes one frame at a time;
// transfers reserve the medium (one for every transfer with `shared_medium`, else one per group
// and one per link) and compute reserves the device, each at the earliest gap that fits. Compute
// seconds come from the problem's cost model: a TimedCostModel (measure.h) simulates measured
// compute, a planner's model simulates its prediction.
//
//   auto sim = cnn::edge::simulate_runtime(plan, problem, {.frames = 8, .shared_medium = true});
//   sim.period_s;   // the steady-state gap between frames; sim.latency_s: one frame alone
//
// Thread-safety: a pure function of its arguments (the cost model may time tiles).
#pragma once

#include "tandem/cnn/edge/plan.h"
#include "tandem/export.h"

namespace tandem::cnn::edge {

struct RuntimeSimOptions {
  int frames = 8;             // >= 2
  bool shared_medium = true;  // as sched::PipelineOptions::shared_medium
};

struct RuntimeSim {
  double period_s = 0;   // (makespan - latency) / (frames - 1), as `tandem edge run` measures it
  double latency_s = 0;  // one frame through an empty pipeline
  double makespan_s = 0;
};

TANDEM_API RuntimeSim simulate_runtime(const EdgePlan& plan, const EdgeProblem& problem,
                                       const RuntimeSimOptions& options = {});

}  // namespace tandem::cnn::edge
