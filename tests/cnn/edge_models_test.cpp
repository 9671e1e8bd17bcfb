// SPDX-License-Identifier: Apache-2.0
// The edge planners on the paper's models and testbed (configs/clusters/pico-8.json, pico-4.json):
// every system plans every model, PICO's predicted period is at most that of LW, EFL, OFL and one
// device, and the plan's FLOPs add up. Models come from scripts/cnn/gen_models.py; a test skips
// with the command when its model is absent. No timings are asserted.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "cnn_test_util.h"
#include "region_check.h"
#include "tandem/cnn/edge/planners.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/onnx_import.h"
#include "tandem/sched/pipeline.h"

namespace tandem::cnn::edge {
namespace {

class EdgeModels : public ::testing::TestWithParam<const char*> {};

TEST_P(EdgeModels, PicoIsAheadOfTheOneStageBaselines) {
  const std::string name = GetParam();
  const std::filesystem::path model = cnn::testing::models_dir() / (name + ".onnx");
  if (!std::filesystem::exists(model))
    GTEST_SKIP() << model << " absent: python3 scripts/cnn/gen_models.py --out "
                 << cnn::testing::models_dir() << " --models " << name;
  const Graph g = import_onnx(model.string());
  const Chain chain = linearise(g);
  const AnalyticCostModel cost;
  for (const char* testbed : {"pico-8.json", "pico-4.json"}) {
    SCOPED_TRACE(name + " on " + testbed);
    const ClusterSpec cl = ClusterSpec::from_json_file(
        (std::filesystem::path(TANDEM_CLUSTERS_DIR) / testbed).string());
    const EdgeProblem pb = make_problem(chain, cl, cost);
    const EdgePlan pico = plan_pico(pb, {.lambda = 0.5});
    for (const char* sys : {"lw", "efl", "ofl", "single"}) {
      const EdgePlan other = plan_system(sys, pb, {.lambda = 0.5});
      EXPECT_LE(pico.metrics.period_s, other.metrics.period_s) << sys;
    }
    const EdgePlan pipeedge = plan_pipeedge(pb);  // reported, not ordered (see the report)
    EXPECT_GT(pipeedge.metrics.period_s, 0);
    double flops = 0;
    for (const DeviceMetrics& d : pico.metrics.devices) flops += d.flops;
    EXPECT_NEAR(flops / chain.useful_flops() - 1, pico.metrics.redundancy, 1e-9);
    EXPECT_GE(pico.metrics.redundancy, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Paper, EdgeModels,
                         ::testing::Values("vgg16", "yolov2", "resnet34", "inception_v3",
                                           "mobilenet_v2"));

// Runs `plan` on sched::Pipeline (local stages called directly, then over inproc://) for `frames`
// frames of `image` each and returns every output.
std::vector<Tensor> run_plan(const sched::PipelinePlan& plan, const ClusterSpec& cl,
                             const Tensor& image, uint64_t frames = 2) {
  std::vector<Tensor> outs;
  for (bool direct : {true, false}) {
    sched::PipelineOptions o;
    o.direct_local = direct;
    o.emulate_devices = o.emulate_links = false;
    sched::Pipeline pipe(sched::PipelinePlan::from_json(plan.to_json()), cl, {}, o);
    std::vector<sched::Request> reqs(frames);
    for (uint64_t id = 0; id < frames; ++id) {
      reqs[id].id = id;
      reqs[id].micros.push_back(sched::Packet{});
      reqs[id].micros[0].tensors = {image};
    }
    const sched::RunReport r = pipe.run(std::move(reqs));
    for (const auto& [id, out] : r.outputs) outs.push_back(out.at(0).tensors.at(0));
  }
  return outs;
}

// Edge plans on the pipeline runtime: each system's plan for ResNet-18 on the 4-device testbed,
// as the runtime's PipelinePlan of cnn.tiles stages (group stages split, run on their devices
// and stitched), run by sched::Pipeline with local stages called directly and over inproc://,
// equals the single-device run (row bands bit for bit, EFL's 2-D tiles within the tolerance; LW's
// fully connected step split by output features, bit for bit).
TEST(EdgeRuntime, PlansRunOnThePipelineRuntimeAndMatchOneDevice) {
  const std::filesystem::path model = cnn::testing::models_dir() / "resnet18.onnx";
  if (!std::filesystem::exists(model))
    GTEST_SKIP() << model << " absent: python3 scripts/cnn/gen_models.py --out "
                 << cnn::testing::models_dir() << " --models resnet18";
  const Graph g = import_onnx(model.string());
  const Chain chain = linearise(g);
  const AnalyticCostModel cost;
  const ClusterSpec cl = ClusterSpec::from_json_file(
      (std::filesystem::path(TANDEM_CLUSTERS_DIR) / "pico-4.json").string());
  const EdgeProblem pb = make_problem(chain, cl, cost);
  const Tensor image = cnn::testing::random_tensor(g.tensor(g.inputs()[0]).shape, 5);
  const Tensor want = Executor(g, {.winograd = false}).run({image}).at(0);
  int groups = 0;
  for (const char* system : {"pico", "efl", "ofl", "pipeedge", "lw"}) {
    const sched::PipelinePlan plan =
        to_pipeline_plan(plan_system(system, pb), pb, model.string(), "pico-4");
    for (const auto& st : plan.stages) groups += st.is_group();
    SCOPED_TRACE(system);
    const std::vector<Tensor> outs = run_plan(plan, cl, image);  // direct, then inproc
    ASSERT_EQ(outs.size(), 4u);
    for (const Tensor& got : outs) {
      ASSERT_EQ(got.shape(), want.shape());
      EXPECT_LE(cnn::testing::scaled_max_error(got, want), cnn::testing::kRectTol);
      if (std::string(system) != "efl") EXPECT_TRUE(cnn::testing::bit_equal(got, want));
    }
  }
  EXPECT_GT(groups, 0) << "no plan split a stage over several devices";
}

// DeepZoning's modes on the runtime (spec cnn.md §3.3), a plan built by hand on ResNet-18 over
// the 4-device testbed: the stem in channel mode (each device the whole map and a channel range,
// one not a multiple of the 16-channel block), two residual blocks in hybrid mode (a 2 x 2 grid
// of row halves x channel ranges, one device holding two cells), the middle on one device and
// the classifier split by output features. Equals the single-device run bit for bit; a share
// set with a hole or an overlap is refused naming the shares.
TEST(EdgeRuntime, ChannelAndHybridSharesMatchOneDevice) {
  const std::filesystem::path model = cnn::testing::models_dir() / "resnet18.onnx";
  if (!std::filesystem::exists(model))
    GTEST_SKIP() << model << " absent: python3 scripts/cnn/gen_models.py --out "
                 << cnn::testing::models_dir() << " --models resnet18";
  const Graph g = import_onnx(model.string());
  const Chain chain = linearise(g);
  const ClusterSpec cl = ClusterSpec::from_json_file(
      (std::filesystem::path(TANDEM_CLUSTERS_DIR) / "pico-4.json").string());
  ASSERT_GE(cl.devices.size(), 4u);
  std::vector<std::string> dev;
  for (const auto& d : cl.devices) dev.push_back(d.name);
  const int last = chain.size() - 1;
  ASSERT_TRUE(chain.piece(last).dense);
  ASSERT_GT(last, 5);
  auto config = [&](int first, int to) {
    return nlohmann::json{{"kind", "cnn.tiles"},
                          {"model", model.string()},
                          {"pieces", {first, to}},
                          {"from", g.tensor(chain.piece(first).in_tensor).name},
                          {"to", g.tensor(chain.piece(to).out_tensor).name}};
  };
  auto share = [](const std::string& d, nlohmann::json j) { return sched::DeviceShare{d, j}; };
  const int64_t c1 = chain.piece(1).out_shape[1];
  const Shape& b = chain.piece(3).out_shape;
  const int64_t h = b[2], w = b[3], cb = b[1], f = chain.piece(last).out_shape[1];
  sched::PipelinePlan plan;
  plan.system = "hand";
  plan.cluster = "pico-4";
  plan.stages.emplace_back(
      std::vector{share(dev[0], {{"channels", {0, 24}}}), share(dev[1], {{"channels", {24, c1}}})},
      config(0, 1));
  const nlohmann::json top{{"rows", {0, h / 2}}, {"cols", {0, w}}};
  const nlohmann::json bottom{{"rows", {h / 2, h}}, {"cols", {0, w}}};
  auto with = [](nlohmann::json j, int64_t a, int64_t z) {
    j["channels"] = {a, z};
    return j;
  };
  plan.stages.emplace_back(
      std::vector{
          share(dev[0], with(top, 0, cb / 2)), share(dev[1], with(top, cb / 2, cb)),
          share(dev[2], with(bottom, 0, cb / 2)),
          share(dev[3], {{"tiles", {with(bottom, cb / 2, cb - 8), with(bottom, cb - 8, cb)}}})},
      config(2, 3));
  plan.stages.emplace_back(dev[2], config(4, last - 1));
  plan.stages.emplace_back(std::vector{share(dev[0], {{"channels", {0, 300}}}),
                                       share(dev[1], {{"channels", {300, 701}}}),
                                       share(dev[3], {{"channels", {701, f}}})},
                           config(last, last));
  const Tensor image = cnn::testing::random_tensor(g.tensor(g.inputs()[0]).shape, 7);
  const Tensor want = Executor(g, {.winograd = false}).run({image}).at(0);
  const std::vector<Tensor> outs = run_plan(plan, cl, image);
  ASSERT_EQ(outs.size(), 4u);
  for (const Tensor& got : outs) {
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_TRUE(cnn::testing::bit_equal(got, want))
        << "error " << cnn::testing::scaled_max_error(got, want);
  }
  // A hole (channels c1-1 of the stem computed by nobody) and an overlap are refused by split.
  sched::PipelinePlan hole = plan;
  hole.stages[0].devices[1].share = {{"channels", {24, c1 - 1}}};
  EXPECT_THROW(run_plan(hole, cl, image), InvalidArgument);
  sched::PipelinePlan overlap = plan;
  overlap.stages[3].devices[1].share = {{"channels", {299, 701}}};
  EXPECT_THROW(run_plan(overlap, cl, image), InvalidArgument);
  sched::PipelinePlan outside = plan;
  outside.stages[3].devices[2].share = {{"channels", {701, f + 1}}};
  EXPECT_THROW(run_plan(outside, cl, image), InvalidArgument);
}

// The virtual sink (chain.h with_single_output) of YOLOv5s, three detection heads: one output that
// is the three outputs flattened and concatenated in order, bit for bit, and a chain ending in it.
TEST(EdgeChain, VirtualSinkConcatenatesTheOutputs) {
  const std::filesystem::path model = cnn::testing::models_dir() / "yolov5s.onnx";
  if (!std::filesystem::exists(model))
    GTEST_SKIP() << model << " absent: python3 scripts/cnn/gen_models.py --out "
                 << cnn::testing::models_dir() << " --models yolov5s";
  const Graph g = import_onnx(model.string());
  ASSERT_EQ(g.outputs().size(), 3u);
  EXPECT_THROW(linearise(g), Unsupported);
  const Graph sunk = load_edge_graph(model.string());
  ASSERT_EQ(sunk.outputs().size(), 1u);
  EXPECT_EQ(sunk.tensor(sunk.outputs()[0]).name, kSinkTensor);
  EXPECT_EQ(sunk.total_flops(), g.total_flops());
  const Chain chain = linearise(sunk);
  EXPECT_FALSE(chain.piece(chain.size() - 1).spatial);
  const Tensor image = cnn::testing::random_tensor(g.tensor(g.inputs()[0]).shape, 3);
  const std::vector<Tensor> heads = Executor(g).run({image});
  const Tensor sink = Executor(sunk).run({image}).at(0);
  int64_t at = 0;
  for (const Tensor& h : heads) {
    ASSERT_LE(at + h.numel(), sink.numel());
    EXPECT_EQ(0, std::memcmp(h.data<float>(), sink.data<float>() + at, h.nbytes()));
    at += h.numel();
  }
  EXPECT_EQ(at, sink.numel());
  // A single-output graph is unchanged; a model that already names a tensor like the sink is
  // refused.
  EXPECT_EQ(with_single_output(sunk).nodes().size(), sunk.nodes().size());
  Graph clash = g;
  clash.add_tensor(kSinkTensor, Shape{1});
  EXPECT_THROW(with_single_output(clash), InvalidArgument);
}

// DeepZoning's own plans on the runtime (issue 18): on every model of the issue, DeepZoning's
// latency plan for the 1.0/0.7/0.5/0.3 set of Raspberry-Pi-class devices at 300 Mbit/s and at 100
// Gbit/s (where it splits zones in rows; YOLOv5s through its virtual sink, chain.h), run on the
// pipeline runtime (one frame with local stages called directly, one over inproc://), equals the
// single-device run within kRectTol (wide 1x1 channel slices sum their input channels in another
// order, see executor_test); every model has a zone split over several devices in one of the two.
class DeepZoningModels : public ::testing::TestWithParam<const char*> {};

TEST_P(DeepZoningModels, PlansMatchOneDevice) {
  const std::string name = GetParam();
  const std::filesystem::path model = cnn::testing::models_dir() / (name + ".onnx");
  if (!std::filesystem::exists(model))
    GTEST_SKIP() << model << " absent: python3 scripts/cnn/gen_models.py --out "
                 << cnn::testing::models_dir() << " --models " << name;
  const Graph g = load_edge_graph(model.string());
  const Chain chain = linearise(g);
  const AnalyticCostModel cost;
  const Tensor image = cnn::testing::random_tensor(g.tensor(g.inputs()[0]).shape, 9);
  const Tensor want = Executor(g, {.winograd = false}).run({image}).at(0);
  int split_zones = 0;
  for (double bandwidth : {3.75e7, 1.25e10}) {
    SCOPED_TRACE(name + " at " + std::to_string(bandwidth * 8 / 1e6) + " Mbit/s");
    ClusterSpec cl = ClusterSpec::from_json_file(
        (std::filesystem::path(TANDEM_CLUSTERS_DIR) / "deepzoning-4-pi.json").string());
    for (LinkProfile& l : cl.links) l.bandwidth_bytes_per_s = bandwidth;
    const EdgeProblem pb = make_problem(chain, cl, cost);
    const EdgePlan plan = plan_deepzoning(pb);
    for (const Stage& s : plan.stages) split_zones += s.shares.size() > 1;
    const auto outs =
        run_plan(to_pipeline_plan(plan, pb, model.string(), "deepzoning-4-pi"), cl, image, 1);
    ASSERT_EQ(outs.size(), 2u);
    for (const Tensor& got : outs) {
      ASSERT_EQ(got.shape(), want.shape());
      EXPECT_LE(cnn::testing::scaled_max_error(got, want), cnn::testing::kRectTol);
    }
  }
  EXPECT_GT(split_zones, 0) << "no zone split over several devices";
}

INSTANTIATE_TEST_SUITE_P(Issue18, DeepZoningModels,
                         ::testing::Values("resnet18", "resnet34", "resnet50", "inception_v3",
                                           "yolov2", "yolov5s", "mobilenet_v2"));

// The latency and throughput variants and CoEdge on ResNet-18 over the 4-device testbed, and
// DeepZoning on VGG-16 over the Raspberry-Pi-class set at 300 Mbit/s, where the planner chooses
// hybrid modes for pieces 14-15 and channel mode for the classifier (asserted), equal the
// single-device run (within kRectTol, as above).
TEST(EdgeRuntime, DeepZoningPlansMatchOneDevice) {
  for (const char* name : {"resnet18", "vgg16"}) {
    const std::filesystem::path model = cnn::testing::models_dir() / (std::string(name) + ".onnx");
    if (!std::filesystem::exists(model))
      GTEST_SKIP() << model << " absent: python3 scripts/cnn/gen_models.py --out "
                   << cnn::testing::models_dir() << " --models " << name;
    const Graph g = import_onnx(model.string());
    const Chain chain = linearise(g);
    const AnalyticCostModel cost;
    const bool vgg = std::string(name) == "vgg16";
    const std::string testbed = vgg ? "deepzoning-4-pi" : "pico-4";
    ClusterSpec cl = ClusterSpec::from_json_file(
        (std::filesystem::path(TANDEM_CLUSTERS_DIR) / (testbed + ".json")).string());
    if (vgg)
      for (LinkProfile& l : cl.links) l.bandwidth_bytes_per_s = 3.75e7;  // 300 Mbit/s
    const EdgeProblem pb = make_problem(chain, cl, cost);
    const Tensor image = cnn::testing::random_tensor(g.tensor(g.inputs()[0]).shape, 9);
    const Tensor want = Executor(g, {.winograd = false}).run({image}).at(0);
    std::vector<const char*> systems = {"deepzoning"};
    if (!vgg) systems = {"deepzoning", "deepzoning-tp", "coedge"};
    for (const char* system : systems) {
      SCOPED_TRACE(std::string(name) + " " + system);
      const EdgePlan plan = plan_system(system, pb);
      int channel_shares = 0;
      for (const Stage& s : plan.stages)
        for (const DeviceShare& sh : s.shares) channel_shares += sh.channels();
      if (vgg) EXPECT_GT(channel_shares, 0) << "no channel or hybrid mode chosen";
      const auto outs = run_plan(to_pipeline_plan(plan, pb, model.string(), testbed), cl, image);
      ASSERT_EQ(outs.size(), 4u);
      for (const Tensor& got : outs)
        EXPECT_LE(cnn::testing::scaled_max_error(got, want), cnn::testing::kRectTol);
    }
  }
}

}  // namespace
}  // namespace tandem::cnn::edge
