// SPDX-License-Identifier: Apache-2.0
// DeepZoning (TACO 2025; a reconstruction, the paper text is not public: spec cnn.md §3.3): the
// zone-granularity DP with AWP per merged zone, its throughput variant on PICO's DP, and the
// CoEdge-style per-layer LP baseline (§4) (tandem/cnn/edge/planners.h).
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "cnn/edge/inf.h"
#include "cnn/edge/pico_dp.h"
#include "cnn/edge/split.h"
#include "cnn/edge/zones.h"
#include "tandem/cnn/edge/planners.h"
#include "tandem/core/error.h"

namespace tandem::cnn::edge {

namespace {

std::vector<int> first_devices(int n) {
  std::vector<int> d(static_cast<size_t>(n));
  std::iota(d.begin(), d.end(), 0);
  return d;
}

nlohmann::json zone_note(const EdgeProblem& pb, const detail::ZoneSplit& z) {
  const Chain& c = *pb.chain;
  return {{"pieces", {z.stage.first, z.stage.last}}, {"from", c.piece(z.stage.first).name},
          {"to", c.piece(z.stage.last).name},        {"mode", detail::mode_name(z.mode)},
          {"devices", z.stage.shares.size()},        {"time_s", z.time_s}};
}

// The problem with every device replaced by one of the mean capacity (PICO eq. 12).
EdgeProblem homogenised(const EdgeProblem& pb) {
  EdgeProblem h = pb;
  double mean = 0;
  for (const DeviceProfile& d : pb.devices) mean += d.peak_flops / pb.devices.size();
  for (size_t k = 0; k < h.devices.size(); ++k) {
    h.devices[k].name = cat("homogenised", k);
    h.devices[k].peak_flops = mean;
  }
  return h;
}

}  // namespace

double deepzoning_zone_s(const EdgeProblem& pb, int first, int last) {
  detail::ZoneSplitter z(pb);
  return z.best(first, last, first_devices(static_cast<int>(pb.devices.size()))).time_s;
}

EdgePlan plan_deepzoning(const EdgeProblem& pb, const PlanOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const int K = pb.chain->size();
  const std::vector<int> all = first_devices(static_cast<int>(pb.devices.size()));
  detail::ZoneSplitter splitter(pb);
  // Best[k]: pieces 0..k-1, the last merged zone from[k]..k-1 split as zone[k]. Redistribute(j)
  // is inside each zone's T(S): its input sent from, and its output gathered at, the master in
  // the layout the zone's mode needs.
  std::vector<double> best(static_cast<size_t>(K + 1), kInf);
  std::vector<int> from(static_cast<size_t>(K + 1), 0);
  std::vector<detail::ZoneSplit> zone(static_cast<size_t>(K + 1));
  best[0] = 0;
  for (int k = 1; k <= K; ++k)
    for (int j = 0; j < k; ++j) {
      detail::ZoneSplit z = splitter.best(j, k - 1, all);
      const double t = best[static_cast<size_t>(j)] + z.time_s;
      if (t < best[static_cast<size_t>(k)]) {
        best[static_cast<size_t>(k)] = t;
        from[static_cast<size_t>(k)] = j;
        zone[static_cast<size_t>(k)] = std::move(z);
      }
    }
  if (best[static_cast<size_t>(K)] > o.latency_cap_s)
    throw Infeasible(cat("DeepZoning: the least latency, ", best[static_cast<size_t>(K)],
                         " s, is over the cap of ", o.latency_cap_s, " s"));
  EdgePlan plan{.system = "deepzoning", .pipelined = false};
  nlohmann::json zones = nlohmann::json::array();
  for (int k = K; k > 0; k = from[static_cast<size_t>(k)]) {
    plan.stages.insert(plan.stages.begin(), zone[static_cast<size_t>(k)].stage);
    zones.insert(zones.begin(), zone_note(pb, zone[static_cast<size_t>(k)]));
  }
  plan.notes = {
      {"objective", "latency"}, {"dp_latency_s", best[static_cast<size_t>(K)]}, {"zones", zones}};
  return detail::finish(std::move(plan), pb, o.lambda, t0);
}

EdgePlan plan_deepzoning_tp(const EdgeProblem& pb, const PlanOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const int n = static_cast<int>(pb.devices.size());
  const EdgeProblem hpb = homogenised(pb);
  detail::ZoneSplitter hom(hpb);
  // PICO's DP over merged zones, a stage (i, j, q) costing its AWP split on q equal devices.
  const HomogeneousPlan h = detail::pico_dp_over(
      pb.chain->size(), n, o,
      [&](int i, int j, int q) { return hom.best(i, j, first_devices(q), false).time_s; },
      "DeepZoning (throughput)");
  std::vector<double> avg;
  for (const HomogeneousStage& s : h.stages)
    avg.push_back(hom.best(s.first, s.last, first_devices(s.q), false).flops / s.q);
  const std::vector<std::vector<int>> members = detail::pico_mapping(pb, h, avg);
  detail::ZoneSplitter splitter(pb);
  EdgePlan plan{.system = "deepzoning-tp", .pipelined = true};
  nlohmann::json zones = nlohmann::json::array();
  for (size_t s = 0; s < h.stages.size(); ++s) {
    const detail::ZoneSplit z = splitter.best(h.stages[s].first, h.stages[s].last, members[s]);
    plan.stages.push_back(z.stage);
    zones.push_back(zone_note(pb, z));
  }
  plan.notes = {{"objective", "throughput"},
                {"homogeneous_period_s", h.period_s},
                {"homogeneous_latency_s", h.latency_s},
                {"zones", zones}};
  return detail::finish(std::move(plan), pb, o.lambda, t0);
}

EdgePlan plan_coedge(const EdgeProblem& pb, const PlanOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int> all = first_devices(static_cast<int>(pb.devices.size()));
  detail::ZoneSplitter splitter(pb, /*spatial_only=*/true);
  EdgePlan plan{.system = "coedge", .pipelined = false};
  nlohmann::json zones = nlohmann::json::array();
  for (int i = 0; i < pb.chain->size(); ++i) {
    const detail::ZoneSplit z = splitter.best(i, i, all);
    plan.stages.push_back(z.stage);
    zones.push_back(zone_note(pb, z));
  }
  plan.notes = {{"zones", zones}};
  return detail::finish(std::move(plan), pb, o.lambda, t0);
}

}  // namespace tandem::cnn::edge
