// SPDX-License-Identifier: Apache-2.0
// Predicted period, latency and the §5 metrics of an edge plan (tandem/cnn/edge/plan.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "tandem/cnn/edge/plan.h"
#include "tandem/core/error.h"

namespace tandem::cnn::edge {

double md1_mean_latency_s(double p, double t, double lambda) {
  if (lambda <= 0) return p + t;
  if (p * lambda >= 1) return std::numeric_limits<double>::infinity();
  return p * (2 - p * lambda) / (2 * (1 - p * lambda)) + t;
}

TileWork share_work(const Stage& s, const DeviceShare& sh, const EdgeProblem& pb) {
  const Chain& c = *pb.chain;
  if (s.first < 0 || s.last >= c.size() || s.first > s.last)
    throw InvalidArgument(cat("edge plan: stage pieces [", s.first, ", ", s.last,
                              "] outside the model's ", c.size(), " pieces"));
  if (sh.channels() && (sh.c0 < 0 || sh.c1 > c.out_channels(s.last)))
    throw InvalidArgument(cat("edge plan: device '", sh.device, "': channels [", sh.c0, ", ", sh.c1,
                              ") outside ", c.piece(s.last).out_shape.to_string()));
  if (sh.channels() && c.piece(s.last).out_shape.rank() != 4)  // features: the output has no rows
    return c.tile_work(s.first, s.last, Region{}, sh.c0, sh.c1);
  const Region full = c.out_region(s.last);
  if (sh.out.empty() || !full.contains(sh.out))
    throw InvalidArgument(cat("edge plan: device '", sh.device, "': region ", sh.out.to_string(),
                              " is empty or outside the output ", full.to_string()));
  return c.tile_work(s.first, s.last, sh.out, sh.c0, sh.c1);
}

StageMetrics stage_cost(const Stage& s, const EdgeProblem& pb) {
  StageMetrics m;
  std::vector<double> busy(pb.devices.size(), 0.0);
  for (const DeviceShare& sh : s.shares) {
    const int d = pb.device_index(sh.device);
    const TileWork w = share_work(s, sh, pb);
    busy[static_cast<size_t>(d)] += pb.cost->compute_s(w, pb.devices[static_cast<size_t>(d)]);
    m.comm_s += pb.transfer_s(w.in_bytes) + pb.transfer_s(w.out_bytes);
    m.flops += w.flops;
    m.bytes += w.in_bytes + w.out_bytes;
  }
  m.comp_s = *std::max_element(busy.begin(), busy.end());
  m.time_s = m.comp_s + m.comm_s;
  return m;
}

void evaluate(EdgePlan& plan, const EdgeProblem& pb, double lambda) {
  if (plan.stages.empty()) throw InvalidArgument("edge plan: no stages");
  Metrics& m = plan.metrics;
  const double planner_s = m.planner_s;
  m = Metrics{};
  m.planner_s = planner_s;
  const size_t n = pb.devices.size();
  m.devices.resize(n);
  std::vector<double> act(n, 0.0);
  for (size_t d = 0; d < n; ++d) m.devices[d].device = pb.devices[d].name;
  int expect_first = 0;
  for (const Stage& s : plan.stages) {
    if (s.first != expect_first)
      throw InvalidArgument(cat("edge plan: stage starting at piece ", s.first, " should start at ",
                                expect_first, " (stages must cover the pieces in order)"));
    expect_first = s.last + 1;
    if (s.shares.empty()) throw InvalidArgument("edge plan: a stage without devices");
    std::vector<bool> holds(n, false);
    for (const DeviceShare& sh : s.shares) {
      const auto d = static_cast<size_t>(pb.device_index(sh.device));
      const TileWork w = share_work(s, sh, pb);
      m.devices[d].busy_s += pb.cost->compute_s(w, pb.devices[d]);
      m.devices[d].flops += w.flops;
      act[d] = std::max(act[d], w.act_peak_bytes);
      if (!holds[d]) m.devices[d].weight_bytes += pb.chain->segment_weight_bytes(s.first, s.last);
      holds[d] = true;
    }
    m.stages.push_back(stage_cost(s, pb));
  }
  if (expect_first != pb.chain->size())
    throw InvalidArgument(cat("edge plan: stages end at piece ", expect_first - 1,
                              "; the model has ", pb.chain->size()));
  for (const StageMetrics& s : m.stages) {
    m.latency_s += s.time_s;
    m.period_s = std::max(m.period_s, s.time_s);
    m.bytes_moved += s.bytes;
    m.medium_s += s.comm_s;
  }
  if (!plan.pipelined) m.period_s = m.latency_s;
  m.throughput_fps = 1.0 / m.period_s;
  m.lambda = lambda;
  m.latency_at_lambda_s = md1_mean_latency_s(m.period_s, m.latency_s, lambda);
  double flops = 0, util = 0;
  int used = 0;
  for (size_t d = 0; d < n; ++d) {
    DeviceMetrics& dm = m.devices[d];
    dm.peak_mem_bytes = dm.weight_bytes + act[d];
    dm.utilisation = dm.busy_s / m.period_s;
    flops += dm.flops;
    if (dm.flops > 0 || dm.weight_bytes > 0) {
      util += dm.utilisation;
      ++used;
    }
    if (dm.peak_mem_bytes > pb.devices[d].mem_bytes)
      throw Infeasible(cat("edge plan (", plan.system, "): device '", dm.device, "' needs ",
                           dm.peak_mem_bytes / 1e6, " MB (weights ", dm.weight_bytes / 1e6,
                           " MB + tile ", act[d] / 1e6, " MB) but has mem_bytes ",
                           pb.devices[d].mem_bytes / 1e6, " MB"));
  }
  m.redundancy = flops / pb.chain->useful_flops() - 1.0;
  m.mean_utilisation = used > 0 ? util / used : 0.0;
}

}  // namespace tandem::cnn::edge
