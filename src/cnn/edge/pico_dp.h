// SPDX-License-Identifier: Apache-2.0
// PICO's DP (eq. 13) and Alg. 2 mapping over any homogeneous stage cost (internal to src/cnn/edge):
// PICO feeds them its equal row bands, DeepZoning's throughput variant its AWP zone costs.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tandem/cnn/edge/planners.h"

namespace tandem::cnn::edge::detail {

// ts(i, j, q): T(S) of pieces i..j on q homogenised devices (+∞: cannot). The DP of pico_dp()
// over L pieces and n devices; `who` names the planner in the Infeasible message.
HomogeneousPlan pico_dp_over(int L, int n, const PlanOptions& o,
                             const std::function<double(int, int, int)>& ts,
                             const std::string& who);

// Alg. 2: the real devices, fastest first, each to the stage with placeholders left whose
// average requirement avg[s] (Θ'/|D'|) is largest. Per stage, its device indices.
std::vector<std::vector<int>> pico_mapping(const EdgeProblem& pb, const HomogeneousPlan& h,
                                           const std::vector<double>& avg);

}  // namespace tandem::cnn::edge::detail
