// SPDX-License-Identifier: Apache-2.0
// DECC, reconstructed (spec cnn.md §3.4): per transition zone a split per branch, branches
// pipelined through edge compute -> FIFO uplink -> cloud as a three-machine flow shop, splits by
// iterated best response (tandem/cnn/edge/edge_cloud_planners.h).
#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>

#include "core/clock.h"
#include "tandem/cnn/edge/chain.h"
#include "tandem/cnn/edge/edge_cloud_planners.h"
#include "tandem/core/error.h"

namespace tandem::cnn::edge {

double flow_shop_makespan(const std::vector<FlowJob>& jobs, const std::vector<int>& order,
                          double e0) {
  double e = e0, u = e0, c = e0;
  for (int k : order) {
    const FlowJob& j = jobs.at(static_cast<size_t>(k));
    e += j.e;
    u = std::max(u, e) + j.u;
    c = std::max(c, u) + j.c;
  }
  return c;
}

std::vector<int> johnson_order(const std::vector<FlowJob>& jobs) {
  std::vector<int> first, last;
  for (int k = 0; k < static_cast<int>(jobs.size()); ++k)
    (jobs[static_cast<size_t>(k)].e <= jobs[static_cast<size_t>(k)].u ? first : last).push_back(k);
  std::stable_sort(first.begin(), first.end(), [&](int a, int b) {
    return jobs[static_cast<size_t>(a)].e < jobs[static_cast<size_t>(b)].e;
  });
  std::stable_sort(last.begin(), last.end(), [&](int a, int b) {
    return jobs[static_cast<size_t>(a)].u > jobs[static_cast<size_t>(b)].u;
  });
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

std::vector<int> decc_order(const std::vector<FlowJob>& jobs, double e0, bool first_fixed) {
  const size_t fixed = first_fixed && !jobs.empty() ? 1 : 0;
  std::vector<FlowJob> rest(jobs.begin() + static_cast<long>(fixed), jobs.end());
  std::vector<int> order;
  if (fixed) order.push_back(0);
  auto shifted = [&](const std::vector<int>& o) {
    std::vector<int> full = order;
    for (int k : o) full.push_back(k + static_cast<int>(fixed));
    return full;
  };
  if (rest.size() > 5) return shifted(johnson_order(rest));
  std::vector<int> perm(rest.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::vector<int> best = shifted(perm);
  double best_s = flow_shop_makespan(jobs, best, e0);
  while (std::next_permutation(perm.begin(), perm.end())) {
    const std::vector<int> o = shifted(perm);
    const double s = flow_shop_makespan(jobs, o, e0);
    if (s < best_s) best_s = s, best = o;
  }
  return best;
}

namespace {

// What branch b hands over when its first s nodes run on the edge.
struct BranchCut {
  double e = 0, c = 0, u = 0;
  std::vector<int> uploads;  // tensors the prefix makes that a cloud node reads, in graph order
  bool needs_input = false;  // a cloud node of the branch reads the zone's input
};

struct Zone {
  std::string name;
  int in_tensor = -1;
  int join = -1;  // the node making the zone's output when it reads several tensors
  bool join_reads_input = false;
  std::vector<std::vector<int>> branches;
  std::vector<std::vector<BranchCut>> cuts;  // [b][s]
  double edge_before_s = 0, cloud_after_s = 0, join_cloud_s = 0;
  std::vector<int> before, after;  // the nodes of the zones before and after, graph order
};

int union_root(std::vector<int>& parent, int v) {
  while (parent[static_cast<size_t>(v)] != v)
    v = parent[static_cast<size_t>(v)] =
        parent[static_cast<size_t>(parent[static_cast<size_t>(v)])];
  return v;
}

BranchCut branch_cut(const EdgeCloudProblem& pb, const Zone& z, const std::vector<int>& branch,
                     size_t s) {
  const Graph& g = *pb.graph;
  BranchCut cut;
  std::vector<bool> prefix(static_cast<size_t>(pb.nodes()), false);
  for (size_t i = 0; i < branch.size(); ++i) {
    const size_t v = static_cast<size_t>(branch[i]);
    prefix[v] = i < s;
    if (i < s)
      cut.e += pb.edge_s[v];
    else
      cut.c += pb.cloud_s[v];
  }
  for (size_t i = 0; i < branch.size(); ++i) {
    const int v = branch[i];
    if (i >= s) {
      for (int in : g.node(v).inputs) cut.needs_input = cut.needs_input || in == z.in_tensor;
      continue;
    }
    for (int out : g.node(v).outputs)
      for (int u : g.tensor(out).consumers)
        if (!prefix[static_cast<size_t>(u)]) {
          cut.uploads.push_back(out);
          cut.u += pb.upload_s(out);
          break;
        }
  }
  return cut;
}

std::vector<Zone> make_zones(const EdgeCloudProblem& pb) {
  const Graph& g = *pb.graph;
  const Chain chain = linearise(g);
  std::vector<Zone> zones;
  for (const Piece& piece : chain.pieces()) {
    Zone z;
    z.name = piece.name;
    z.in_tensor = piece.in_tensor;
    std::vector<int> nodes = piece.nodes;
    std::sort(nodes.begin(), nodes.end());
    std::vector<bool> inside(static_cast<size_t>(pb.nodes()), false);
    for (int v : nodes) inside[static_cast<size_t>(v)] = true;
    const int last = g.tensor(piece.out_tensor).producer;
    std::vector<int> operands;  // distinct tensors of the zone the last node reads
    for (int in : g.node(last).inputs) {
      const int prod = g.tensor(in).producer;
      if ((in == z.in_tensor || (prod >= 0 && inside[static_cast<size_t>(prod)])) &&
          std::find(operands.begin(), operands.end(), in) == operands.end())
        operands.push_back(in);
    }
    if (operands.size() > 1) {
      z.join = last;
      z.join_reads_input =
          std::find(operands.begin(), operands.end(), z.in_tensor) != operands.end();
      z.join_cloud_s = pb.cloud_s[static_cast<size_t>(last)];
    }
    // Branches: connected parts of the zone's nodes without the join.
    std::vector<int> parent(static_cast<size_t>(pb.nodes()));
    std::iota(parent.begin(), parent.end(), 0);
    for (int v : nodes) {
      if (v == z.join) continue;
      for (int in : g.node(v).inputs) {
        const int prod = g.tensor(in).producer;
        if (prod >= 0 && inside[static_cast<size_t>(prod)] && prod != z.join)
          parent[static_cast<size_t>(union_root(parent, v))] = union_root(parent, prod);
      }
    }
    std::vector<int> root_of;
    for (int v : nodes) {
      if (v == z.join) continue;
      const int r = union_root(parent, v);
      auto it = std::find(root_of.begin(), root_of.end(), r);
      if (it == root_of.end()) {
        root_of.push_back(r);
        z.branches.emplace_back();
        it = root_of.end() - 1;
      }
      z.branches[static_cast<size_t>(it - root_of.begin())].push_back(v);
    }
    for (const std::vector<int>& b : z.branches) {
      z.cuts.emplace_back();
      for (size_t s = 0; s <= b.size(); ++s) z.cuts.back().push_back(branch_cut(pb, z, b, s));
    }
    zones.push_back(std::move(z));
  }
  for (size_t i = 0; i < zones.size(); ++i)
    for (size_t k = 0; k < zones.size(); ++k) {
      if (k == i) continue;
      const Piece& p = chain.piece(static_cast<int>(k));
      for (int v : p.nodes) {
        if (k < i) {
          zones[i].edge_before_s += pb.edge_s[static_cast<size_t>(v)];
          zones[i].before.push_back(v);
        } else {
          zones[i].cloud_after_s += pb.cloud_s[static_cast<size_t>(v)];
          zones[i].after.push_back(v);
        }
      }
    }
  for (Zone& z : zones) {
    std::sort(z.before.begin(), z.before.end());
    std::sort(z.after.begin(), z.after.end());
  }
  return zones;
}

// The flow-shop jobs of a split: the shared input upload first when any cloud node of the zone
// reads the input, then one job per branch with s_b > 0. `branch_of` maps jobs to branches (-1:
// the shared one).
struct Jobs {
  std::vector<FlowJob> jobs;
  std::vector<int> branch_of;
};
Jobs jobs_of(const EdgeCloudProblem& pb, const Zone& z, const std::vector<int>& split) {
  Jobs j;
  FlowJob shared{.u = pb.upload_s(z.in_tensor)};
  bool need_input = z.join_reads_input;
  for (size_t b = 0; b < z.branches.size(); ++b) {
    const BranchCut& cut = z.cuts[b][static_cast<size_t>(split[b])];
    need_input = need_input || cut.needs_input;
    if (split[b] == 0) shared.c += cut.c;
  }
  if (need_input) {
    j.jobs.push_back(shared);
    j.branch_of.push_back(-1);
  }
  for (size_t b = 0; b < z.branches.size(); ++b) {
    if (split[b] == 0) continue;
    const BranchCut& cut = z.cuts[b][static_cast<size_t>(split[b])];
    j.jobs.push_back({.e = cut.e, .u = cut.u, .c = cut.c});
    j.branch_of.push_back(static_cast<int>(b));
  }
  return j;
}

DeccSplit price(const EdgeCloudProblem& pb, const Zone& z, int zone, std::vector<int> split) {
  const Jobs j = jobs_of(pb, z, split);
  const bool shared = !j.branch_of.empty() && j.branch_of[0] < 0;
  const std::vector<int> order = decc_order(j.jobs, z.edge_before_s, shared);
  DeccSplit d{.zone = zone, .split = std::move(split)};
  for (int k : order)
    if (j.branch_of[static_cast<size_t>(k)] >= 0)
      d.order.push_back(j.branch_of[static_cast<size_t>(k)]);
  d.flow_shop_s =
      flow_shop_makespan(j.jobs, order, z.edge_before_s) + z.join_cloud_s + z.cloud_after_s;
  return d;
}

const Zone& zone_at(const std::vector<Zone>& zones, int zone) {
  if (zone < 0 || zone >= static_cast<int>(zones.size()))
    throw InvalidArgument(cat("decc: no zone ", zone, " (the model has ", zones.size(), ")"));
  return zones[static_cast<size_t>(zone)];
}

void check_split(const Zone& z, const std::vector<int>& split) {
  if (split.size() != z.branches.size())
    throw InvalidArgument(cat("decc: zone '", z.name, "' has ", z.branches.size(),
                              " branches, the split gives ", split.size()));
  for (size_t b = 0; b < split.size(); ++b)
    if (split[b] < 0 || split[b] > static_cast<int>(z.branches[b].size()))
      throw InvalidArgument(cat("decc: zone '", z.name, "' branch ", b, ": split ", split[b],
                                " outside 0..", z.branches[b].size()));
}

EdgeCloudPlan build_plan(const EdgeCloudProblem& pb, const Zone& z, const DeccSplit& d) {
  EdgeCloudPlan p;
  p.system = "decc";
  p.edge_nodes = z.before;
  const Jobs j = jobs_of(pb, z, d.split);
  if (!j.branch_of.empty() && j.branch_of[0] < 0) p.uploads.push_back(z.in_tensor);
  for (int b : d.order) {
    const std::vector<int>& nodes = z.branches[static_cast<size_t>(b)];
    const size_t s = static_cast<size_t>(d.split[static_cast<size_t>(b)]);
    p.edge_nodes.insert(p.edge_nodes.end(), nodes.begin(), nodes.begin() + static_cast<long>(s));
    const BranchCut& cut = z.cuts[static_cast<size_t>(b)][s];
    p.uploads.insert(p.uploads.end(), cut.uploads.begin(), cut.uploads.end());
  }
  // The cloud runs each job's nodes once its uploads are in (the shared job's branches first, the
  // join and the later zones last): the runtime's order gives exactly that.
  std::vector<bool> on_edge(static_cast<size_t>(pb.nodes()), false);
  for (int v : p.edge_nodes) on_edge[static_cast<size_t>(v)] = true;
  p.cloud_nodes = runtime_cloud_order(pb, on_edge, p.uploads);
  evaluate(p, pb);
  nlohmann::json split = nlohmann::json::array();
  for (size_t b = 0; b < z.branches.size(); ++b)
    split.push_back({{"branch", pb.graph->node(z.branches[b].front()).name},
                     {"nodes", z.branches[b].size()},
                     {"edge_nodes", d.split[b]}});
  nlohmann::json order = nlohmann::json::array();
  for (int b : d.order)
    order.push_back(pb.graph->node(z.branches[static_cast<size_t>(b)].front()).name);
  p.notes = {{"zone", d.zone},
             {"zone_name", z.name},
             {"split", split},
             {"edge_branch_order", order},
             {"flow_shop_s", d.flow_shop_s}};
  return p;
}

// Per branch, the longest prefix inside `on_edge`.
std::vector<int> seed_from(const Zone& z, const std::vector<bool>& on_edge) {
  std::vector<int> s;
  for (const std::vector<int>& b : z.branches) {
    int k = 0;
    while (k < static_cast<int>(b.size()) &&
           on_edge[static_cast<size_t>(b[static_cast<size_t>(k)])])
      ++k;
    s.push_back(k);
  }
  return s;
}

// Iterated best response from `seed`: each branch in turn takes the split that lowers the
// recurrence most with the others fixed, until a sweep changes nothing.
DeccSplit best_response(const EdgeCloudProblem& pb, const Zone& z, int zone,
                        std::vector<int> seed) {
  DeccSplit cur = price(pb, z, zone, std::move(seed));
  for (int sweep = 0; sweep < 32; ++sweep) {
    bool moved = false;
    for (size_t b = 0; b < z.branches.size(); ++b)
      for (int s = 0; s <= static_cast<int>(z.branches[b].size()); ++s) {
        if (s == cur.split[b]) continue;
        std::vector<int> split = cur.split;
        split[b] = s;
        DeccSplit next = price(pb, z, zone, std::move(split));
        if (next.flow_shop_s < cur.flow_shop_s * (1 - 1e-12)) cur = std::move(next), moved = true;
      }
    if (!moved) break;
  }
  return cur;
}

std::vector<bool> edge_set(const EdgeCloudPlan& p, int nodes) {
  std::vector<bool> s(static_cast<size_t>(nodes), false);
  for (int v : p.edge_nodes) s[static_cast<size_t>(v)] = true;
  return s;
}

}  // namespace

std::vector<std::vector<int>> decc_branches(const EdgeCloudProblem& pb, int zone) {
  return zone_at(make_zones(pb), zone).branches;
}

DeccSplit decc_candidate(const EdgeCloudProblem& pb, int zone, const std::vector<int>& split) {
  const std::vector<Zone> zones = make_zones(pb);
  check_split(zone_at(zones, zone), split);
  return price(pb, zone_at(zones, zone), zone, split);
}

EdgeCloudPlan decc_plan(const EdgeCloudProblem& pb, const DeccSplit& d) {
  const std::vector<Zone> zones = make_zones(pb);
  check_split(zone_at(zones, d.zone), d.split);
  return build_plan(pb, zone_at(zones, d.zone), d);
}

EdgeCloudPlan plan_decc(const EdgeCloudProblem& pb) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<Zone> zones = make_zones(pb);
  std::vector<EdgeCloudPlan> baselines = {plan_dads_dsl(pb), plan_neurosurgeon(pb),
                                          plan_dads_dsh(pb), plan_edge_only(pb),
                                          plan_cloud_only(pb)};
  const EdgeCloudPlan& edge_only = baselines[3];
  const std::vector<bool> dsl = edge_set(baselines[0], pb.nodes());
  const std::vector<bool> ns = edge_set(baselines[1], pb.nodes());
  DeccSplit best{.flow_shop_s = std::numeric_limits<double>::infinity()};
  int candidates = 0;
  for (int zi = 0; zi < static_cast<int>(zones.size()); ++zi) {
    const Zone& z = zones[static_cast<size_t>(zi)];
    for (const std::vector<int>& seed :
         {seed_from(z, dsl), seed_from(z, ns), std::vector<int>(z.branches.size(), 0)}) {
      DeccSplit d = best_response(pb, z, zi, seed);
      ++candidates;
      if (d.flow_shop_s < best.flow_shop_s) best = std::move(d);
    }
  }
  // Past the last zone: everything on the edge (a last zone that is a block cannot keep its join
  // on the edge otherwise).
  EdgeCloudPlan plan;
  if (edge_only.metrics.makespan_s < best.flow_shop_s) {
    plan = edge_only;
    plan.system = "decc";
    plan.notes = {{"zone", "none: every node on the edge"}};
  } else {
    plan = build_plan(pb, zones[static_cast<size_t>(best.zone)], best);
  }
  plan.notes["from"] = "decc";
  plan.notes["searches"] = candidates;
  for (EdgeCloudPlan& b : baselines)
    if (b.metrics.makespan_s < plan.metrics.makespan_s * (1 - 1e-12)) {  // not summation noise
      const std::string from = b.system;
      const double own = plan.metrics.makespan_s;
      plan = std::move(b);
      plan.system = "decc";
      plan.notes = {{"from", from}, {"decc_own_makespan_s", own}};
    }
  plan.metrics.planner_s = seconds_since(t0);
  return plan;
}

}  // namespace tandem::cnn::edge
