// SPDX-License-Identifier: Apache-2.0
// LW (MoDNN-style layer-wise) and OFL (AOFL-style fused DP) baselines (spec cnn.md §4).
#include <chrono>
#include <limits>
#include <utility>

#include "cnn/edge/split.h"
#include "tandem/cnn/edge/planners.h"

namespace tandem::cnn::edge {

namespace {

// A dense piece's output features in proportion to capacity.
Stage feature_stage(const EdgeProblem& pb, int piece) {
  const std::vector<int> order = detail::by_capacity(pb);
  std::vector<double> cap;
  for (int d : order) cap.push_back(pb.devices[static_cast<size_t>(d)].peak_flops);
  const Shape& y = pb.chain->piece(piece).out_shape;
  const std::vector<int64_t> b = detail::split_proportional(y[y.rank() - 1], cap);
  Stage s{.first = piece, .last = piece};
  for (size_t k = 0; k < order.size(); ++k)
    if (b[k + 1] > b[k])
      s.shares.push_back(
          {.device = pb.devices[static_cast<size_t>(order[k])].name, .c0 = b[k], .c1 = b[k + 1]});
  return s;
}

}  // namespace

EdgePlan plan_lw(const EdgeProblem& pb, const PlanOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  EdgePlan plan{.system = "lw", .pipelined = false};
  for (int i = 0; i < pb.chain->size(); ++i)
    plan.stages.push_back(pb.chain->piece(i).dense ? feature_stage(pb, i)
                                                   : detail::proportional_stage(pb, i, i));
  return detail::finish(std::move(plan), pb, o.lambda, t0);
}

EdgePlan plan_ofl(const EdgeProblem& pb, const PlanOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const int L = pb.chain->size();
  // F[k]: the best time of pieces 0..k-1; from[k]: where its last fused block starts.
  std::vector<double> F(static_cast<size_t>(L + 1), std::numeric_limits<double>::infinity());
  std::vector<int> from(static_cast<size_t>(L + 1), 0);
  F[0] = 0;
  for (int k = 1; k <= L; ++k)
    for (int j = 0; j < k; ++j) {
      const double t =
          F[static_cast<size_t>(j)] + detail::stage_s(detail::proportional_stage(pb, j, k - 1), pb);
      if (t < F[static_cast<size_t>(k)]) {
        F[static_cast<size_t>(k)] = t;
        from[static_cast<size_t>(k)] = j;
      }
    }
  EdgePlan plan{.system = "ofl", .pipelined = false};
  for (int k = L; k > 0; k = from[static_cast<size_t>(k)])
    plan.stages.insert(plan.stages.begin(),
                       detail::proportional_stage(pb, from[static_cast<size_t>(k)], k - 1));
  return detail::finish(std::move(plan), pb, o.lambda, t0);
}

}  // namespace tandem::cnn::edge
