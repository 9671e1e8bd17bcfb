// SPDX-License-Identifier: Apache-2.0
// PICO's optional mapping refinement (PlanOptions::refine_mapping; planners.h): local search over
// which devices serve which stage, the stages' piece ranges fixed.
#include <algorithm>
#include <limits>
#include <map>

#include "cnn/edge/inf.h"
#include "cnn/edge/split.h"

namespace tandem::cnn::edge::detail {

namespace {

struct Search {
  const EdgeProblem& pb;
  const std::vector<std::pair<int, int>>& ranges;
  std::map<std::pair<size_t, uint64_t>, double> memo;  // (stage, device set) -> T(S)

  double time(size_t s, const std::vector<int>& m) {
    if (m.empty()) return kInf;
    uint64_t key = 0;
    for (int d : m) key |= uint64_t{1} << d;
    auto it = memo.find({s, key});
    if (it != memo.end()) return it->second;
    const auto [first, last] = ranges[s];
    double t = kInf;
    if (m.size() == 1)
      t = stage_s(whole_stage(pb, first, last, m[0]), pb);
    else if (pb.chain->segment_spatial(first, last) &&
             pb.chain->out_region(last).h1 >= static_cast<int64_t>(m.size()))
      t = stage_s(row_stage(pb, first, last, m, split_balanced(pb, first, last, m)), pb);
    return memo[{s, key}] = t;
  }
  // (period, latency) of an assignment (the last group, when idle devices are allowed, is idle).
  std::pair<double, double> score(const std::vector<std::vector<int>>& g) {
    double per = 0, lat = 0;
    for (size_t s = 0; s < ranges.size(); ++s) {
      const double t = time(s, g[s]);
      per = std::max(per, t);
      lat += t;
    }
    return {per, lat};
  }
};

bool better(std::pair<double, double> a, std::pair<double, double> b, double cap) {
  if (a.second > cap) return false;
  return a.first < b.first * (1 - 1e-9) || (a.first <= b.first && a.second < b.second * (1 - 1e-9));
}

}  // namespace

std::vector<std::vector<int>> refine_mapping(const EdgeProblem& pb,
                                             const std::vector<std::pair<int, int>>& ranges,
                                             std::vector<std::vector<int>> groups, bool allow_idle,
                                             double cap) {
  if (pb.devices.size() > 64) return groups;  // device sets are 64-bit masks
  Search search{pb, ranges, {}};
  const size_t n_stages = ranges.size();
  groups.resize(n_stages + 1);  // the last group: idle devices
  auto best = search.score(groups);
  for (int round = 0; round < 200; ++round) {
    bool moved = false;
    for (size_t a = 0; a < groups.size() && !moved; ++a)
      for (size_t i = 0; i < groups[a].size() && !moved; ++i)
        for (size_t b = 0; b < groups.size() && !moved; ++b) {
          if (a == b || ((a == n_stages || b == n_stages) && !allow_idle)) continue;
          // Move device i of a to b, then try swapping it with each device of b.
          for (size_t j = 0; j <= groups[b].size() && !moved; ++j) {
            std::vector<std::vector<int>> g = groups;
            const int d = g[a][i];
            g[a].erase(g[a].begin() + static_cast<long>(i));
            if (j < groups[b].size()) {
              g[a].push_back(g[b][j]);
              g[b][j] = d;
            } else {
              g[b].push_back(d);
            }
            std::sort(g[a].begin(), g[a].end());
            std::sort(g[b].begin(), g[b].end());
            const auto s = search.score(g);
            if (better(s, best, cap)) {
              best = s;
              groups = std::move(g);
              moved = true;
            }
          }
        }
    if (!moved) break;
  }
  groups.resize(n_stages);
  return groups;
}

}  // namespace tandem::cnn::edge::detail
