// SPDX-License-Identifier: Apache-2.0
// The edge planners' cost of "no plan" (an infeasible stage, a DP entry not reached): one constant
// for every source of src/cnn/edge (internal).
#pragma once

#include <limits>

namespace tandem::cnn::edge {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace tandem::cnn::edge
