// SPDX-License-Identifier: Apache-2.0
// Row splits shared by the edge planners (split.h).
#include "cnn/edge/split.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tandem::cnn::edge::detail {

std::vector<int64_t> split_proportional(int64_t total, const std::vector<double>& weights) {
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<int64_t> part(weights.size());
  std::vector<std::pair<double, size_t>> rest;
  int64_t given = 0;
  for (size_t k = 0; k < weights.size(); ++k) {
    const double exact = static_cast<double>(total) * weights[k] / sum;
    part[k] = static_cast<int64_t>(std::floor(exact));
    given += part[k];
    rest.emplace_back(exact - static_cast<double>(part[k]), k);
  }
  std::stable_sort(rest.begin(), rest.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < total; ++i, ++given) ++part[rest[i % rest.size()].second];
  std::vector<int64_t> b{0};
  for (int64_t p : part) b.push_back(b.back() + p);
  return b;
}

std::vector<int64_t> split_even(int64_t total, int q) {
  return split_proportional(total, std::vector<double>(static_cast<size_t>(q), 1.0));
}

Stage row_stage(const EdgeProblem& pb, int first, int last, const std::vector<int>& devices,
                const std::vector<int64_t>& bounds) {
  Stage s{.first = first, .last = last};
  const Region full = pb.chain->out_region(last);
  for (size_t k = 0; k < devices.size(); ++k) {
    if (bounds[k + 1] <= bounds[k]) continue;
    s.shares.push_back({.device = pb.devices[static_cast<size_t>(devices[k])].name,
                        .out = {bounds[k], bounds[k + 1], full.w0, full.w1}});
  }
  return s;
}

Stage whole_stage(const EdgeProblem& pb, int first, int last, int device) {
  return Stage{.first = first,
               .last = last,
               .shares = {{.device = pb.devices[static_cast<size_t>(device)].name,
                           .out = pb.chain->out_region(last)}}};
}

namespace {

double rows_s(const EdgeProblem& pb, int first, int last, int device, int64_t r0, int64_t r1) {
  if (r1 <= r0) return 0.0;
  const Region full = pb.chain->out_region(last);
  const TileWork w = pb.chain->tile_work(first, last, {r0, r1, full.w0, full.w1});
  return pb.cost->compute_s(w, pb.devices[static_cast<size_t>(device)]);
}

// Bounds when each device in turn takes the most rows it computes within t; the last bound is
// short of H when t is too small.
std::vector<int64_t> fill(const EdgeProblem& pb, int first, int last,
                          const std::vector<int>& devices, double t) {
  const int64_t h = pb.chain->out_region(last).h1;
  std::vector<int64_t> b{0};
  for (int d : devices) {
    int64_t lo = b.back(), hi = h;  // the answer is in [lo, hi]
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (rows_s(pb, first, last, d, b.back(), mid) <= t)
        lo = mid;
      else
        hi = mid - 1;
    }
    b.push_back(lo);
  }
  return b;
}

}  // namespace

std::vector<int64_t> split_balanced(const EdgeProblem& pb, int first, int last,
                                    const std::vector<int>& devices) {
  const int64_t h = pb.chain->out_region(last).h1;
  double hi = rows_s(pb, first, last, devices[0], 0, h), lo = 0;
  for (int d : devices) hi = std::min(hi, rows_s(pb, first, last, d, 0, h));
  std::vector<int64_t> best = fill(pb, first, last, devices, hi);
  for (int it = 0; it < 60 && hi - lo > 1e-4 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    std::vector<int64_t> b = fill(pb, first, last, devices, mid);
    if (b.back() >= h) {
      hi = mid;
      best = std::move(b);
    } else {
      lo = mid;
    }
  }
  best.back() = h;
  return best;
}

std::vector<int> by_capacity(const EdgeProblem& pb) {
  std::vector<int> order(pb.devices.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return pb.devices[static_cast<size_t>(a)].peak_flops >
           pb.devices[static_cast<size_t>(b)].peak_flops;
  });
  return order;
}

Stage proportional_stage(const EdgeProblem& pb, int first, int last) {
  const std::vector<int> order = by_capacity(pb);
  if (!pb.chain->segment_spatial(first, last)) return whole_stage(pb, first, last, order[0]);
  std::vector<double> cap;
  for (int d : order) cap.push_back(pb.devices[static_cast<size_t>(d)].peak_flops);
  return row_stage(pb, first, last, order, split_proportional(pb.chain->out_region(last).h1, cap));
}

double stage_s(const Stage& s, const EdgeProblem& pb) { return stage_cost(s, pb).time_s; }

EdgePlan finish(EdgePlan plan, const EdgeProblem& pb, double lambda,
                std::chrono::steady_clock::time_point t0) {
  plan.metrics.planner_s = seconds_since(t0);
  evaluate(plan, pb, lambda);
  return plan;
}

}  // namespace tandem::cnn::edge::detail
