// SPDX-License-Identifier: Apache-2.0
// Row splits shared by the edge planners: even, in proportion to capacity, and balanced by
// bisection on the compute time (internal to src/cnn/edge).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tandem/cnn/edge/plan.h"

namespace tandem::cnn::edge::detail {

// Boundaries b[0] = 0 < ... <= b[k] = total: `total` cut into parts in proportion to `weights`
// (largest remainder); parts may be 0.
std::vector<int64_t> split_proportional(int64_t total, const std::vector<double>& weights);
// q parts as equal as possible.
std::vector<int64_t> split_even(int64_t total, int q);

// A stage of pieces first..last whose devices (indices into problem.devices) take the row bands
// [b[k], b[k+1]) of the output (full width); devices with no rows are left out.
Stage row_stage(const EdgeProblem& pb, int first, int last, const std::vector<int>& devices,
                const std::vector<int64_t>& bounds);
// The whole segment on one device.
Stage whole_stage(const EdgeProblem& pb, int first, int last, int device);
// Rows split so that every device's compute time (halo included) is at most T, T minimal up to a
// relative 1e-4 (bisection), each device in the given order taking the most rows it can.
std::vector<int64_t> split_balanced(const EdgeProblem& pb, int first, int last,
                                    const std::vector<int>& devices);
// Device indices sorted by capacity (peak_flops as it runs), fastest first (stable).
std::vector<int> by_capacity(const EdgeProblem& pb);
// Rows in proportion to capacity over all devices, or the fastest device alone when the segment
// is not spatial.
Stage proportional_stage(const EdgeProblem& pb, int first, int last);
// The same, but the stage is timed with stage_cost: seconds.
double stage_s(const Stage& s, const EdgeProblem& pb);

// Seconds since t0 (planner time).
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// PICO's optional refinement: first-improvement local search that moves one device to another
// stage or swaps two (and, with allow_idle, idles or recalls one), each stage's rows re-split
// (split_balanced), accepting a lower period (or the same period and a lower latency) within
// `cap`. `groups[s]`: the device indices of stage s, whose pieces are ranges[s].
std::vector<std::vector<int>> refine_mapping(const EdgeProblem& pb,
                                             const std::vector<std::pair<int, int>>& ranges,
                                             std::vector<std::vector<int>> groups, bool allow_idle,
                                             double cap);

// A planner's last step: records the planner time since t0, evaluates the plan at o.lambda.
EdgePlan finish(EdgePlan plan, const EdgeProblem& pb, double lambda,
                std::chrono::steady_clock::time_point t0);

}  // namespace tandem::cnn::edge::detail
