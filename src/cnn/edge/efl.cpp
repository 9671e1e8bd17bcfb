// SPDX-License-Identifier: Apache-2.0
// EFL: DeepThings' fused tile partitioning with work stealing, the rest on the gateway (spec cnn.md
// §4; planners.h).
#include <algorithm>
#include <limits>
#include <utility>

#include "cnn/edge/split.h"
#include "tandem/cnn/edge/planners.h"

namespace tandem::cnn::edge {

namespace {

struct Choice {
  double latency_s = std::numeric_limits<double>::infinity();
  int fused = 0, n = 0, m = 0;
  Stage tiles;
};

// The fused stage of pieces 0..fused-1 cut into an n x m grid; tiles in row-major order go to the
// device that is idle first (ties: the faster one), which then is busy for the tile's compute and
// transfers. Returns the stage and its T(S).
std::pair<Stage, double> grid_stage(const EdgeProblem& pb, int fused, int n, int m,
                                    const std::vector<int>& order) {
  const Region full = pb.chain->out_region(fused - 1);
  const std::vector<int64_t> rows = detail::split_even(full.h1, n);
  const std::vector<int64_t> cols = detail::split_even(full.w1, m);
  std::vector<double> free(pb.devices.size(), 0.0), comp(pb.devices.size(), 0.0);
  Stage s{.first = 0, .last = fused - 1};
  double comm = 0;
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < m; ++c) {
      const Region tile{rows[r], rows[r + 1], cols[c], cols[c + 1]};
      const TileWork w = pb.chain->tile_work(0, fused - 1, tile);
      int d = order[0];
      for (int k : order)
        if (free[static_cast<size_t>(k)] < free[static_cast<size_t>(d)]) d = k;
      const double tc = pb.cost->compute_s(w, pb.devices[static_cast<size_t>(d)]);
      const double tm = pb.transfer_s(w.in_bytes) + pb.transfer_s(w.out_bytes);
      free[static_cast<size_t>(d)] += tc + tm;
      comp[static_cast<size_t>(d)] += tc;
      comm += tm;
      s.shares.push_back({.device = pb.devices[static_cast<size_t>(d)].name, .out = tile});
    }
  return {s, *std::max_element(comp.begin(), comp.end()) + comm};
}

}  // namespace

EdgePlan plan_efl(const EdgeProblem& pb, const PlanOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const int L = pb.chain->size();
  const std::vector<int> order = detail::by_capacity(pb);
  const int gateway = order[0];
  int lead = 0;
  while (lead < L && pb.chain->piece(lead).spatial) ++lead;
  Choice best;
  if (lead == 0) best.latency_s = 0;  // nothing to fuse: all on the gateway
  const int f_lo = o.efl_fused > 0 ? std::min(o.efl_fused, lead) : 1;
  const int f_hi = o.efl_fused > 0 ? f_lo : lead;
  for (int f = f_lo; f <= f_hi; ++f) {
    const double rest = f < L ? detail::stage_s(detail::whole_stage(pb, f, L - 1, gateway), pb) : 0;
    const Region full = pb.chain->out_region(f - 1);
    // The grid: N x M with N, M <= efl_max_grid (and the map), or the fixed one.
    auto range = [&](int fixed, int64_t extent) {
      const int64_t hi = std::min<int64_t>(o.efl_max_grid, extent);
      return fixed > 0 ? std::pair<int64_t, int64_t>{std::min<int64_t>(fixed, hi),
                                                     std::min<int64_t>(fixed, hi)}
                       : std::pair<int64_t, int64_t>{1, hi};
    };
    const auto [n_lo, n_hi] = range(o.efl_rows, full.h1);
    const auto [m_lo, m_hi] = range(o.efl_cols, full.w1);
    for (int64_t n = n_lo; n <= n_hi; ++n)
      for (int64_t m = m_lo; m <= m_hi; ++m) {
        auto [stage, t] = grid_stage(pb, f, static_cast<int>(n), static_cast<int>(m), order);
        if (t + rest < best.latency_s)
          best = {t + rest, f, static_cast<int>(n), static_cast<int>(m), std::move(stage)};
      }
  }
  EdgePlan plan{.system = "efl", .pipelined = false};
  if (best.fused > 0) plan.stages.push_back(std::move(best.tiles));
  if (best.fused < L) plan.stages.push_back(detail::whole_stage(pb, best.fused, L - 1, gateway));
  plan.notes = {{"fused_pieces", best.fused},
                {"grid", {best.n, best.m}},
                {"gateway", pb.devices[static_cast<size_t>(gateway)].name}};
  return detail::finish(std::move(plan), pb, o.lambda, t0);
}

}  // namespace tandem::cnn::edge
