// SPDX-License-Identifier: Apache-2.0
// The edge planners (tandem/cnn/edge): every tile of every system's plan, run alone with
// run_region from only its required input and stitched, equals the single-device run (bit-exact
// for row bands, kRectTol for EFL's 2-D tiles) on small graphs with stride 2, dilation,
// asymmetric padding, non-square kernels, depthwise, add and concat branches; PICO's DP against
// exhaustive search; bad inputs.
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "cnn_test_util.h"
#include "region_check.h"
#include "tandem/cnn/edge/measure.h"
#include "tandem/cnn/edge/planners.h"
#include "tandem/cnn/edge/simulate.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/onnx_import.h"
#include "tandem/core/error.h"
#include "tandem/sched/pipeline.h"

namespace tandem::cnn::edge {
namespace {

using cnn::testing::bit_equal;
using cnn::testing::crop_tensor;
using cnn::testing::random_tensor;
using cnn::testing::scaled_max_error;

// Builds small graphs op by op (channels tracked here; shapes inferred at the end).
class Net {
 public:
  explicit Net(const Shape& in) : c_{in[1]} {
    x_ = g_.add_tensor("input", in);
    g_.add_input(x_);
  }
  int input() const { return x_; }
  int conv(int x, int64_t cout, int kh, int kw, int s, int d, std::array<int, 4> pads,
           int groups = 1) {
    Node n;
    n.op = OpKind::kConv;
    n.groups = groups;
    n.window = {.kh = kh, .kw = kw, .sh = s, .sw = s, .dh = d, .dw = d};
    n.window.pt = pads[0];
    n.window.pl = pads[1];
    n.window.pb = pads[2];
    n.window.pr = pads[3];
    n.weight = random_tensor({cout, channels(x) / groups, kh, kw}, ++seed_, 0.3f);
    n.bias = random_tensor({cout}, ++seed_, 0.1f);
    n.act.kind = ActKind::kRelu;
    return add(std::move(n), {x}, cout);
  }
  int maxpool(int x, int k, int s, int pad) {
    Node n;
    n.op = OpKind::kMaxPool;
    n.window = {.kh = k, .kw = k, .sh = s, .sw = s, .pt = pad, .pl = pad, .pb = pad, .pr = pad};
    return add(std::move(n), {x}, channels(x));
  }
  int sum(int a, int b) {
    Node n;
    n.op = OpKind::kAdd;
    return add(std::move(n), {a, b}, channels(a));
  }
  int concat(const std::vector<int>& xs) {
    Node n;
    n.op = OpKind::kConcat;
    int64_t c = 0;
    for (int x : xs) c += channels(x);
    return add(std::move(n), xs, c);
  }
  Graph finish(int out) {
    g_.add_output(out);
    g_.infer_shapes();
    return std::move(g_);
  }

 private:
  int64_t channels(int t) const { return c_.at(static_cast<size_t>(t)); }
  int add(Node n, std::vector<int> ins, int64_t cout) {
    n.name = "n" + std::to_string(g_.nodes().size());
    const int y = g_.add_tensor(n.name + ".y");
    c_.resize(static_cast<size_t>(y) + 1);
    c_[static_cast<size_t>(y)] = cout;
    n.inputs = std::move(ins);
    n.outputs = {y};
    g_.add_node(std::move(n));
    return y;
  }
  Graph g_;
  int x_ = 0;
  std::vector<int64_t> c_;
  uint32_t seed_ = 7;
};

// Stride 2 with asymmetric padding and a 3x2 kernel, dilated depthwise, a residual add, an
// inception-like concat with 1x3 / 3x1 kernels and a pool branch.
Graph branchy_graph() {
  Net n({1, 3, 45, 37});
  int x = n.conv(n.input(), 8, 3, 3, 1, 1, {1, 1, 1, 1});
  x = n.conv(x, 8, 3, 2, 2, 1, {1, 0, 0, 1});
  x = n.conv(x, 8, 3, 3, 1, 2, {2, 2, 2, 2}, 8);
  x = n.sum(n.conv(x, 8, 1, 1, 1, 1, {0, 0, 0, 0}), n.conv(x, 8, 3, 3, 1, 1, {1, 1, 1, 1}));
  const int b1 = n.conv(x, 4, 1, 1, 1, 1, {0, 0, 0, 0});
  const int b2 = n.conv(n.conv(x, 4, 1, 3, 1, 1, {0, 1, 0, 1}), 4, 3, 1, 1, 1, {1, 0, 1, 0});
  const int b3 = n.maxpool(x, 3, 1, 1);
  x = n.concat({b1, b2, b3});
  x = n.maxpool(x, 2, 2, 0);
  x = n.conv(x, 6, 3, 3, 1, 1, {1, 0, 1, 2});
  return n.finish(x);
}

// A plain chain of convs for the DP checks.
Graph chain_graph(int layers) {
  Net n({1, 4, 40, 40});
  int x = n.input();
  for (int i = 0; i < layers; ++i) x = n.conv(x, 4 + 2 * i, 3, 3, i % 2 ? 2 : 1, 1, {1, 1, 1, 1});
  return n.finish(x);
}

ClusterSpec cluster(int n, double link_bytes_per_s, double flops = 2e8) {
  ClusterSpec c;
  const double speed[] = {1.0, 0.8, 0.5, 0.5, 0.3, 0.3};
  for (int i = 0; i < n; ++i) {
    DeviceProfile d;
    d.name = "d" + std::to_string(i);
    d.speed_factor = speed[i % 6];
    d.peak_flops = flops * d.speed_factor;  // the device's own capacity
    d.mem_bandwidth_bytes_per_s = 1e10;
    d.mem_bytes = 1e9;
    c.devices.push_back(d);
  }
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      LinkProfile l;
      l.from = c.devices[static_cast<size_t>(i)].name;
      l.to = c.devices[static_cast<size_t>(j)].name;
      l.bandwidth_bytes_per_s = link_bytes_per_s;
      l.latency_s = 1e-4;
      c.links.push_back(l);
    }
  return c;
}

// Runs every share of every stage from only its required input (cut from the previous stage's
// stitched output), stitches, and compares with the whole-graph run. Also checks that the
// shares of a stage tile its output exactly once.
// The branchy graph, its pieces and the analytic cost model (the chain points at the graph).
struct Branchy {
  Graph g = branchy_graph();
  Chain chain = linearise(g);
  AnalyticCostModel cost;
  EdgeProblem problem(const ClusterSpec& c) const { return make_problem(chain, c, cost); }
};

// Counts of what the checks covered: stages split over several devices, 2-D tiles.
struct Covered {
  int split_stages = 0, rect_tiles = 0;
};

void expect_plan_exact(const std::vector<Tensor>& all, const Chain& chain, const EdgePlan& plan,
                       Covered& covered) {
  const Graph& g = chain.graph();
  Executor ex(g, {.winograd = false});
  Tensor carried = all[static_cast<size_t>(g.inputs()[0])];
  for (const Stage& s : plan.stages) {
    const int in = chain.piece(s.first).in_tensor, out = chain.piece(s.last).out_tensor;
    const Tensor& want = all[static_cast<size_t>(out)];
    const std::vector<int> nodes = chain.segment_nodes(s.first, s.last);
    const Region full = chain.out_region(s.last);
    Tensor stitched = Tensor::zeros(want.shape(), DType::kF32);
    std::vector<int> cover(static_cast<size_t>(full.rows() * full.cols()), 0);
    bool rect = false;
    for (const DeviceShare& sh : s.shares) {
      ASSERT_FALSE(sh.channels()) << "channel shares are not in these plans";
      const Region need = required_regions(g, nodes, {{out, sh.out}})[static_cast<size_t>(in)];
      std::map<int, Tile> inputs{{in, Tile{crop_tensor(carried, need), need}}};
      const Tile tile = ex.run_region(nodes, inputs, {{out, sh.out}}).at(out);
      ASSERT_EQ(tile.region, sh.out);
      stitched.slice(2, sh.out.h0, sh.out.h1).slice(3, sh.out.w0, sh.out.w1).copy_from(tile.data);
      const bool r = sh.out.w0 != full.w0 || sh.out.w1 != full.w1;
      covered.rect_tiles += r;
      rect = rect || r;
      for (int64_t h = sh.out.h0; h < sh.out.h1; ++h)
        for (int64_t w = sh.out.w0; w < sh.out.w1; ++w)
          ++cover[static_cast<size_t>(h * full.cols() + w)];
    }
    covered.split_stages += s.shares.size() > 1;
    for (int c : cover) ASSERT_EQ(c, 1) << plan.system << ": shares must tile the output once";
    if (rect)
      EXPECT_LE(scaled_max_error(stitched, want), cnn::testing::kRectTol) << plan.system;
    else
      EXPECT_TRUE(bit_equal(stitched, want))
          << plan.system << " stage " << s.first << "-" << s.last;
    carried = stitched;
  }
}

TEST(CnnEdge, PiecesFollowTheCutTensors) {
  const Branchy b;
  const Graph& g = b.g;
  const Chain& c = b.chain;
  // conv, conv, dwconv, residual block, inception block, pool, conv
  ASSERT_EQ(c.size(), 7);
  EXPECT_EQ(c.piece(3).nodes.size(), 3u);  // two convs and the add
  EXPECT_EQ(c.piece(4).nodes.size(), 5u);  // 1x1, 1x3 -> 3x1, pool, concat
  EXPECT_DOUBLE_EQ(c.total_flops(), static_cast<double>(g.total_flops()));
  // Depthwise FLOPs: groups divided out (2 * 3*3 * 1 * 8 per output pixel).
  const Shape& y = c.piece(2).out_shape;
  EXPECT_DOUBLE_EQ(c.piece(2).flops, 2.0 * 9 * 8 * y[2] * y[3]);
  // A band's work counts its halo: two halves of a fused segment exceed the whole.
  const Region full = c.out_region(4);
  const double top = c.tile_work(0, 4, {0, full.h1 / 2, 0, full.w1}).flops;
  const double bottom = c.tile_work(0, 4, {full.h1 / 2, full.h1, 0, full.w1}).flops;
  EXPECT_GT(top + bottom, c.tile_work(0, 4, full).flops);
}

TEST(CnnEdge, EveryTileOfEveryPlanIsExact) {
  const Graph g0 = branchy_graph();
  Executor ref(g0, {.keep_all = true, .winograd = false});
  const Tensor x = random_tensor(g0.tensor(g0.inputs()[0]).shape, 3);
  ref.run({x});
  const Graph& g = ref.graph();
  const Chain chain = linearise(g);
  const AnalyticCostModel cost;
  // Compute-bound (fast link: wide stages) and link-bound clusters of 2, 4 and 6 devices.
  Covered covered;
  for (double link : {1e10, 2e6})
    for (int n : {2, 4, 6}) {
      const ClusterSpec cl = cluster(n, link);
      const EdgeProblem pb = make_problem(chain, cl, cost);
      for (const std::string& sys : system_names()) {
        SCOPED_TRACE(sys + " on " + std::to_string(n) + " devices, link " + std::to_string(link));
        const EdgePlan plan = plan_system(sys, pb, {.lambda = 0.5});
        expect_plan_exact(ref.tensors(), chain, plan, covered);
        EXPECT_GT(plan.metrics.period_s, 0);
        EXPECT_GE(plan.metrics.latency_s, plan.metrics.period_s * (1 - 1e-12));
        EXPECT_GE(plan.metrics.redundancy, -1e-12);
        // The runtime's plan type reads it back (distinct devices per group, cnn.tiles stages).
        const auto pp = sched::PipelinePlan::from_json(
            to_pipeline_plan(plan, pb, "branchy.onnx", "test").to_json(), sys);
        ASSERT_EQ(pp.stages.size(), plan.stages.size());
        EXPECT_EQ(pp.stages[0].kind(), "cnn.tiles");
        EXPECT_DOUBLE_EQ(pp.predicted.period_s, plan.metrics.period_s);
      }
      // PICO with the mapping refinement: exact, and never behind the paper's greedy mapping.
      const EdgePlan refined = plan_pico(pb, {.allow_idle_devices = true, .refine_mapping = true});
      expect_plan_exact(ref.tensors(), chain, refined, covered);
      EXPECT_LE(refined.metrics.period_s,
                plan_pico(pb, {.allow_idle_devices = true}).metrics.period_s * (1 + 1e-12));
      // DeepThings' own way: a fixed 3x3 grid over the first 5 pieces.
      const PlanOptions fixed{.efl_rows = 3, .efl_cols = 3, .efl_fused = 5};
      expect_plan_exact(ref.tensors(), chain, plan_efl(pb, fixed), covered);
    }
  EXPECT_GT(covered.split_stages, 10);
  EXPECT_GT(covered.rect_tiles, 10);
}

TEST(CnnEdge, PicoUsesSeveralDevicesPerStageWhenComputeBound) {
  const Branchy b;
  const Chain& chain = b.chain;
  const AnalyticCostModel& cost = b.cost;
  const EdgeProblem pb = b.problem(cluster(4, 1e10));
  const EdgePlan plan = plan_pico(pb);
  size_t widest = 0;
  for (const Stage& s : plan.stages) widest = std::max(widest, s.shares.size());
  EXPECT_GT(widest, 1u);
  // The re-split balances compute: every device of a multi-device stage within 40% of the
  // stage's slowest (row granularity on a 23-row map).
  for (const Stage& s : plan.stages) {
    if (s.shares.size() < 2) continue;
    std::vector<double> t;
    for (const DeviceShare& sh : s.shares)
      t.push_back(cost.compute_s(chain.tile_work(s.first, s.last, sh.out),
                                 pb.devices[static_cast<size_t>(pb.device_index(sh.device))]));
    EXPECT_GT(*std::min_element(t.begin(), t.end()), 0.6 * *std::max_element(t.begin(), t.end()));
  }
}

// Every way to cut pieces 0..L-1 into contiguous stages and give them q_s >= 1 of n homogeneous
// devices (Σ q_s = n): the least period, and among those the least latency, under `cap`.
std::pair<double, double> exhaustive(const EdgeProblem& pb, int n, double capacity, double cap) {
  const int L = pb.chain->size();
  std::pair<double, double> best{std::numeric_limits<double>::infinity(), 0};
  std::function<void(int, int, double, double)> go = [&](int from, int left, double per,
                                                         double lat) {
    if (from == L) {
      if (left == 0 && lat <= cap && per < best.first) best = {per, lat};
      return;
    }
    for (int to = from; to < L; ++to)
      for (int q = 1; q <= left; ++q) {
        const double t = homogeneous_stage_s(pb, from, to, q, capacity);
        go(to + 1, left - q, std::max(per, t), lat + t);
      }
  };
  go(0, n, 0, 0);
  return best;
}

TEST(CnnEdge, PicoDpMatchesExhaustiveSearch) {
  const AnalyticCostModel cost;
  for (int layers : {3, 4, 5}) {
    const Graph g = chain_graph(layers);
    const Chain chain = linearise(g);
    ASSERT_EQ(chain.size(), layers);
    for (int n : {2, 3, 4})
      for (double link : {1e9, 2e6}) {
        const ClusterSpec cl = cluster(n, link, 1e8);
        const EdgeProblem pb = make_problem(chain, cl, cost);
        const double cap_flops = 1e8 * 0.6;  // any homogeneous capacity
        SCOPED_TRACE(std::to_string(layers) + " layers, " + std::to_string(n) + " devices");
        const auto want = exhaustive(pb, n, cap_flops, std::numeric_limits<double>::infinity());
        const HomogeneousPlan got = pico_dp(pb, n, cap_flops);
        EXPECT_NEAR(got.period_s, want.first, 1e-12 * want.first);
        // The traced-back stages reproduce the DP's period and latency and use n devices.
        double per = 0, lat = 0;
        int used = 0;
        for (const HomogeneousStage& s : got.stages) {
          const double t = homogeneous_stage_s(pb, s.first, s.last, s.q, cap_flops);
          per = std::max(per, t);
          lat += t;
          used += s.q;
        }
        EXPECT_EQ(used, n);
        EXPECT_NEAR(per, got.period_s, 1e-12 * per);
        EXPECT_NEAR(lat, got.latency_s, 1e-12 * lat);
        // Under a latency cap the DP's plan meets it and cannot beat the exhaustive optimum.
        const double cap = 0.5 * (got.latency_s + got.period_s);
        const auto capped = exhaustive(pb, n, cap_flops, cap);
        if (std::isinf(capped.first)) continue;
        try {
          const HomogeneousPlan c = pico_dp(pb, n, cap_flops, {.latency_cap_s = cap});
          EXPECT_LE(c.latency_s, cap);
          EXPECT_GE(c.period_s, capped.first * (1 - 1e-12));
        } catch (const Infeasible&) {
          // the DP keeps one latency per state (the paper's pruning), so it may miss a plan
        }
      }
  }
}

TEST(CnnEdge, ApicoPicksTheFusedPlanAtLightLoadOnlyWhenItIsFaster) {
  const Branchy b;
  const EdgeProblem pb = b.problem(cluster(4, 1e7));
  for (double lambda : {1e-3, 1.0, 50.0}) {
    const EdgePlan a = plan_apico(pb, {.lambda = lambda});
    const EdgePlan p = plan_pico(pb, {.lambda = lambda});
    const EdgePlan f = plan_ofl(pb, {.lambda = lambda});
    EXPECT_EQ(a.metrics.latency_at_lambda_s,
              std::min(p.metrics.latency_at_lambda_s, f.metrics.latency_at_lambda_s));
  }
  EXPECT_DOUBLE_EQ(md1_mean_latency_s(0.1, 0.3, 0), 0.4);
  EXPECT_DOUBLE_EQ(md1_mean_latency_s(0.1, 0.3, 5), 0.1 * 1.5 / (2 * 0.5) + 0.3);
  EXPECT_TRUE(std::isinf(md1_mean_latency_s(0.1, 0.3, 10)));
}

// The message of the tandem::Error `f` throws ("no error" when it returns).
std::string message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(CnnEdge, BadInputsNameTheFieldOrDevice) {
  const Branchy b;
  const Chain& chain = b.chain;
  const AnalyticCostModel& cost = b.cost;
  // Negative speed: the cluster reader names the JSON path, make_problem the device.
  nlohmann::json j = cluster(2, 1e7).to_json();
  j["devices"][1]["speed_factor"] = -0.5;
  EXPECT_NE(message([&] { ClusterSpec::from_json(j, "c.json"); }).find("devices[1].speed_factor"),
            std::string::npos);
  ClusterSpec neg = cluster(2, 1e7);
  neg.devices[1].speed_factor = -0.5;
  EXPECT_NE(message([&] { make_problem(chain, neg, cost); }).find("'d1': speed_factor"),
            std::string::npos);
  // A plan naming a device the cluster does not have.
  const ClusterSpec cl = cluster(3, 1e7);
  const EdgeProblem pb = make_problem(chain, cl, cost);
  EdgePlan ghost = plan_single(pb);
  ghost.stages[0].shares[0].device = "ghost";
  EXPECT_NE(message([&] { evaluate(ghost, pb); }).find("'ghost'"), std::string::npos);
  // A device too small for the weights of the segment it is given.
  ClusterSpec small = cluster(3, 1e10);
  small.devices[2].mem_bytes = 1000;
  const EdgeProblem spb = make_problem(chain, small, cost);
  EXPECT_NE(message([&] { plan_pico(spb); }).find("device 'd2' needs"), std::string::npos);
  EXPECT_NO_THROW(plan_pipeedge(spb));  // PipeEdge plans around it
  for (DeviceProfile& d : small.devices) d.mem_bytes = 1000;
  const EdgeProblem none = make_problem(chain, small, cost);
  EXPECT_NE(message([&] { plan_single(none); }).find("no device can hold"), std::string::npos);
  EXPECT_NE(message([&] { plan_system("magic", pb); }).find("unknown system 'magic'"),
            std::string::npos);
}

// Profiled tables and replay (measure.h), without asserting any timing: the tables' shape, the
// interpolation arithmetic on a hand-made profile, the speed factor applied once, replay's
// structure against the prediction's, and malformed profiles named.
TEST(CnnEdge, ProfiledTablesInterpolateAndReplayMirrorsThePlan) {
  const Branchy b;
  const Chain& chain = b.chain;
  TileBench bench(chain, 1);
  const PieceProfile measured = profile_pieces(bench);
  ASSERT_EQ(static_cast<int>(measured.pieces.size()), chain.size());
  for (const PieceTimes& t : measured.pieces) {
    EXPECT_EQ(t.fraction.back(), 1.0);
    for (double s : t.host_s) EXPECT_GT(s, 0);
  }
  const PieceProfile again = PieceProfile::from_json(measured.to_json(), chain.size());
  EXPECT_EQ(again.pieces[0].host_s, measured.pieces[0].host_s);

  // Every piece: 2 ms for its top half, 3 ms for the whole map (a fixed 1 ms per call).
  PieceProfile made;
  for (int i = 0; i < chain.size(); ++i) made.pieces.push_back({{0.5, 1.0}, {2e-3, 3e-3}});
  const ProfiledCostModel cost(chain, made);
  const int last = chain.size() - 1;
  EXPECT_NEAR(cost.host_s(chain.tile_work(last, last, chain.out_region(last))), 3e-3, 1e-12);
  DeviceProfile slow;
  slow.name = "slow";
  slow.speed_factor = 0.25;
  EXPECT_NEAR(cost.compute_s(chain.tile_work(last, last, chain.out_region(last)), slow), 4 * 3e-3,
              1e-12);
  // About a quarter of the first piece's rows: below the table, on the line through its points
  // (2 ms + 2 ms per unit of fraction above one half).
  const Region full0 = chain.out_region(0);
  const Region quarter{0, full0.rows() / 4, full0.w0, full0.w1};
  const double f = static_cast<double>(quarter.rows()) / static_cast<double>(full0.rows());
  EXPECT_NEAR(cost.host_s(chain.tile_work(0, 0, quarter)), 2e-3 + 2e-3 * (f - 0.5), 1e-12);

  const EdgeProblem pb = make_problem(chain, cluster(3, 1e8), cost);
  const EdgePlan plan = plan_pico(pb);
  const Metrics m = replay(plan, pb, bench);
  ASSERT_EQ(m.stages.size(), plan.metrics.stages.size());
  EXPECT_GT(m.period_s, 0);
  EXPECT_DOUBLE_EQ(m.bytes_moved, plan.metrics.bytes_moved);  // same shares, same transfers
  EXPECT_DOUBLE_EQ(m.redundancy, plan.metrics.redundancy);

  nlohmann::json bad = made.to_json();
  EXPECT_NE(message([&] { PieceProfile::from_json(bad, chain.size() + 1); }).find("another model"),
            std::string::npos);
  bad["pieces"][2]["fraction"] = {1.0, 0.5};
  EXPECT_NE(message([&] { PieceProfile::from_json(bad, chain.size()); }).find("piece 2"),
            std::string::npos);
  const Branchy other;
  TileBench foreign(other.chain, 1);
  EXPECT_NE(message([&] { replay(plan, pb, foreign); }).find("another chain"), std::string::npos);
}

// The runtime simulator on a two-stage plan with one device per stage: frames stream at the
// slower stage's pace and one frame's latency is both stages plus the hand-over between them.
TEST(CnnEdge, RuntimeSimulatorStreamsAtTheSlowerStage) {
  const Branchy b;
  const Chain& chain = b.chain;
  const EdgeProblem pb = b.problem(cluster(2, 1e9));
  const int last = chain.size() - 1;
  EdgePlan plan;
  plan.stages = {Stage{0, 1, {DeviceShare{"d0", chain.out_region(1)}}},
                 Stage{2, last, {DeviceShare{"d1", chain.out_region(last)}}}};
  const double a = b.cost.compute_s(chain.tile_work(0, 1, chain.out_region(1)), pb.devices[0]);
  const double c =
      b.cost.compute_s(chain.tile_work(2, last, chain.out_region(last)), pb.devices[1]);
  const double hand_over = pb.transfer_s(chain.piece(1).out_bytes);
  for (bool shared : {true, false}) {
    const RuntimeSim sim = simulate_runtime(plan, pb, {.frames = 6, .shared_medium = shared});
    EXPECT_NEAR(sim.latency_s, a + hand_over + c, 1e-12);
    EXPECT_NEAR(sim.period_s, std::max({a, hand_over, c}), 1e-12);
  }
  EXPECT_NE(message([&] { simulate_runtime(plan, pb, {.frames = 1}); }).find("frames"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::cnn::edge
