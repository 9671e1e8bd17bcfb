// SPDX-License-Identifier: Apache-2.0
// DADS (INFOCOM 2019): the light-load min cut (DSL) on Boost.Graph's Boykov-Kolmogorov max flow,
// the heavy-load (alpha, gamma) search (DSH) and the switch between them
// (tandem/cnn/edge/edge_cloud_planners.h).
#include <algorithm>
// GCC 12 at -O2 reports Boost 1.74's edge iterators as maybe uninitialised inside the max-flow
// code (a false positive in the library's headers, not in this file).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/boykov_kolmogorov_max_flow.hpp>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/clock.h"
#include "tandem/cnn/edge/edge_cloud_planners.h"

namespace tandem::cnn::edge {
namespace {

using Traits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using FlowGraph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS,
    boost::property<boost::vertex_index_t, long,
                    boost::property<boost::vertex_color_t, boost::default_color_type,
                                    boost::property<boost::vertex_distance_t, long,
                                                    boost::property<boost::vertex_predecessor_t,
                                                                    Traits::edge_descriptor>>>>,
    boost::property<
        boost::edge_capacity_t, double,
        boost::property<boost::edge_residual_capacity_t, double,
                        boost::property<boost::edge_reverse_t, Traits::edge_descriptor>>>>;

class Network {
 public:
  explicit Network(size_t vertices) : g_(vertices) {}
  // An arc u -> v of capacity `cap` and its residual twin v -> u of capacity 0.
  void arc(size_t u, size_t v, double cap) {
    auto cap_map = boost::get(boost::edge_capacity, g_);
    auto rev = boost::get(boost::edge_reverse, g_);
    const auto e = boost::add_edge(u, v, g_).first;
    const auto r = boost::add_edge(v, u, g_).first;
    cap_map[e] = cap;
    cap_map[r] = 0;
    rev[e] = r;
    rev[r] = e;
  }
  // Max flow from s to t; afterwards source_side(v) tells the side of v in the minimum cut.
  double solve(size_t s, size_t t) { return boost::boykov_kolmogorov_max_flow(g_, s, t); }
  bool source_side(size_t v) const {
    return boost::get(boost::vertex_color, g_, v) == boost::black_color;
  }

 private:
  FlowGraph g_;
};

// T_e, T_t, T_c of an edge set (the input on the edge), without building the plan.
struct Sums {
  double e = 0, t = 0, c = 0;
};
Sums sums(const EdgeCloudProblem& pb, const std::vector<bool>& on_edge) {
  const Graph& g = *pb.graph;
  Sums s;
  for (int v = 0; v < pb.nodes(); ++v) {
    const size_t i = static_cast<size_t>(v);
    if (on_edge[i])
      s.e += pb.edge_s[i];
    else
      s.c += pb.cloud_s[i];
  }
  for (int ten = 0; ten < static_cast<int>(g.tensors().size()); ++ten) {
    const int prod = g.tensor(ten).producer;
    if (prod < 0 ? ten != pb.input : !on_edge[static_cast<size_t>(prod)]) continue;
    for (int u : g.tensor(ten).consumers)
      if (!on_edge[static_cast<size_t>(u)]) {
        s.t += pb.upload_s(ten);
        break;
      }
  }
  return s;
}

}  // namespace

MinCut dads_min_cut(const EdgeCloudProblem& pb, double alpha, double gamma) {
  const Graph& g = *pb.graph;
  const int n = pb.nodes();
  // Vertices: e, c, the input, the nodes, then one auxiliary vertex per tensor read by several.
  const size_t e = 0, c = 1, in = 2;
  auto vertex = [&](int node) { return node < 0 ? in : static_cast<size_t>(3 + node); };
  size_t vertices = 3 + static_cast<size_t>(n);
  double finite = 0;
  for (int v = 0; v < n; ++v)
    finite +=
        alpha * pb.edge_s[static_cast<size_t>(v)] + gamma * pb.cloud_s[static_cast<size_t>(v)];
  for (int ten = 0; ten < static_cast<int>(g.tensors().size()); ++ten) {
    finite += pb.upload_s(ten);
    if (g.tensor(ten).consumers.size() > 1) ++vertices;
  }
  const double inf = 1e3 * finite + 1;  // above any finite cut, small enough to stay exact
  Network net(vertices);
  net.arc(e, in, inf);  // the input is produced on the edge
  for (int v = 0; v < n; ++v) {
    net.arc(e, vertex(v), gamma * pb.cloud_s[static_cast<size_t>(v)]);  // cut: v on the cloud
    net.arc(vertex(v), c, alpha * pb.edge_s[static_cast<size_t>(v)]);   // cut: v on the edge
  }
  size_t aux = 3 + static_cast<size_t>(n);
  for (int ten = 0; ten < static_cast<int>(g.tensors().size()); ++ten) {
    const TensorInfo& t = g.tensor(ten);
    if (t.consumers.empty() || (t.producer < 0 && ten != pb.input)) continue;
    const size_t p = vertex(t.producer);
    for (int u : t.consumers) net.arc(vertex(u), p, inf);  // closure: data never flows back
    if (t.consumers.size() == 1) {
      net.arc(p, vertex(t.consumers[0]), pb.upload_s(ten));
      continue;
    }
    net.arc(p, aux, pb.upload_s(ten));  // paid once, however many consumers are on the cloud
    for (int u : t.consumers) net.arc(aux, vertex(u), inf);
    ++aux;
  }
  MinCut cut;
  cut.value_s = net.solve(e, c);
  cut.on_edge.resize(static_cast<size_t>(n));
  for (int v = 0; v < n; ++v) cut.on_edge[static_cast<size_t>(v)] = net.source_side(vertex(v));
  return cut;
}

EdgeCloudPlan plan_dads_dsl(const EdgeCloudProblem& pb) {
  const auto t0 = std::chrono::steady_clock::now();
  const MinCut cut = dads_min_cut(pb);
  EdgeCloudPlan p = plan_from_edge_set("dads-dsl", cut.on_edge, pb);
  p.notes = {{"min_cut_s", cut.value_s}};
  p.metrics.planner_s = seconds_since(t0);
  return p;
}

EdgeCloudPlan plan_dads_dsh(const EdgeCloudProblem& pb) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<bool> best;
  double best_max = std::numeric_limits<double>::infinity(), best_la = 0, best_lg = 0;
  int runs = 0;
  auto try_at = [&](double la, double lg) {
    const MinCut cut = dads_min_cut(pb, std::exp2(la), std::exp2(lg));
    ++runs;
    const Sums s = sums(pb, cut.on_edge);
    const double worst = std::max({s.e, s.t, s.c});
    if (worst < best_max) best = cut.on_edge, best_max = worst, best_la = la, best_lg = lg;
  };
  // Coarse log2 grid, then two finer ones around the best point.
  for (int a = -6; a <= 6; ++a)
    for (int c = -6; c <= 6; ++c) try_at(a, c);
  for (double step : {0.5, 0.125}) {
    const double ca = best_la, cg = best_lg;
    for (int a = -3; a <= 3; ++a)
      for (int c = -3; c <= 3; ++c)
        if (a != 0 || c != 0) try_at(ca + step * a, cg + step * c);
  }
  EdgeCloudPlan p = plan_from_edge_set("dads-dsh", best, pb);
  p.notes = {{"alpha", std::exp2(best_la)},
             {"gamma", std::exp2(best_lg)},
             {"max_te_tt_tc_s", best_max},
             {"dsl_runs", runs}};
  p.metrics.planner_s = seconds_since(t0);
  return p;
}

EdgeCloudPlan plan_dads(const EdgeCloudProblem& pb) {
  const auto t0 = std::chrono::steady_clock::now();
  const bool heavy = pb.link.bandwidth_bytes_per_s * 8 < kDadsSwitchBitsPerS;
  EdgeCloudPlan p = heavy ? plan_dads_dsh(pb) : plan_dads_dsl(pb);
  p.notes["mode"] = heavy ? "dsh (below 1.51 Mbps)" : "dsl";
  p.system = "dads";
  p.metrics.planner_s = seconds_since(t0);
  return p;
}

}  // namespace tandem::cnn::edge

#pragma GCC diagnostic pop
