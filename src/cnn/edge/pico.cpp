// SPDX-License-Identifier: Apache-2.0
// PICO's planner (spec cnn.md §3.1): homogeneous DP, greedy heterogeneous mapping, row re-split;
// APICO's switch (tandem/cnn/edge/planners.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "cnn/edge/inf.h"
#include "cnn/edge/pico_dp.h"
#include "cnn/edge/split.h"
#include "tandem/cnn/edge/planners.h"
#include "tandem/core/error.h"

namespace tandem::cnn::edge {

namespace {

DeviceProfile homogenised(double capacity_flops) {
  DeviceProfile d;
  d.name = "homogenised";
  d.peak_flops = capacity_flops;
  d.mem_bandwidth_bytes_per_s = 1e30;
  return d;
}

// Θ': the FLOPs of the q equal bands together (halos included).
double stage_flops(const EdgeProblem& pb, int first, int last, int q) {
  const Region full = pb.chain->out_region(last);
  const std::vector<int64_t> b = detail::split_even(full.h1, q);
  double f = 0;
  for (int k = 0; k < q; ++k)
    f += pb.chain->tile_work(first, last, {b[k], b[k + 1], 0, full.w1}).flops;
  return f;
}

}  // namespace

double homogeneous_stage_s(const EdgeProblem& pb, int first, int last, int q, double capacity) {
  const Region full = pb.chain->out_region(last);
  if (q > 1 && (!pb.chain->segment_spatial(first, last) || full.h1 < q)) return kInf;
  const DeviceProfile dev = homogenised(capacity);
  const std::vector<int64_t> b = detail::split_even(full.h1, q);
  double comp = 0, comm = 0;
  for (int k = 0; k < q; ++k) {
    const TileWork w = pb.chain->tile_work(first, last, {b[k], b[k + 1], full.w0, full.w1});
    comp = std::max(comp, pb.cost->compute_s(w, dev));
    comm += pb.transfer_s(w.in_bytes) + pb.transfer_s(w.out_bytes);
  }
  return comp + comm;
}

namespace detail {

HomogeneousPlan pico_dp_over(int L, int n, const PlanOptions& o,
                             const std::function<double(int, int, int)>& stage_s,
                             const std::string& who) {
  const double cap = o.latency_cap_s;
  // ts[i][j][q]: T(S) of pieces i..j on q devices; +∞ when it cannot be cut or exceeds T_lim.
  std::vector<double> ts(static_cast<size_t>(L * L * (n + 1)), kInf);
  auto at = [&](int i, int j, int q) -> double& {
    return ts[(static_cast<size_t>(i) * L + j) * (n + 1) + q];
  };
  for (int i = 0; i < L; ++i)
    for (int j = i; j < L; ++j)
      for (int q = 1; q <= n; ++q) {
        const double t = stage_s(i, j, q);
        at(i, j, q) = t <= cap ? t : kInf;  // prune: T_lim − Ts < 0
      }
  // P[j][p], T[j][p] over pieces 0..j with exactly p devices; back[j][p] = (j', p') of the last
  // stage j'+1..j on p' devices (j' = -1: one stage).
  struct Entry {
    double period = kInf, latency = kInf;
    int prev_j = -1, q = 0;
  };
  std::vector<Entry> P(static_cast<size_t>(L * (n + 1)));
  auto dp = [&](int j, int p) -> Entry& { return P[static_cast<size_t>(j) * (n + 1) + p]; };
  for (int j = 0; j < L; ++j)
    for (int p = 1; p <= n; ++p) {
      Entry best;
      if (at(0, j, p) < kInf) best = {at(0, j, p), at(0, j, p), -1, p};
      for (int jp = 0; jp < j; ++jp)
        for (int q = 1; q < p; ++q) {
          const Entry& head = dp(jp, p - q);
          const double st = at(jp + 1, j, q);
          if (head.period == kInf || st == kInf) continue;
          const double lat = head.latency + st;
          if (lat > cap) continue;  // prune: accumulated latency over T_lim
          const double per = std::max(head.period, st);
          if (per < best.period || (per == best.period && lat < best.latency))
            best = {per, lat, jp, q};
        }
      dp(j, p) = best;
    }
  int p_best = n;
  if (o.allow_idle_devices)
    for (int p = 1; p <= n; ++p)
      if (dp(L - 1, p).period < dp(L - 1, p_best).period) p_best = p;
  if (dp(L - 1, p_best).period == kInf)
    throw Infeasible(cat(who, ": no pipeline of ", p_best,
                         " devices meets the latency cap T_lim = ", cap, " s"));
  HomogeneousPlan plan{.period_s = dp(L - 1, p_best).period,
                       .latency_s = dp(L - 1, p_best).latency};
  for (int j = L - 1, p = p_best; j >= 0;) {  // trace-back
    const Entry& e = dp(j, p);
    plan.stages.push_back({e.prev_j + 1, j, e.q});
    p -= e.q;
    j = e.prev_j;
  }
  std::reverse(plan.stages.begin(), plan.stages.end());
  return plan;
}

std::vector<std::vector<int>> pico_mapping(const EdgeProblem& pb, const HomogeneousPlan& h,
                                           const std::vector<double>& avg) {
  std::vector<int> left;
  for (const HomogeneousStage& s : h.stages) left.push_back(s.q);
  std::vector<std::vector<int>> members(h.stages.size());
  for (int d : by_capacity(pb)) {
    int pick = -1;
    for (size_t s = 0; s < h.stages.size(); ++s)
      if (left[s] > 0 && (pick < 0 || avg[s] > avg[static_cast<size_t>(pick)]))
        pick = static_cast<int>(s);
    if (pick < 0) break;  // idle devices (allow_idle_devices)
    members[static_cast<size_t>(pick)].push_back(d);
    --left[static_cast<size_t>(pick)];
  }
  return members;
}

}  // namespace detail

HomogeneousPlan pico_dp(const EdgeProblem& pb, int n, double capacity, const PlanOptions& o) {
  return detail::pico_dp_over(
      pb.chain->size(), n, o,
      [&](int i, int j, int q) { return homogeneous_stage_s(pb, i, j, q, capacity); }, "PICO");
}

EdgePlan plan_pico(const EdgeProblem& pb, const PlanOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const int n = static_cast<int>(pb.devices.size());
  double mean = 0;
  for (const DeviceProfile& d : pb.devices) mean += d.peak_flops / n;  // eq. 12
  const HomogeneousPlan h = pico_dp(pb, n, mean, o);
  // Alg. 2: the fastest device first, to the stage with the largest average requirement Θ'/|D'|.
  std::vector<double> avg;
  for (const HomogeneousStage& s : h.stages)
    avg.push_back(stage_flops(pb, s.first, s.last, s.q) / s.q);
  std::vector<std::vector<int>> members = detail::pico_mapping(pb, h, avg);
  if (o.refine_mapping) {
    std::vector<std::pair<int, int>> ranges;
    for (const HomogeneousStage& s : h.stages) ranges.emplace_back(s.first, s.last);
    members = detail::refine_mapping(pb, ranges, std::move(members), o.allow_idle_devices,
                                     o.latency_cap_s);
  }
  EdgePlan plan{.system = "pico", .pipelined = true};
  for (size_t s = 0; s < h.stages.size(); ++s) {
    const HomogeneousStage& hs = h.stages[s];
    std::vector<int> m = members[s];
    std::stable_sort(m.begin(), m.end(), [&](int a, int b) {
      return pb.devices[static_cast<size_t>(a)].peak_flops >
             pb.devices[static_cast<size_t>(b)].peak_flops;
    });
    plan.stages.push_back(
        m.size() == 1 ? detail::whole_stage(pb, hs.first, hs.last, m[0])
                      : detail::row_stage(pb, hs.first, hs.last, m,
                                          detail::split_balanced(pb, hs.first, hs.last, m)));
  }
  plan.notes = {{"homogeneous_period_s", h.period_s},
                {"homogeneous_latency_s", h.latency_s},
                {"refine_mapping", o.refine_mapping},
                {"latency_cap_s", std::isfinite(o.latency_cap_s) ? nlohmann::json(o.latency_cap_s)
                                                                 : nlohmann::json(nullptr)}};
  return detail::finish(std::move(plan), pb, o.lambda, t0);
}

EdgePlan plan_apico(const EdgeProblem& pb, const PlanOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  EdgePlan pipe = plan_pico(pb, o);
  EdgePlan fused = plan_ofl(pb, o);
  const bool use_pipe = pipe.metrics.latency_at_lambda_s <= fused.metrics.latency_at_lambda_s;
  EdgePlan plan = use_pipe ? pipe : fused;
  plan.notes["apico"] = {{"lambda", o.lambda},
                         {"choice", use_pipe ? "pipeline" : "fused"},
                         {"pipeline_mean_latency_s", pipe.metrics.latency_at_lambda_s},
                         {"fused_mean_latency_s", fused.metrics.latency_at_lambda_s}};
  plan.system = "apico";
  plan.metrics.planner_s = detail::seconds_since(t0);
  return plan;
}

}  // namespace tandem::cnn::edge
