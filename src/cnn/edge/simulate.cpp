// SPDX-License-Identifier: Apache-2.0
// The pipeline runtime's schedule of an edge plan (tandem/cnn/edge/simulate.h).
#include "tandem/cnn/edge/simulate.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/error.h"

namespace tandem::cnn::edge {
namespace {

// Busy intervals of one resource; reserve() books the earliest gap of `d` seconds from `t`.
class Resource {
 public:
  double reserve(double t, double d) {
    for (const auto& [a, b] : busy_) {
      if (t + d <= a) break;
      t = std::max(t, b);
    }
    busy_.insert(std::upper_bound(busy_.begin(), busy_.end(), std::pair{t, t + d}), {t, t + d});
    return t + d;
  }

 private:
  std::vector<std::pair<double, double>> busy_;  // sorted, disjoint
};

// One device of a stage as the runtime runs it: all its shares, the bytes of their tiles.
struct Member {
  std::string device;
  double compute_s = 0, in_s = 0, out_s = 0;  // the master's transfers are 0
};

std::vector<Member> members_of(const Stage& s, const EdgeProblem& pb) {
  std::vector<Member> out;
  std::map<std::string, size_t> at;
  for (const DeviceShare& sh : s.shares) {
    const TileWork w = share_work(s, sh, pb);
    auto [it, fresh] = at.emplace(sh.device, out.size());
    if (fresh) out.push_back({sh.device});
    Member& m = out[it->second];
    m.compute_s +=
        pb.cost->compute_s(w, pb.devices[static_cast<size_t>(pb.device_index(sh.device))]);
    if (it->second > 0) {
      m.in_s += pb.transfer_s(w.in_bytes);
      m.out_s += pb.transfer_s(w.out_bytes);
    }
  }
  return out;
}

// Frames 0..n-1 through the plan (its stages' members); returns when the last one is done.
double run(const EdgePlan& plan, const EdgeProblem& pb,
           const std::vector<std::vector<Member>>& stages, int n, bool shared) {
  const Chain& c = *pb.chain;
  const size_t ns = stages.size();
  Resource one_medium;
  std::vector<Resource> group_medium(ns), link_medium(ns);
  std::map<std::string, Resource> device;
  std::vector<double> node_free(ns, 0.0), link_free(ns, 0.0);
  double t = 0;
  for (int f = 0; f < n; ++f) {
    t = 0;
    for (size_t j = 0; j < ns; ++j) {
      if (j > 0 && stages[j][0].device != stages[j - 1][0].device) {
        // The stitched tensor from the last master to this one (a link node).
        const double d = pb.transfer_s(c.piece(plan.stages[j - 1].last).out_bytes);
        Resource& medium = shared ? one_medium : link_medium[j];
        t = medium.reserve(std::max(t, link_free[j]), d);
        link_free[j] = t;
      }
      const double start = std::max(t, node_free[j]);
      double end = start;
      Resource& medium = shared ? one_medium : group_medium[j];
      for (const Member& m : stages[j]) {
        const double in = m.in_s > 0 ? medium.reserve(start, m.in_s) : start;
        const double comp = device[m.device].reserve(in, m.compute_s);
        end = std::max(end, m.out_s > 0 ? medium.reserve(comp, m.out_s) : comp);
      }
      node_free[j] = end;
      t = end;
    }
  }
  return t;  // frames leave in order: the last one's completion
}

}  // namespace

RuntimeSim simulate_runtime(const EdgePlan& plan, const EdgeProblem& pb,
                            const RuntimeSimOptions& o) {
  if (o.frames < 2)
    throw InvalidArgument(cat("simulate_runtime: frames must be >= 2, got ", o.frames));
  if (plan.stages.empty()) throw InvalidArgument("simulate_runtime: the plan has no stages");
  std::vector<std::vector<Member>> stages;  // priced once for both runs
  for (const Stage& s : plan.stages) stages.push_back(members_of(s, pb));
  RuntimeSim r;
  r.latency_s = run(plan, pb, stages, 1, o.shared_medium);
  r.makespan_s = run(plan, pb, stages, o.frames, o.shared_medium);
  r.period_s = std::max(0.0, r.makespan_s - r.latency_s) / static_cast<double>(o.frames - 1);
  return r;
}

}  // namespace tandem::cnn::edge
