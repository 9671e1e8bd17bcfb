// SPDX-License-Identifier: Apache-2.0
// An edge plan for a CNN and what it is predicted to cost (spec cnn.md §3.1 eq. 4-11, §5 metrics).
//
// What: a plan is a list of stages; a stage is a segment of pieces [first, last] (chain.h) run by a
// group of devices, each computing its share of the segment's output: a Region (row band or 2-D
// tile, with its halo recomputed) and/or a range of output channels of the segment's last piece
// (features of a dense piece; channel or hybrid mode of a conv segment). A device may hold
// several shares of one stage (EFL's stolen tiles). Stages form a pipeline (PICO, PipeEdge: frames
// overlap, period = the slowest stage) or run one after another for each frame (LW, EFL, OFL,
// single: period = latency).
//
// How evaluate() predicts (the same for every system, so systems compare on one model):
//   per share     t_comp = cost.compute_s(tile work), t_comm = 2·L + (in_bytes + out_bytes)/B:
//                 every tile's input comes from, and its output goes back to, the stage's
//                 split/stitch master over the shared medium (eq. 7);
//   per stage     T(S) = max_device Σ its t_comp + Σ_shares t_comm (eq. 6, 8, 9);
//   plan          latency = Σ T(S) (eq. 11); period = max T(S) when pipelined (eq. 10), else the
//                 latency; mean latency under Poisson arrivals at rate λ, PICO Theorem 2 (M/D/1)
//                 as the spec writes it: p(2 − pλ)/(2(1 − pλ)) + t, +∞ when pλ ≥ 1 (at λ → 0
//                 it is p + t: the sojourn counts one service of the bottleneck on top of t);
//   medium        medium_s = Σ_S T_comm(S), one frame's time on the shared medium;
//   redundancy    Σ share FLOPs / the model's useful FLOPs (chain.h) − 1;
//   utilisation   a device's compute / period;
//   memory        per device: the weights of every segment it holds + its largest tile working
//                 set (inputs + output of one node); evaluate() throws Infeasible naming the
//                 device when that exceeds its mem_bytes.
//
//   EdgePlan plan = plan_pico(problem, {});                 // planners.h
//   std::string table = format_table(plan, problem);        // or plan.to_json(problem)
//
// Thread-safety: plain values.
#pragma once

#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/cnn/edge/cost.h"
#include "tandem/export.h"
#include "tandem/sched/plan.h"

namespace tandem::cnn::edge {

struct DeviceShare {
  std::string device;
  Region out{};            // the share of the segment's output map (empty for a dense piece)
  int64_t c0 = 0, c1 = 0;  // output channels [c0, c1) of the last piece (c1 > c0: a channel share;
                           // features of a dense piece; c1 == 0: every channel)
  bool channels() const { return c1 > c0; }
};

struct Stage {
  int first = 0, last = 0;  // pieces, inclusive
  std::vector<DeviceShare> shares{};
};

struct DeviceMetrics {
  std::string device;
  double busy_s = 0;       // compute per frame
  double utilisation = 0;  // busy_s / period
  double flops = 0;        // per frame, halo included
  double peak_mem_bytes = 0;
  double weight_bytes = 0;
};

struct StageMetrics {
  double comp_s = 0, comm_s = 0, time_s = 0;
  double flops = 0, bytes = 0;
};

struct Metrics {
  double period_s = 0;
  double latency_s = 0;
  double lambda = 0;  // frames/s the next field is for (0: not asked)
  double latency_at_lambda_s = 0;
  double throughput_fps = 0;
  double redundancy = 0;
  double mean_utilisation = 0;  // over the devices the plan uses
  double bytes_moved = 0;       // per frame over the medium
  // Σ over all stages of their transfer time: how long one frame holds the shared medium. Eq. 8
  // sums transfers within a stage only; when medium_s > period_s the medium, not the stages,
  // bounds the throughput of a pipeline (reported, not optimised, as in the paper).
  double medium_s = 0;
  double planner_s = 0;
  std::vector<StageMetrics> stages;
  std::vector<DeviceMetrics> devices;  // every device of the problem, in cluster order
};

struct TANDEM_API EdgePlan {
  std::string system;     // "pico", "apico", "lw", "efl", "ofl", "pipeedge", "single"
  bool pipelined = true;  // stages overlap across frames
  std::vector<Stage> stages{};
  Metrics metrics{};                                // filled by evaluate()
  nlohmann::json notes = nlohmann::json::object();  // planner specifics (EFL grid, APICO choice)

  nlohmann::json to_json(const EdgeProblem& problem) const;
};

// PICO Theorem 2 (see above); +∞ when period·λ >= 1.
TANDEM_API double md1_mean_latency_s(double period_s, double latency_s, double lambda);

// Predicts everything above for `plan` and stores it in plan.metrics (planner_s kept). Throws
// InvalidArgument for a share naming an unknown device or a region outside the output, and
// Infeasible naming the device that cannot hold its weights and tile.
TANDEM_API void evaluate(EdgePlan& plan, const EdgeProblem& problem, double lambda = 0);

// The work of one share of a stage (its region and/or channels of the stage's last piece), as
// evaluate() prices it. InvalidArgument naming the device for a region or channel range outside the
// output, or pieces outside the model.
TANDEM_API TileWork share_work(const Stage& stage, const DeviceShare& share,
                               const EdgeProblem& problem);

// Seconds of one stage alone (T(S), eq. 9) — what the planners minimise.
TANDEM_API StageMetrics stage_cost(const Stage& stage, const EdgeProblem& problem);

// The plan as the runtime's sched::PipelinePlan (system, cluster name, stages, predicted): a stage
// of kind "cnn.tiles" per stage, configured {"kind": "cnn.tiles", "model": model, "pieces":
// [first, last], "from": input tensor, "to": output tensor}; a device's share is {"rows": [h0,
// h1], "cols": [w0, w1]}, {"tiles": [{"rows", "cols"}, ...]} when it holds several (EFL), and
// "channels": [c0, c1] when it computes only those output channels (alone for a dense piece,
// whose output has no rows); predicted: latency, period, frames/s, T(S) per stage, and in its extra
// "pipelined" and the metrics of to_json. A plan that is not pipelined runs one frame at a time.
TANDEM_API sched::PipelinePlan to_pipeline_plan(const EdgePlan& plan, const EdgeProblem& problem,
                                                const std::string& model,
                                                const std::string& cluster);

// A markdown table: one row per stage (pieces, devices and their rows, time) and the totals.
TANDEM_API std::string format_table(const EdgePlan& plan, const EdgeProblem& problem);

}  // namespace tandem::cnn::edge
