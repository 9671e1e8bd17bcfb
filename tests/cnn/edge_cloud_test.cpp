// SPDX-License-Identifier: Apache-2.0
// Edge-cloud planners (tandem/cnn/edge/edge_cloud_planners.h) on small graphs: DADS-DSL's min cut
// against brute force over every predecessor-closed cut of random DAGs (also with DSH's scaled
// arcs); evaluate() against the discrete-event simulation; DECC's flow-shop recurrence against
// the simulation of its plan on random branch sets; Johnson's rule against every order on two
// machines; DECC ahead of every baseline where the edge order of branches matters; bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "cnn_test_util.h"
#include "tandem/cnn/edge/edge_cloud_planners.h"
#include "tandem/cnn/edge/offload.h"
#include "tandem/core/cost_model.h"
#include "tandem/core/error.h"

namespace tandem::cnn::edge {
namespace {

using cnn::testing::random_tensor;

DeviceProfile device(const std::string& name, double flops) {
  DeviceProfile d;
  d.name = name;
  d.peak_flops = flops;
  d.mem_bytes = 1e9;
  d.mem_bandwidth_bytes_per_s = flops / 4;
  return d;
}

ClusterSpec two_devices(double edge_flops, double cloud_flops, double bytes_per_s,
                        double latency_s) {
  ClusterSpec c;
  c.devices = {device("edge", edge_flops), device("cloud", cloud_flops)};
  LinkProfile l;
  l.from = "edge";
  l.to = "cloud";
  l.bandwidth_bytes_per_s = bytes_per_s;
  l.latency_s = latency_s;
  c.links = {l};
  return c;
}

// A 1x1 conv from `x` (cin channels) to cout channels, named `name`.
int conv1x1(Graph& g, int x, int64_t cin, int64_t cout, const std::string& name, uint32_t seed) {
  Node n;
  n.name = name;
  n.op = OpKind::kConv;
  n.weight = random_tensor({cout, cin, 1, 1}, seed, 0.3f);
  n.bias = random_tensor({cout}, seed + 1, 0.1f);
  const int y = g.add_tensor(name + ".out");
  n.inputs = {x};
  n.outputs = {y};
  g.add_node(std::move(n));
  return y;
}

int concat(Graph& g, const std::vector<int>& xs, const std::string& name) {
  Node n;
  n.name = name;
  n.op = OpKind::kConcat;
  n.axis = 1;
  const int y = g.add_tensor(name + ".out");
  n.inputs = xs;
  n.outputs = {y};
  g.add_node(std::move(n));
  return y;
}

// A random DAG of `n` nodes over [1, C, 4, 4] maps: each node a 1x1 conv of one earlier tensor or
// a concat of two or three; a last concat joins every tensor nothing reads (one output).
Graph random_dag(int n, std::mt19937& rng) {
  Graph g;
  const int in = g.add_tensor("input", Shape({1, 3, 4, 4}));
  g.add_input(in);
  std::vector<int> tensors = {in};
  std::vector<int64_t> channels = {3};
  std::vector<int> readers = {0};
  for (int i = 0; i < n - 1; ++i) {
    std::uniform_int_distribution<size_t> pick(0, tensors.size() - 1);
    const int arity = tensors.size() > 1 ? std::uniform_int_distribution<int>(1, 3)(rng) : 1;
    std::vector<size_t> from;
    for (int k = 0; k < arity; ++k) {
      const size_t t = pick(rng);
      if (std::find(from.begin(), from.end(), t) == from.end()) from.push_back(t);
    }
    int y;
    int64_t c = 0;
    if (from.size() == 1) {
      c = std::uniform_int_distribution<int64_t>(1, 8)(rng);
      y = conv1x1(g, tensors[from[0]], channels[from[0]], c, "n" + std::to_string(i),
                  static_cast<uint32_t>(rng()));
    } else {
      std::vector<int> xs;
      for (size_t t : from) xs.push_back(tensors[t]), c += channels[t];
      y = concat(g, xs, "n" + std::to_string(i));
    }
    for (size_t t : from) ++readers[t];
    tensors.push_back(y);
    channels.push_back(c);
    readers.push_back(0);
  }
  std::vector<int> dangling;
  for (size_t t = 1; t < tensors.size(); ++t)
    if (readers[t] == 0) dangling.push_back(tensors[t]);
  const int out = dangling.size() == 1 ? conv1x1(g, dangling[0], channels.back(), 2, "last", 7)
                                       : concat(g, dangling, "last");
  g.add_output(out);
  g.infer_shapes();
  return g;
}

// Random edge and cloud times, so the cut is not decided by the FLOPs alone.
void randomise_times(EdgeCloudProblem& pb, std::mt19937& rng) {
  std::uniform_real_distribution<double> t(0.001, 0.05);
  for (double& s : pb.edge_s) s = t(rng);
  for (double& s : pb.cloud_s) s = t(rng) / 3;
}

// alpha·T_e + T_t + gamma·T_c of the plan that runs `on_edge` there.
double scaled(const EdgeCloudProblem& pb, const std::vector<bool>& on_edge, double a, double c) {
  EdgeCloudPlan p = plan_from_edge_set("cut", on_edge, pb);
  return a * p.metrics.edge_s + p.metrics.upload_s + c * p.metrics.cloud_s;
}

bool closed(const Graph& g, const std::vector<bool>& on_edge) {
  for (int v = 0; v < static_cast<int>(on_edge.size()); ++v)
    if (on_edge[static_cast<size_t>(v)])
      for (int in : g.node(v).inputs) {
        const int p = g.tensor(in).producer;
        if (p >= 0 && !on_edge[static_cast<size_t>(p)]) return false;
      }
  return true;
}

TEST(EdgeCloud, DslMinCutEqualsBruteForceOverClosedCuts) {
  const AnalyticCostModel cost;
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    std::mt19937 rng(seed);
    const Graph g = random_dag(6 + static_cast<int>(seed % 7), rng);
    const int n = static_cast<int>(g.nodes().size());
    ASSERT_LE(n, 12);
    const ClusterSpec cl = two_devices(1e9, 8e9, 1e4 * (1 + seed % 3), 0.002);
    EdgeCloudProblem pb = make_edge_cloud_problem(g, cl, cost);
    randomise_times(pb, rng);
    for (auto [a, c] : {std::pair{1.0, 1.0}, std::pair{0.25, 4.0}, std::pair{3.0, 0.5}}) {
      SCOPED_TRACE(::testing::Message()
                   << "seed " << seed << " nodes " << n << " alpha " << a << " gamma " << c);
      double best = std::numeric_limits<double>::infinity();
      for (uint32_t mask = 0; mask < (1u << n); ++mask) {
        std::vector<bool> on_edge(static_cast<size_t>(n));
        for (int v = 0; v < n; ++v) on_edge[static_cast<size_t>(v)] = (mask >> v) & 1u;
        if (closed(g, on_edge)) best = std::min(best, scaled(pb, on_edge, a, c));
      }
      const MinCut cut = dads_min_cut(pb, a, c);
      EXPECT_TRUE(closed(g, cut.on_edge));
      EXPECT_NEAR(cut.value_s, best, 1e-9 * best);
      EXPECT_NEAR(scaled(pb, cut.on_edge, a, c), best, 1e-9 * best);
    }
    EXPECT_NEAR(plan_dads_dsl(pb).metrics.serial_s, dads_min_cut(pb).value_s, 1e-9);
    // Neurosurgeon's prefixes are closed cuts too: never below the min cut.
    EXPECT_GE(plan_neurosurgeon(pb).metrics.serial_s, dads_min_cut(pb).value_s - 1e-12);
  }
}

TEST(EdgeCloud, EvaluatorEqualsTheDiscreteEventSimulation) {
  const AnalyticCostModel cost;
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    std::mt19937 rng(100 + seed);
    const Graph g = random_dag(12, rng);
    EdgeCloudProblem pb = make_edge_cloud_problem(g, two_devices(1e9, 8e9, 2e4, 0.003), cost);
    randomise_times(pb, rng);
    for (const std::string& s : edge_cloud_system_names()) {
      SCOPED_TRACE(s + " seed " + std::to_string(seed));
      const EdgeCloudPlan p = plan_edge_cloud(s, pb);
      const ScheduleSim sim = simulate_schedule(p, pb);
      EXPECT_NEAR(sim.makespan_s, p.metrics.makespan_s, 1e-12);
      EXPECT_LE(p.metrics.makespan_s, p.metrics.serial_s + 1e-12);  // overlap never hurts
      EXPECT_GE(p.metrics.makespan_s,
                std::max({p.metrics.edge_s, p.metrics.upload_s, p.metrics.cloud_s}) - 1e-12);
    }
  }
}

// Every planner's plan is what the split runtime runs (offload.h): the same uploads in the same
// order and the same cloud order, so evaluate() predicts the runtime's schedule.
TEST(EdgeCloud, PlansAreWhatTheSplitRuntimeRuns) {
  const AnalyticCostModel cost;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    std::mt19937 rng(300 + seed);
    const Graph g = random_dag(12, rng);
    EdgeCloudProblem pb = make_edge_cloud_problem(g, two_devices(1e9, 8e9, 2e4, 0.003), cost);
    randomise_times(pb, rng);
    for (const std::string& s : edge_cloud_system_names()) {
      SCOPED_TRACE(s + " seed " + std::to_string(seed));
      const EdgeCloudPlan p = plan_edge_cloud(s, pb);
      const OffloadSteps steps = offload_steps(g, p.edge_nodes);
      EXPECT_EQ(steps.uploads, p.uploads);
      std::vector<std::string> cloud;
      for (const auto& step : steps.cloud)
        for (const auto& n : step.at("nodes")) cloud.push_back(n.get<std::string>());
      ASSERT_EQ(cloud.size(), p.cloud_nodes.size());
      for (size_t i = 0; i < cloud.size(); ++i) EXPECT_EQ(cloud[i], g.node(p.cloud_nodes[i]).name);
    }
  }
}

// input -> m chains of 1x1 convs (random lengths and widths) -> concat -> a last conv.
Graph branch_set(int m, std::mt19937& rng) {
  Graph g;
  const int in = g.add_tensor("input", Shape({1, 8, 6, 6}));
  g.add_input(in);
  std::vector<int> outs;
  int64_t total = 0;
  for (int b = 0; b < m; ++b) {
    int x = in;
    int64_t c = 8;
    const int r = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int i = 0; i < r; ++i) {
      const int64_t co = std::uniform_int_distribution<int64_t>(1, 24)(rng);
      std::string name = "b";
      name.append(std::to_string(b)).append("_").append(std::to_string(i));
      x = conv1x1(g, x, c, co, name, static_cast<uint32_t>(rng()));
      c = co;
    }
    outs.push_back(x);
    total += c;
  }
  const int y = concat(g, outs, "join");
  g.add_output(conv1x1(g, y, total, 4, "tail", 3));
  g.infer_shapes();
  return g;
}

TEST(EdgeCloud, FlowShopEqualsTheSimulationOnRandomBranchSets) {
  const AnalyticCostModel cost;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(200 + seed);
    const int m = 2 + static_cast<int>(seed % 6);  // 2..7 branches: exhaustive and Johnson
    const Graph g = branch_set(m, rng);
    EdgeCloudProblem pb = make_edge_cloud_problem(g, two_devices(1e9, 6e9, 3e4, 0.001), cost);
    randomise_times(pb, rng);
    const std::vector<std::vector<int>> branches = decc_branches(pb, 0);
    ASSERT_EQ(static_cast<int>(branches.size()), m);
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<int> split;
      for (const auto& b : branches)
        split.push_back(std::uniform_int_distribution<int>(0, static_cast<int>(b.size()))(rng));
      SCOPED_TRACE(::testing::Message() << "seed " << seed << " trial " << trial);
      const DeccSplit d = decc_candidate(pb, 0, split);
      const EdgeCloudPlan p = decc_plan(pb, d);
      EXPECT_NEAR(simulate_schedule(p, pb).makespan_s, d.flow_shop_s, 1e-12);
      EXPECT_NEAR(p.metrics.makespan_s, d.flow_shop_s, 1e-12);
      EXPECT_EQ(offload_steps(g, p.edge_nodes).uploads, p.uploads);  // the runtime's order
    }
  }
}

TEST(EdgeCloud, JohnsonIsOptimalOnTwoMachines) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> t(0.01, 1.0);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<FlowJob> jobs(static_cast<size_t>(2 + trial % 6));
    for (FlowJob& j : jobs) j = {.e = t(rng), .u = t(rng), .c = 0};
    std::vector<int> perm(jobs.size());
    std::iota(perm.begin(), perm.end(), 0);
    double best = std::numeric_limits<double>::infinity();
    do best = std::min(best, flow_shop_makespan(jobs, perm, 0.3));
    while (std::next_permutation(perm.begin(), perm.end()));
    EXPECT_NEAR(flow_shop_makespan(jobs, johnson_order(jobs), 0.3), best, 1e-12);
    if (jobs.size() <= 5)
      EXPECT_NEAR(flow_shop_makespan(jobs, decc_order(jobs, 0.3), 0.3), best, 1e-12);
  }
}

// Two branches, the first compute-heavy with a tiny output, the second cheap with a large one, and
// a last node too slow for the edge: the graph order makes the large upload wait for both branches;
// DECC's Johnson order sends it while the edge computes the other branch.
TEST(EdgeCloud, DeccOrdersBranchesWhereTheCutsCannot) {
  Graph g;
  const int in = g.add_tensor("input", Shape({1, 64, 8, 8}));
  g.add_input(in);
  const int a = conv1x1(g, in, 64, 1, "heavy", 1);
  const int b = conv1x1(g, in, 64, 64, "wide", 3);
  const int j = concat(g, {a, b}, "join");
  g.add_output(conv1x1(g, j, 65, 1, "tail", 5));
  g.infer_shapes();
  const AnalyticCostModel cost;
  // 64x8x8 f32 = 16384 bytes: 3 s at this bandwidth; the heavy branch's output 0.05 s.
  EdgeCloudProblem pb = make_edge_cloud_problem(g, two_devices(1e9, 1e9, 16384.0 / 3, 0), cost);
  pb.edge_s = {3.0, 0.1, 0.01, 100.0};  // heavy, wide, join, tail
  pb.cloud_s = {100.0, 100.0, 0.01, 0.01};
  const EdgeCloudPlan decc = plan_decc(pb);
  EXPECT_EQ(decc.notes.at("from"), "decc");
  EXPECT_NEAR(decc.metrics.makespan_s, 0.1 + 3 + 3.0 / 64 + 0.02, 1e-9);
  for (const std::string& s : edge_cloud_system_names()) {
    if (s == "decc") continue;
    EXPECT_GT(plan_edge_cloud(s, pb).metrics.makespan_s, 1.5 * decc.metrics.makespan_s) << s;
  }
}

TEST(EdgeCloud, EdgeOnlyAndCloudOnly) {
  std::mt19937 rng(11);
  const Graph g = branch_set(3, rng);
  const AnalyticCostModel cost;
  const EdgeCloudProblem pb = make_edge_cloud_problem(g, two_devices(1e9, 4e9, 1e5, 0.01), cost);
  const EdgeCloudPlan e = plan_edge_only(pb), c = plan_cloud_only(pb);
  EXPECT_TRUE(e.uploads.empty());
  EXPECT_TRUE(e.cloud_nodes.empty());
  EXPECT_NEAR(e.metrics.makespan_s, std::accumulate(pb.edge_s.begin(), pb.edge_s.end(), 0.0),
              1e-12);
  ASSERT_EQ(c.uploads, std::vector<int>{pb.input});
  EXPECT_TRUE(c.edge_nodes.empty());
  EXPECT_NEAR(c.metrics.makespan_s,
              pb.upload_s(pb.input) + std::accumulate(pb.cloud_s.begin(), pb.cloud_s.end(), 0.0),
              1e-12);
  EXPECT_NEAR(pb.upload_s(pb.input), 0.01 + 8 * 6 * 6 * 4 / 1e5, 1e-12);
  EXPECT_NEAR(pb.edge_s[0] / pb.cloud_s[0], 4.0, 1e-12);  // one cost model, two devices
}

// The per-op model (each node through the core roofline) prices the nodes as well as the analytic
// one: a conv costs more on the slower device, a concat costs its bytes, and every planner's plan
// is evaluated like the simulation says.
TEST(EdgeCloud, PerOpCostModelPricesNodesToo) {
  std::mt19937 rng(13);
  const Graph g = branch_set(4, rng);
  const RooflineCostModel roofline;
  const PerOpCostModel cost(g, roofline);
  const EdgeCloudProblem pb = make_edge_cloud_problem(g, two_devices(1e9, 4e9, 1e5, 0.01), cost);
  for (int v = 0; v < pb.nodes(); ++v) {
    EXPECT_GT(pb.edge_s[static_cast<size_t>(v)], 0) << g.node(v).name;
    EXPECT_NEAR(pb.edge_s[static_cast<size_t>(v)], 4 * pb.cloud_s[static_cast<size_t>(v)],
                1e-12 * pb.edge_s[static_cast<size_t>(v)])
        << g.node(v).name;
  }
  for (const std::string& s : edge_cloud_system_names()) {
    const EdgeCloudPlan p = plan_edge_cloud(s, pb);
    EXPECT_NEAR(simulate_schedule(p, pb).makespan_s, p.metrics.makespan_s, 1e-12) << s;
  }
}

TEST(EdgeCloud, BadInput) {
  std::mt19937 rng(5);
  const Graph g = branch_set(2, rng);
  const AnalyticCostModel cost;
  ClusterSpec three = two_devices(1e9, 4e9, 1e5, 0.01);
  three.devices.push_back(device("other", 1e9));
  auto message = [&](const ClusterSpec& cl) {
    try {
      make_edge_cloud_problem(g, cl, cost);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(three).find("exactly two devices"), std::string::npos) << message(three);
  const ClusterSpec zero = two_devices(1e9, 4e9, 0, 0.01);
  EXPECT_NE(message(zero).find("bandwidth must be positive"), std::string::npos) << message(zero);
  ClusterSpec unlinked = two_devices(1e9, 4e9, 1e5, 0.01);
  unlinked.links.clear();
  EXPECT_NE(message(unlinked).find("no link"), std::string::npos) << message(unlinked);
  const EdgeCloudProblem pb = make_edge_cloud_problem(g, two_devices(1e9, 4e9, 1e5, 0.01), cost);
  EXPECT_THROW(plan_edge_cloud("nope", pb), InvalidArgument);
  // The last node on the edge, its input in the cloud: data would flow back.
  std::vector<bool> back(static_cast<size_t>(pb.nodes()), false);
  back.back() = true;
  EXPECT_THROW(plan_from_edge_set("back", back, pb), InvalidArgument);
  EdgeCloudPlan twice = plan_cloud_only(pb);
  twice.uploads.push_back(pb.input);
  EXPECT_THROW(evaluate(twice, pb), InvalidArgument);
  EXPECT_THROW(decc_candidate(pb, 0, {0}), InvalidArgument);  // two branches, one split
}

}  // namespace
}  // namespace tandem::cnn::edge
