// SPDX-License-Identifier: Apache-2.0
// PipeEdge-style interval DP (one device per stage) and the single-device reference (spec cnn.md
// §4; planners.h).
#include <limits>
#include <utility>

#include "cnn/edge/inf.h"
#include "cnn/edge/split.h"
#include "tandem/cnn/edge/planners.h"
#include "tandem/core/error.h"

namespace tandem::cnn::edge {

namespace {

// T(S) of pieces i..j whole on device d; +∞ when d cannot hold the weights and working set.
double whole_s(const EdgeProblem& pb, int i, int j, int d) {
  const TileWork w = pb.chain->tile_work(i, j, pb.chain->out_region(j));
  const DeviceProfile& dev = pb.devices[static_cast<size_t>(d)];
  if (pb.chain->segment_weight_bytes(i, j) + w.act_peak_bytes > dev.mem_bytes) return kInf;
  return pb.cost->compute_s(w, dev) + pb.transfer_s(w.in_bytes) + pb.transfer_s(w.out_bytes);
}

}  // namespace

EdgePlan plan_pipeedge(const EdgeProblem& pb, const PlanOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const int L = pb.chain->size(), n = static_cast<int>(pb.devices.size());
  if (n > 12)
    throw Unsupported(
        cat("PipeEdge: the exact subset DP takes at most 12 devices; the cluster has ", n));
  std::vector<double> t(static_cast<size_t>(L * L * n), kInf);  // t[(i*L+j)*n+d]
  for (int i = 0; i < L; ++i)
    for (int j = i; j < L; ++j)
      for (int d = 0; d < n; ++d)
        t[(static_cast<size_t>(i) * L + j) * n + d] = whole_s(pb, i, j, d);
  // best[k][mask]: pieces 0..k-1 on exactly the devices in mask, one stage each.
  struct Entry {
    double period = kInf, latency = kInf;
    int prev = -1, dev = -1;
  };
  const size_t masks = size_t{1} << n;
  std::vector<Entry> best(static_cast<size_t>(L + 1) * masks);
  auto at = [&](int k, size_t mask) -> Entry& {
    return best[static_cast<size_t>(k) * masks + mask];
  };
  at(0, 0) = {0, 0, -1, -1};
  for (int k = 0; k < L; ++k)
    for (size_t mask = 0; mask < masks; ++mask) {
      const Entry& e = at(k, mask);
      if (e.period == kInf) continue;
      for (int d = 0; d < n; ++d) {
        if (mask & (size_t{1} << d)) continue;
        for (int j = k; j < L; ++j) {
          const double st = t[(static_cast<size_t>(k) * L + j) * n + d];
          if (st == kInf) continue;
          Entry c{std::max(e.period, st), e.latency + st, k, d};
          if (c.latency > o.latency_cap_s) continue;
          Entry& to = at(j + 1, mask | (size_t{1} << d));
          if (c.period < to.period || (c.period == to.period && c.latency < to.latency)) to = c;
        }
      }
    }
  size_t end = 0;
  for (size_t mask = 1; mask < masks; ++mask)
    if (at(L, mask).period < at(L, end).period) end = mask;
  if (at(L, end).period == kInf)
    throw Infeasible(
        "PipeEdge: no device sequence holds the model within the memory limits and "
        "the latency cap");
  EdgePlan plan{.system = "pipeedge", .pipelined = true};
  for (int k = L; k > 0;) {
    const Entry& e = at(k, end);
    plan.stages.insert(plan.stages.begin(), detail::whole_stage(pb, e.prev, k - 1, e.dev));
    end &= ~(size_t{1} << e.dev);
    k = e.prev;
  }
  return detail::finish(std::move(plan), pb, o.lambda, t0);
}

EdgePlan plan_single(const EdgeProblem& pb, const PlanOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const int L = pb.chain->size();
  int pick = -1;
  double best = kInf;
  for (int d = 0; d < static_cast<int>(pb.devices.size()); ++d) {
    const double t = whole_s(pb, 0, L - 1, d);
    if (t < best) {
      best = t;
      pick = d;
    }
  }
  if (pick < 0)
    throw Infeasible(cat("single device: no device can hold the model's ",
                         pb.chain->segment_weight_bytes(0, L - 1) / 1e6, " MB of weights"));
  EdgePlan plan{.system = "single", .pipelined = false};
  plan.stages.push_back(detail::whole_stage(pb, 0, L - 1, pick));
  return detail::finish(std::move(plan), pb, o.lambda, t0);
}

}  // namespace tandem::cnn::edge
