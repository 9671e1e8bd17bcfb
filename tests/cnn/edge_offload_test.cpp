// SPDX-License-Identifier: Apache-2.0
// Edge/cloud splits on the pipeline runtime (issue 19; offload.h, the cnn.split stage kind): for
// AlexNet, InceptionV3, ResNet-50 and MobileNetV2, cloud-only, two prefix splits, edge-only and a
// DECC-shaped split (the first branching block's branches cut after their first node, the edge
// computing them in reverse order, one upload each, and the block input for the rest) run as two
// cnn.split stages through sched::Pipeline (direct and over inproc://) and equal the single-device
// run bit for bit (the same kernels run on both sides, Winograd off as in every edge stage). Bad
// splits and step lists are refused naming the node, tensor or step. Models come from
// scripts/cnn/gen_models.py (skipped with the command when absent).
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "cnn_test_util.h"
#include "sched/child_worker.h"
#include "shaped_link.h"
#include "tandem/cnn/edge/adaptive.h"
#include "tandem/cnn/edge/chain.h"
#include "tandem/cnn/edge/offload.h"
#include "tandem/cnn/executor.h"
#include "tandem/sched/client.h"
#include "tandem/sched/pipeline.h"
#include "tandem/sched/probe.h"

namespace tandem::cnn::edge {
namespace {

ClusterSpec edge_and_cloud() {
  nlohmann::json j = {{"devices", nlohmann::json::array()},
                      {"links",
                       {{{"from", "edge"},
                         {"to", "cloud"},
                         {"bandwidth_bytes_per_s", 1.25e8},
                         {"latency_s", 1e-4}}}}};
  for (const char* name : {"edge", "cloud"})
    j["devices"].push_back({{"name", name},
                            {"kind", "cpu"},
                            {"peak_flops", 2e10},
                            {"mem_bandwidth_bytes_per_s", 1e10},
                            {"mem_bytes", 4e9}});
  return ClusterSpec::from_json(j);
}

// The first piece whose input feeds several nodes (an inception or residual block): the nodes of
// the pieces before it, then the first node of each of its branches that reads only that input
// (a residual add fused into the block's last conv stays in the cloud), last branch first.
std::vector<int> branch_split(const Graph& g) {
  const Chain chain = linearise(g);
  std::vector<int> edge;
  for (int i = 0; i < chain.size(); ++i) {
    const std::vector<int>& branches = g.tensor(chain.piece(i).in_tensor).consumers;
    if (branches.size() >= 2) {
      for (auto b = branches.rbegin(); b != branches.rend(); ++b)
        if (g.node(*b).inputs == std::vector<int>{chain.piece(i).in_tensor}) edge.push_back(*b);
      return edge;
    }
    edge.insert(edge.end(), chain.piece(i).nodes.begin(), chain.piece(i).nodes.end());
  }
  return {};
}

// Why a test of `model` (a generated model's name) cannot run here, "" when it can: the model is
// absent, or (workers) there is no CURVE or tandem binary for a worker, or (netns) no network
// namespace for a ShapedLink.
std::string unavailable(const std::string& name, bool workers, bool netns) {
  if (netns)
    if (std::string why = testing::ShapedLink::unavailable(); !why.empty()) return why;
  if (workers && !sched::zmq_has_curve()) return "libzmq without CURVE";
  if (workers &&
      (std::string(TANDEM_CLI_PATH).empty() || !std::filesystem::exists(TANDEM_CLI_PATH)))
    return "no tandem binary at '" + std::string(TANDEM_CLI_PATH) + "'";
  const std::filesystem::path model = testing::models_dir() / (name + ".onnx");
  if (!std::filesystem::exists(model))
    return model.string() + " absent: python3 scripts/cnn/gen_models.py --out " +
           testing::models_dir().string() + " --models " + name;
  return "";
}

std::vector<Tensor> run_split(const sched::PipelinePlan& plan, const Tensor& image) {
  std::vector<Tensor> outs;
  for (bool direct : {true, false}) {
    sched::PipelineOptions o;
    o.direct_local = direct;
    o.emulate_devices = o.emulate_links = false;
    sched::Pipeline pipe(sched::PipelinePlan::from_json(plan.to_json()), edge_and_cloud(), {}, o);
    std::vector<sched::Request> reqs;
    for (uint64_t id = 0; id < 2; ++id) reqs.push_back(offload_request(plan, id, image));
    const sched::RunReport r = pipe.run(std::move(reqs));
    for (const auto& [id, out] : r.outputs) outs.push_back(out.back().tensors.at(0));
  }
  return outs;
}

// The cloud side of the worker tests: a cluster key in a temporary folder and one `tandem worker`
// holding it, on loopback or (with a ShapedLink) inside the link's namespace at its cloud address.
struct CloudWorker {
  explicit CloudWorker(const std::string& tag, const testing::ShapedLink* link = nullptr)
      : dir(tag), key(sched::ClusterKey::generate()) {
    const std::string key_path = (std::filesystem::path(dir.path()) / "cluster.key").string();
    key.save(key_path);
    worker = link ? std::make_unique<sched::test::ChildWorker>(
                        dir.path(), "cloud", key_path,
                        std::vector<std::string>{"ip", "netns", "exec", link->ns()},
                        "tcp://" + link->cloud_ip() + ":0")
                  : std::make_unique<sched::test::ChildWorker>(dir.path(), "cloud", key_path);
  }
  std::map<std::string, std::string> workers() const { return {{"cloud", worker->endpoint()}}; }

  fixtures::TempDir dir;
  sched::ClusterKey key;
  std::unique_ptr<sched::test::ChildWorker> worker;
};

class Offload : public ::testing::TestWithParam<const char*> {};

TEST_P(Offload, SplitsEqualOneDevice) {
  const std::string name = GetParam();
  if (const std::string why = unavailable(name, false, false); !why.empty()) GTEST_SKIP() << why;
  const std::filesystem::path model = testing::models_dir() / (name + ".onnx");
  const Graph g = load_edge_graph(model.string());
  const Tensor image = testing::random_tensor(g.tensor(g.inputs()[0]).shape, 11);
  const Tensor want = Executor(g, {.winograd = false}).run({image}).at(0);
  const int n = static_cast<int>(g.nodes().size());
  auto prefix = [](int k) {
    std::vector<int> v(static_cast<size_t>(k));
    for (int i = 0; i < k; ++i) v[static_cast<size_t>(i)] = i;
    return v;
  };
  const std::vector<int> branchy = branch_split(g);
  for (const auto& [label, edge] :
       std::vector<std::pair<std::string, std::vector<int>>>{{"cloud-only", {}},
                                                             {"a third", prefix(n / 3)},
                                                             {"half", prefix(n / 2)},
                                                             {"edge-only", prefix(n)},
                                                             {"branches", branchy}}) {
    if (label == "branches" && edge.empty()) continue;
    SCOPED_TRACE(name + ", " + label);
    const sched::PipelinePlan plan =
        offload_pipeline_plan(g, edge, model.string(), "edge", "cloud", label);
    const size_t uploads = plan.extra["offload"]["uploads"].size();
    if (label == "edge-only") EXPECT_EQ(plan.stages.size(), 1u);
    if (label == "branches") EXPECT_GE(uploads, 2u) << "one upload per branch";
    for (const Tensor& got : run_split(plan, image)) {
      ASSERT_EQ(got.shape(), want.shape());
      EXPECT_EQ(0,
                std::memcmp(got.raw_data(), want.raw_data(), static_cast<size_t>(want.nbytes())));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Issue19, Offload,
                         ::testing::Values("alexnet", "inception_v3", "resnet50", "mobilenet_v2"));

TEST(Offload, BadSplitsAreNamed) {
  if (const std::string why = unavailable("resnet18", false, false); !why.empty())
    GTEST_SKIP() << why;
  const std::filesystem::path model = testing::models_dir() / "resnet18.onnx";
  const Graph g = load_edge_graph(model.string());
  auto refused = [&](const std::vector<int>& edge, const std::string& needle) {
    try {
      offload_steps(g, edge);
      ADD_FAILURE() << "accepted; expected an error naming " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused({1}, g.node(0).name);  // reads node 0's output, not on the edge
  refused({0, 0}, "twice");      // a node twice
  refused({0, 99999}, "99999");  // not in the graph
  // A step list naming what does not exist, or reading what has not arrived, is refused when
  // the stage is built.
  nlohmann::json c{{"kind", "cnn.split"}, {"model", model.string()}};
  c["steps"] = {{{"recv", {g.tensor(g.inputs()[0]).name}}, {"nodes", {"no-such-node"}}}};
  EXPECT_THROW(sched::make_stage(c), InvalidArgument);
  c["steps"] = {{{"recv", nlohmann::json::array()}, {"nodes", {g.node(0).name}}}};
  EXPECT_THROW(sched::make_stage(c), InvalidArgument);
  c["steps"] = {{{"recv", {g.tensor(g.inputs()[0]).name}}, {"send", {"no-such-tensor"}}}};
  EXPECT_THROW(sched::make_stage(c), InvalidArgument);
}

// Over a real slow link (ShapedLink: the cloud worker in its own network namespace behind a veth
// pair whose uplink a tbf qdisc shapes): ResNet-18 cut in half (the edge uploads one 28x28x128
// map per frame) runs with the edge stage here and the cloud stage in a `tandem worker` inside the
// namespace; every frame equals the single-device run bit for bit, the uplink's qdisc carried at
// least the uploads' bytes, and the rate changed mid-stream (50 -> 10 Mbit/s) loses nothing. Skips
// with the reason where the test cannot make the namespace (not root, no iproute2).
TEST(Offload, CloudWorkerBehindAShapedLink) {
  if (const std::string why = unavailable("resnet18", true, true); !why.empty())
    GTEST_SKIP() << why;
  const std::filesystem::path model = testing::models_dir() / "resnet18.onnx";
  const Graph g = load_edge_graph(model.string());
  const Chain chain = linearise(g);
  std::vector<int> edge;  // the first half of the pieces
  for (int i = 0; i < chain.size() / 2; ++i)
    edge.insert(edge.end(), chain.piece(i).nodes.begin(), chain.piece(i).nodes.end());
  const sched::PipelinePlan plan =
      offload_pipeline_plan(g, edge, model.string(), "edge", "cloud", "half");
  const Tensor image = testing::random_tensor(g.tensor(g.inputs()[0]).shape, 13);
  const Tensor want = Executor(g, {.winograd = false}).run({image}).at(0);
  double upload_bytes = 0;
  for (const auto& name : plan.extra["offload"]["uploads"])
    upload_bytes += static_cast<double>(g.tensor(g.find_tensor(name)).shape.numel()) * 4;

  std::string no_link;
  const std::unique_ptr<testing::ShapedLink> link = testing::ShapedLink::make(50, &no_link);
  if (!link) GTEST_SKIP() << no_link;
  const CloudWorker cloud("offload-netns", link.get());
  const std::map<std::string, std::string> workers = cloud.workers();
  sched::PipelineOptions o = sched::test::worker_pipeline_options(cloud.key, 120);
  o.emulate_devices = o.emulate_links = false;  // the kernel shapes the link
  // The probe (sched/probe.h) over the same link: the uplink's bandwidth at 50 Mbit/s, then at 10.
  const sched::LinkEstimate fast = sched::probe_link("cloud", edge_and_cloud(), workers, o);
  EXPECT_GT(fast.bandwidth_bytes_per_s, 0);
  EXPECT_GT(fast.rtt_s, 0);
  const long long sent0 = link->sent_bytes();
  auto run = [&](uint64_t first, int frames, const std::function<void()>& after_first) {
    sched::Pipeline pipe(plan, edge_and_cloud(), workers, o);
    std::vector<sched::Request> reqs;
    for (int i = 0; i < frames; ++i) reqs.push_back(offload_request(plan, first + i, image));
    bool called = false;
    const sched::RunReport r =
        pipe.run(std::move(reqs), [&](uint64_t, const std::vector<sched::Packet>&) {
          if (!called && after_first) after_first();
          called = true;
        });
    ASSERT_EQ(r.outputs.size(), static_cast<size_t>(frames));
    for (const auto& [id, out] : r.outputs) {
      const Tensor got = out.back().tensors.at(0).contiguous();
      ASSERT_EQ(got.shape(), want.shape());
      EXPECT_EQ(0, std::memcmp(got.raw_data(), want.raw_data(), static_cast<size_t>(want.nbytes())))
          << "frame " << id;
    }
  };
  run(0, 3, nullptr);
  EXPECT_GE(static_cast<double>(link->sent_bytes() - sent0), 3 * upload_bytes)
      << "the uploads did not go through the shaped uplink";
  run(3, 3, [&] { link->set_rate(10); });  // the rate drops mid-stream
  const sched::LinkEstimate slow = sched::probe_link("cloud", edge_and_cloud(), workers, o);
  std::printf("probe: %.1f Mbit/s (rtt %.2f ms) at 50, %.1f Mbit/s (rtt %.2f ms) at 10\n",
              fast.bandwidth_bytes_per_s * 8e-6, fast.rtt_s * 1e3,
              slow.bandwidth_bytes_per_s * 8e-6, slow.rtt_s * 1e3);
  sched::LinkTracker tracker;
  tracker.add(slow.bandwidth_bytes_per_s);
  EXPECT_TRUE(tracker.moved_from(fast.bandwidth_bytes_per_s))
      << "50 -> 10 Mbit/s: probed " << fast.bandwidth_bytes_per_s * 8e-6 << " then "
      << slow.bandwidth_bytes_per_s * 8e-6 << " Mbit/s";
}

// A cloud worker that dies mid-stream (SIGKILL after the first delivered frame): the heartbeats
// find it, offload_fallback turns the plan into an edge-only one with the same steps, the frames in
// flight are run again on the edge; all 8 are delivered once, each equal to the single-device run.
TEST(Offload, LostCloudFallsBackToTheEdgeAlone) {
  if (const std::string why = unavailable("mobilenet_v2", true, false); !why.empty())
    GTEST_SKIP() << why;
  const std::filesystem::path model = testing::models_dir() / "mobilenet_v2.onnx";
  const Graph g = load_edge_graph(model.string());
  const std::vector<int> edge = branch_split(g);
  ASSERT_FALSE(edge.empty());
  const sched::PipelinePlan plan =
      offload_pipeline_plan(g, edge, model.string(), "edge", "cloud", "branches");
  ASSERT_GE(plan.extra["offload"]["steps"].get<int>(), 2);
  const Tensor image = testing::random_tensor(g.tensor(g.inputs()[0]).shape, 17);
  const Tensor want = Executor(g, {.winograd = false}).run({image}).at(0);
  CloudWorker cloud("offload-fault");
  sched::PipelineOptions o = sched::test::worker_pipeline_options(cloud.key, 120);
  o.emulate_devices = o.emulate_links = false;
  o.replan_plan = offload_fallback(g, model.string(), "edge");
  sched::Pipeline pipe(plan, edge_and_cloud(), cloud.workers(), o);
  std::vector<sched::Request> reqs;
  for (uint64_t id = 0; id < 8; ++id) reqs.push_back(offload_request(plan, id, image));
  std::map<uint64_t, int> delivered;
  const sched::RunReport r = pipe.run(std::move(reqs), [&](uint64_t id,
                                                           const std::vector<sched::Packet>& out) {
    if (delivered.empty()) cloud.worker->signal(SIGKILL);
    ++delivered[id];
    const Tensor got = out.back().tensors.at(0).contiguous();
    EXPECT_EQ(0, std::memcmp(got.raw_data(), want.raw_data(), static_cast<size_t>(want.nbytes())))
        << "frame " << id;
  });
  EXPECT_EQ(r.replans, 1);
  ASSERT_EQ(delivered.size(), 8u);
  for (const auto& [id, n] : delivered) EXPECT_EQ(n, 1) << "frame " << id << " delivered twice";
  EXPECT_EQ(std::count(r.final_devices.begin(), r.final_devices.end(), "cloud"), 0);
}

// Online adaptation over the shaped link (adaptive.h): AlexNet on configs/clusters/edge-cloud.json,
// DECC planned from the probed bandwidth; the uplink drops from 50 to 5 Mbit/s after the first
// segment, the next probe sees it, the plan is made again for the new bandwidth between segments,
// and every frame comes out once, equal to the single-device run.
TEST(Offload, AdaptsThePlanWhenTheLinkSlowsDown) {
  if (const std::string why = unavailable("alexnet", true, true); !why.empty()) GTEST_SKIP() << why;
  const std::filesystem::path model = testing::models_dir() / "alexnet.onnx";
  const Graph g = load_edge_graph(model.string());
  const Tensor image = testing::random_tensor(g.tensor(g.inputs()[0]).shape, 19);
  const Tensor want = Executor(g, {.winograd = false}).run({image}).at(0);
  const ClusterSpec cluster = ClusterSpec::from_json_file(
      (std::filesystem::path(TANDEM_CLUSTERS_DIR) / "edge-cloud.json").string());
  std::string no_link;
  const std::unique_ptr<testing::ShapedLink> link = testing::ShapedLink::make(50, &no_link);
  if (!link) GTEST_SKIP() << no_link;
  const CloudWorker cloud("offload-adapt", link.get());
  sched::PipelineOptions o = sched::test::worker_pipeline_options(cloud.key, 300);
  o.emulate_devices = o.emulate_links = false;
  // After the drop a probe sized for 50 Mbit/s holds the 5 Mbit/s link for over a second, and
  // heartbeats wait behind it on the same connection.
  o.client.heartbeat_timeout_s = 15;
  const AnalyticCostModel cost;
  const AdaptiveReport r = run_offload_adaptive(
      g, model.string(), cluster, cost, cloud.workers(), o, image,
      {.system = "decc", .frames = 6, .frames_per_probe = 2}, [&](const AdaptiveSegment& s) {
        if (s.first_frame == 0) link->set_rate(5);
      });
  ASSERT_EQ(r.segments.size(), 3u);
  EXPECT_TRUE(r.segments[0].replanned);
  EXPECT_TRUE(r.segments[1].replanned) << "the drop to 5 Mbit/s was not acted on: probed "
                                       << r.segments[1].probed_bytes_per_s * 8e-6 << " Mbit/s";
  EXPECT_GE(r.replans, 1);
  EXPECT_LT(r.segments[1].planned_bytes_per_s, 0.8 * r.segments[0].planned_bytes_per_s);
  ASSERT_EQ(r.outputs.size(), 6u);
  for (const auto& [id, got] : r.outputs)
    EXPECT_EQ(0, std::memcmp(got.contiguous().raw_data(), want.raw_data(),
                             static_cast<size_t>(want.nbytes())))
        << "frame " << id;
  for (const AdaptiveSegment& s : r.segments)
    std::printf(
        "frames %d-%d: probed %.1f Mbit/s, planned for %.1f: %s; predicted %.3f s, measured %.3f "
        "s\n",
        s.first_frame, s.first_frame + s.frames - 1, s.probed_bytes_per_s * 8e-6,
        s.planned_bytes_per_s * 8e-6, s.plan.c_str(), s.predicted_s, s.measured_s);
}

}  // namespace
}  // namespace tandem::cnn::edge
