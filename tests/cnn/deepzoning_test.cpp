// SPDX-License-Identifier: Apache-2.0
// DeepZoning's planner (tandem/cnn/edge/awp.h, planners.h): the AWP LPs on CLP against the
// water-filling closed form (1-D) and a grid search (2-D), rounding, Infeasible inputs named; the
// zone DP against every way to merge the pieces, its plan evaluating to the DP's latency, shares
// covering each output element once; channel mode where the map is small and channels many;
// CoEdge and the throughput variant on the same problem.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "cnn_test_util.h"
#include "tandem/cnn/edge/awp.h"
#include "tandem/cnn/edge/planners.h"
#include "tandem/core/error.h"

namespace tandem::cnn::edge {
namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(DeepZoningAwp, ClpOptimumEqualsWaterFilling) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> slope(0.05, 10), icpt(0, 2), coin(0, 1);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial % 8;
    std::vector<AwpDevice> d;
    for (int k = 0; k < n; ++k)
      d.push_back({cat("d", k), slope(rng), coin(rng) < 0.2 ? 0.0 : icpt(rng)});
    const AwpSplit wf = awp_water_fill(d), lp = awp_lp_1d(d);
    SCOPED_TRACE(cat("trial ", trial));
    EXPECT_NEAR(wf.time_s, lp.time_s, 1e-6 * std::max(1.0, wf.time_s));
    for (const AwpSplit* s : {&wf, &lp}) {
      double sum = 0;
      for (int k = 0; k < n; ++k) {
        const double x = s->share[static_cast<size_t>(k)];
        EXPECT_GE(x, 0);
        sum += x;
        // An active device meets T; an idle one adds no intercept (its own is >= T).
        if (x > 1e-9)
          EXPECT_LE(d[static_cast<size_t>(k)].slope_s * x + d[static_cast<size_t>(k)].intercept_s,
                    s->time_s * (1 + 1e-6) + 1e-9);
      }
      EXPECT_NEAR(sum, 1.0, 1e-9);
    }
  }
}

// The grid LP by brute force for 2 row groups: for a row split r, each group's channel split is
// exact (water-filling with every device's constraint kept: T_g = max(WF, max intercept)); the
// optimum over r by a fine grid, then ternary search (the LP's value is convex in r).
double grid_brute_force(const std::vector<AwpGridDevice>& d) {
  auto group_t = [&](int g, double r) {
    std::vector<AwpDevice> m;
    double floor_t = 0;
    for (const AwpGridDevice& x : d)
      if (x.group == g) {
        const double b = x.row_slope_s * r + x.intercept_s;
        floor_t = std::max(floor_t, b);
        if (r > 0) m.push_back({x.name, x.cell_slope_s * r, b});
      }
    return m.empty() ? floor_t : std::max(floor_t, awp_water_fill(m).time_s);
  };
  auto f = [&](double r) { return std::max(group_t(0, r), group_t(1, 1 - r)); };
  double best_r = 0, best = f(0);
  for (int i = 1; i <= 2000; ++i)
    if (f(i / 2000.0) < best) {
      best = f(i / 2000.0);
      best_r = i / 2000.0;
    }
  double lo = std::max(0.0, best_r - 1 / 2000.0), hi = std::min(1.0, best_r + 1 / 2000.0);
  for (int it = 0; it < 200; ++it) {
    const double a = lo + (hi - lo) / 3, b = hi - (hi - lo) / 3;
    (f(a) < f(b) ? hi : lo) = f(a) < f(b) ? b : a;
  }
  return std::min(best, f(0.5 * (lo + hi)));
}

TEST(DeepZoningAwp, ClpGridOptimumEqualsBruteForce) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> slope(0.1, 5), icpt(0, 0.5);
  for (int trial = 0; trial < 60; ++trial) {
    const int per_group = 1 + trial % 3;
    std::vector<AwpGridDevice> d;
    for (int k = 0; k < 2 * per_group; ++k)
      d.push_back({cat("d", k), k % 2, slope(rng), slope(rng), icpt(rng)});
    const AwpGridSplit s = awp_lp_grid(2, d);
    SCOPED_TRACE(cat("trial ", trial));
    EXPECT_NEAR(s.time_s, grid_brute_force(d), 1e-6 * std::max(1.0, s.time_s));
    EXPECT_NEAR(s.rows[0] + s.rows[1], 1.0, 1e-9);
    for (int g = 0; g < 2; ++g) {
      double cells = 0;
      for (size_t k = 0; k < d.size(); ++k)
        if (d[k].group == g) cells += s.cells[k];
      EXPECT_NEAR(cells, s.rows[static_cast<size_t>(g)], 1e-9);
    }
  }
}

TEST(DeepZoningAwp, RoundingSumsExactly) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> w(0, 1);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + trial % 9;
    const int64_t total = 1 + static_cast<int64_t>(trial * 7 % 300);
    std::vector<double> share;
    double sum = 0;
    for (int k = 0; k < n; ++k) {
      share.push_back(trial % 4 == 0 && k == 0 ? 0.0 : w(rng));
      sum += share.back();
    }
    if (sum == 0) continue;
    for (double& s : share) s /= sum;
    const std::vector<int64_t> part = round_shares(share, total);
    int64_t got = 0;
    for (size_t k = 0; k < part.size(); ++k) {
      got += part[k];
      const double exact = share[k] * static_cast<double>(total);
      EXPECT_GE(static_cast<double>(part[k]), std::floor(exact) - 1e-9);
      EXPECT_LE(static_cast<double>(part[k]), std::ceil(exact) + 1e-9);
    }
    EXPECT_EQ(got, total);
  }
}

TEST(DeepZoningAwp, InfeasibleInputsNameTheDevice) {
  EXPECT_NE(message_of([] {
              awp_water_fill({{"fast", 1, 0}, {"dead", 0, 0}});
            }).find("'dead'"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              awp_lp_1d({{"ok", 1, 0}, {"inf", std::numeric_limits<double>::infinity(), 0}});
            }).find("device 'inf' cannot meet any budget"),
            std::string::npos);
  // A device slower than the whole budget gets no share; alone, it is named.
  const AwpSplit s = awp_water_fill({{"fast", 1, 0.01}, {"slow", 1, 5}}, 2.0);
  EXPECT_EQ(s.share[1], 0);
  const std::string m = message_of([] { awp_lp_1d({{"slow", 1, 5}}, 2.0); });
  EXPECT_NE(m.find("slower than the whole budget: 'slow'"), std::string::npos) << m;
  EXPECT_NE(message_of([] {
              awp_lp_grid(2, {{"a", 0, 1, 1, 0}, {"b", 0, 1, 1, 0}});
            }).find("row group 1 has no device"),
            std::string::npos);
}

// 3x3 convs (pad 1, ReLU fused) with the given output channels and strides; a layer with `skip`
// adds the input of the layer before it (a residual block of two convs: one piece).
struct Layer {
  int64_t cout = 8;
  int stride = 1;
  bool skip = false;
  int groups = 1;
};
Graph conv_chain(const Shape& in, const std::vector<Layer>& layers) {
  Graph g;
  int x = g.add_tensor("input", in), before = x;
  g.add_input(x);
  int64_t c = in[1];
  uint32_t seed = 1;
  for (size_t i = 0; i < layers.size(); ++i) {
    Node n;
    n.op = OpKind::kConv;
    n.name = cat("conv", i);
    const Layer& l = layers[i];
    n.window = {
        .kh = 3, .kw = 3, .sh = l.stride, .sw = l.stride, .pt = 1, .pl = 1, .pb = 1, .pr = 1};
    n.groups = l.groups;
    n.weight = cnn::testing::random_tensor({l.cout, c / l.groups, 3, 3}, ++seed, 0.1f);
    n.act.kind = ActKind::kRelu;
    n.inputs = {x};
    if (l.skip) n.inputs.push_back(before);
    before = x;
    x = g.add_tensor(n.name + ".y");
    n.outputs = {x};
    g.add_node(std::move(n));
    c = l.cout;
  }
  g.add_output(x);
  g.infer_shapes();
  return g;
}

ClusterSpec devices(const std::vector<double>& speed, double link_bytes_per_s) {
  ClusterSpec c;
  for (size_t i = 0; i < speed.size(); ++i) {
    DeviceProfile d;
    d.name = cat("d", i);
    d.speed_factor = speed[i];
    d.peak_flops = 1e9 * speed[i];
    d.mem_bandwidth_bytes_per_s = 1e10;
    d.mem_bytes = 1e9;
    c.devices.push_back(d);
  }
  for (size_t i = 1; i < speed.size(); ++i)
    c.links.push_back({.from = c.devices[0].name,
                       .to = c.devices[i].name,
                       .bandwidth_bytes_per_s = link_bytes_per_s,
                       .latency_s = 1e-4});
  return c;
}

// Every (channel, row, column) of every stage's output is computed by exactly one share.
void expect_cover_once(const EdgePlan& plan, const Chain& chain) {
  for (const Stage& s : plan.stages) {
    const Shape& y = chain.piece(s.last).out_shape;
    if (y.rank() != 4) continue;
    std::vector<int> cover(static_cast<size_t>(y[1] * y[2] * y[3]), 0);
    for (const DeviceShare& sh : s.shares) {
      const int64_t c0 = sh.channels() ? sh.c0 : 0, c1 = sh.channels() ? sh.c1 : y[1];
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t h = sh.out.h0; h < sh.out.h1; ++h)
          for (int64_t w = sh.out.w0; w < sh.out.w1; ++w)
            ++cover[static_cast<size_t>((c * y[2] + h) * y[3] + w)];
    }
    for (int n : cover) ASSERT_EQ(n, 1) << plan.system << " stage " << s.first << "-" << s.last;
  }
}

TEST(DeepZoningPlan, DpMatchesEveryMergeAndItsPlanEvaluatesToIt) {
  // conv, residual block, strided conv, residual block, strided conv: 5 pieces.
  const Graph g = conv_chain(
      {1, 4, 32, 24}, {{8, 1}, {8, 1}, {8, 1, true}, {16, 2}, {16, 1}, {16, 1, true}, {32, 2}});
  const Chain chain = linearise(g);
  const int K = chain.size();
  ASSERT_EQ(K, 5);
  const AnalyticCostModel cost;
  for (double link : {1e10, 2e6}) {
    const ClusterSpec cl = devices({1.0, 0.7, 0.5, 0.3}, link);
    const EdgeProblem pb = make_problem(chain, cl, cost);
    // Every way to cut pieces 0..K-1 into consecutive merged zones.
    double want = std::numeric_limits<double>::infinity();
    for (uint32_t cuts = 0; cuts < (1u << (K - 1)); ++cuts) {
      double t = 0;
      for (int first = 0, k = 0; k < K; ++k)
        if (k == K - 1 || (cuts >> k & 1u)) {
          t += deepzoning_zone_s(pb, first, k);
          first = k + 1;
        }
      want = std::min(want, t);
    }
    const EdgePlan plan = plan_deepzoning(pb);
    const double dp = plan.notes.at("dp_latency_s").get<double>();
    EXPECT_NEAR(dp, want, 1e-12 * want);
    EXPECT_NEAR(plan.metrics.latency_s, dp, 1e-9 * dp);
    EXPECT_EQ(plan.notes.at("zones").size(), plan.stages.size());
    expect_cover_once(plan, chain);
    // Never behind its own candidates: one device, CoEdge's per-layer rows.
    EXPECT_LE(plan.metrics.latency_s, plan_single(pb).metrics.latency_s * (1 + 1e-9));
    EXPECT_LE(plan.metrics.latency_s, plan_coedge(pb).metrics.latency_s * (1 + 1e-9));
    const EdgePlan tp = plan_deepzoning_tp(pb);
    EXPECT_TRUE(tp.pipelined);
    expect_cover_once(tp, chain);
    expect_cover_once(plan_coedge(pb), chain);
  }
}

TEST(DeepZoningPlan, ChannelModeForASmallMapWithManyChannels) {
  // An early 64x64 map with 8 channels, then 2x2 maps with 256 channels: 3 equal devices and a
  // fast link. Two rows cannot go to three devices; channels can.
  const Graph g = conv_chain({1, 8, 64, 64}, {{8}, {64, 2}, {128, 4}, {256, 4}, {256}});
  const Chain chain = linearise(g);
  ASSERT_EQ(chain.size(), 5);
  ASSERT_EQ(chain.piece(4).out_shape[2], 2);
  const AnalyticCostModel cost;
  const ClusterSpec cl = devices({1.0, 1.0, 1.0}, 1e10);
  const EdgeProblem pb = make_problem(chain, cl, cost);
  const EdgePlan plan = plan_deepzoning(pb);
  expect_cover_once(plan, chain);
  const nlohmann::json& zones = plan.notes.at("zones");
  EXPECT_EQ(zones.front().at("mode"), "spatial") << zones.dump();
  EXPECT_EQ(zones.back().at("mode"), "channel") << zones.dump();
  EXPECT_EQ(plan.stages.back().shares.size(), 3u);
  for (const DeviceShare& sh : plan.stages.back().shares) {
    EXPECT_TRUE(sh.channels());
    EXPECT_EQ(sh.out, chain.out_region(4));  // the whole map, a range of channels
  }
  // The runtime plan carries the channel range beside the rows.
  const sched::PipelinePlan pp = to_pipeline_plan(plan, pb, "chain.onnx", "test");
  const nlohmann::json share = pp.stages.back().devices.at(0).share;
  EXPECT_TRUE(share.contains("channels") && share.contains("rows")) << share.dump();
  EXPECT_NE(format_table(plan, pb).find("channel"), std::string::npos);
  // A channel share's work: the last conv's FLOPs in proportion, the whole input received.
  const TileWork half = chain.tile_work(4, 4, chain.out_region(4), 0, 128);
  const TileWork all = chain.tile_work(4, 4, chain.out_region(4));
  EXPECT_DOUBLE_EQ(half.flops, all.flops / 2);
  EXPECT_DOUBLE_EQ(half.in_bytes, all.in_bytes);
  EXPECT_DOUBLE_EQ(half.out_bytes, all.out_bytes / 2);
}

TEST(DeepZoningPlan, ChannelSharesCarryTheRangeBackThroughTheLastPiece) {
  // conv, residual block (two convs + skip), depthwise conv: 3 pieces.
  const Graph g = conv_chain({1, 4, 12, 12}, {{8}, {8}, {8, 1, true}, {8, 1, false, 8}});
  const Chain c = linearise(g);
  ASSERT_EQ(c.size(), 3);
  auto node_flops = [&](int piece, size_t k) {
    return static_cast<double>(g.flops(c.piece(piece).nodes[k]));
  };
  const Region full = c.out_region(2);
  // Residual block, channels [0, 2) of 8: its first conv in full, the second (and the skip
  // operand) a quarter; the whole input is received.
  const TileWork block = c.tile_work(1, 1, full, 0, 2);
  EXPECT_DOUBLE_EQ(block.flops, node_flops(1, 0) + node_flops(1, 1) / 4);
  EXPECT_DOUBLE_EQ(block.in_bytes, c.tile_work(1, 1, full).in_bytes);
  // Depthwise alone: a quarter of everything, only its input channels received.
  const TileWork dw = c.tile_work(2, 2, full, 2, 4);
  EXPECT_DOUBLE_EQ(dw.flops, node_flops(2, 0) / 4);
  EXPECT_DOUBLE_EQ(dw.in_bytes, c.tile_work(2, 2, full).in_bytes / 4);
  // Several pieces: the earlier ones in full over their needed rows, the whole input received.
  const Region rows{3, 7, 0, full.w1};
  const TileWork seg = c.tile_work(0, 2, rows, 2, 4);
  const TileWork seg_all = c.tile_work(0, 2, rows);
  EXPECT_DOUBLE_EQ(seg.in_bytes, seg_all.in_bytes);
  EXPECT_NEAR(seg.flops, seg_all.flops - 0.75 * seg_all.nodes.back().flops, 1e-6 * seg.flops);
  EXPECT_DOUBLE_EQ(seg.out_bytes, seg_all.out_bytes / 4);
  // evaluate() prices such a share and rejects a range outside the channels.
  const AnalyticCostModel cost;
  const EdgeProblem pb = make_problem(c, devices({1.0, 0.5}, 1e8), cost);
  EdgePlan plan{.system = "hand", .pipelined = false};
  plan.stages.push_back({.first = 0,
                         .last = 2,
                         .shares = {{.device = "d0", .out = full, .c0 = 0, .c1 = 5},
                                    {.device = "d1", .out = full, .c0 = 5, .c1 = 8}}});
  evaluate(plan, pb);
  EXPECT_GT(plan.metrics.redundancy, 0);  // the first two pieces run on both devices
  plan.stages[0].shares[1].c1 = 9;
  EXPECT_NE(message_of([&] { evaluate(plan, pb); }).find("'d1': channels [5, 9)"),
            std::string::npos);
}

TEST(DeepZoningPlan, ZeroBandwidthIsInfeasibleNamingTheDevice) {
  const Graph g = conv_chain({1, 4, 16, 16}, {{8}, {8, 2}});
  const Chain chain = linearise(g);
  const AnalyticCostModel cost;
  EdgeProblem pb = make_problem(chain, devices({1.0, 0.5}, 1e7), cost);
  pb.medium.bandwidth_bytes_per_s = 0;
  const std::string m = message_of([&] { plan_deepzoning(pb); });
  EXPECT_NE(m.find("device 'd1'"), std::string::npos) << m;
}

}  // namespace
}  // namespace tandem::cnn::edge
