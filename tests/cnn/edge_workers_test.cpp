// SPDX-License-Identifier: Apache-2.0
// Edge plans over `tandem worker` processes on tcp loopback (issues 17, 18): PICO's, OFL's and
// DeepZoning's plans for MobileNetV2 on three devices run as cnn.tiles stages on three worker
// processes and equal the single-device run bit for bit (row bands); a worker SIGKILLed mid-run is
// found by the heartbeats, the plan is made again over the two survivors (replan_over_survivors),
// and every frame is delivered exactly once, unchanged. The model comes from
// scripts/cnn/gen_models.py (skipped with the command when absent).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "cnn_test_util.h"
#include "sched/child_worker.h"
#include "tandem/cnn/edge/planners.h"
#include "tandem/cnn/edge/replan.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/onnx_import.h"
#include "tandem/sched/client.h"

namespace tandem::cnn::edge {
namespace {

namespace fs = std::filesystem;

// dev0..dev2 of equal speed on one 1 Gbit/s medium.
ClusterSpec three_devices() {
  nlohmann::json j = {{"devices", nlohmann::json::array()}, {"links", nlohmann::json::array()}};
  for (int i = 0; i < 3; ++i)
    j["devices"].push_back({{"name", fixtures::numbered("dev", i)},
                            {"kind", "cpu"},
                            {"peak_flops", 2e10},
                            {"mem_bandwidth_bytes_per_s", 1e10},
                            {"mem_bytes", 4e9}});
  for (int i = 0; i < 3; ++i)
    for (int k = i + 1; k < 3; ++k)
      j["links"].push_back({{"from", fixtures::numbered("dev", i)},
                            {"to", fixtures::numbered("dev", k)},
                            {"bandwidth_bytes_per_s", 1.25e8},
                            {"latency_s", 1e-4}});
  return ClusterSpec::from_json(j);
}

class EdgeWorkers : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!sched::zmq_has_curve()) GTEST_SKIP() << "libzmq without CURVE";
    if (std::string(TANDEM_CLI_PATH).empty() || !fs::exists(TANDEM_CLI_PATH))
      GTEST_SKIP() << "no tandem binary at '" << TANDEM_CLI_PATH << "'";
    model_ = (testing::models_dir() / "mobilenet_v2.onnx").string();
    if (!fs::exists(model_))
      GTEST_SKIP() << model_ << " absent: python3 scripts/cnn/gen_models.py --out "
                   << testing::models_dir() << " --models mobilenet_v2";
    graph_ = std::make_unique<Graph>(import_onnx(model_));
    chain_ = std::make_unique<Chain>(linearise(*graph_));
    problem_ = make_problem(*chain_, cluster_, cost_);
    const Shape& s = graph_->tensor(graph_->inputs()[0]).shape;
    std::vector<float> v(static_cast<size_t>(s.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 251) / 125.0f - 1.0f;
    image_ = Tensor::from_vector(std::move(v), s, DType::kF32);
    want_ = Executor(*graph_, {.winograd = false}).run({image_}).at(0);
    key_ = sched::ClusterKey::generate();
    key_path_ = (fs::path(dir_.path()) / "cluster.key").string();
    key_.save(key_path_);
  }
  void TearDown() override { workers_.clear(); }

  std::map<std::string, std::string> start_workers() {
    return sched::test::start_workers(workers_, dir_.path(), key_path_, 3);
  }
  std::vector<sched::Request> frames(int n) const {
    std::vector<sched::Request> reqs(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      reqs[i].id = static_cast<uint64_t>(i);
      reqs[i].micros.push_back(sched::Packet{});
      reqs[i].micros[0].tensors = {image_};
    }
    return reqs;
  }
  void expect_single_device_output(const sched::RunReport& r, size_t frames) const {
    ASSERT_EQ(r.outputs.size(), frames);
    for (const auto& [id, out] : r.outputs) {
      const Tensor got = out.at(0).tensors.at(0).contiguous();
      ASSERT_EQ(got.shape(), want_.shape());
      EXPECT_EQ(std::memcmp(got.raw_data(), want_.raw_data(), static_cast<size_t>(want_.nbytes())),
                0)
          << "frame " << id << " differs from the single-device run";
    }
  }

  fixtures::TempDir dir_{"edge-workers"};
  ClusterSpec cluster_ = three_devices();
  AnalyticCostModel cost_;
  std::string model_, key_path_;
  std::unique_ptr<Graph> graph_;
  std::unique_ptr<Chain> chain_;
  EdgeProblem problem_;
  Tensor image_, want_;
  sched::ClusterKey key_;
  std::vector<std::unique_ptr<sched::test::ChildWorker>> workers_;
};

TEST_F(EdgeWorkers, PlansOverThreeWorkerProcessesEqualOneDevice) {
  const auto map = start_workers();
  for (const char* system : {"pico", "ofl", "deepzoning"}) {
    SCOPED_TRACE(system);
    const EdgePlan plan = plan_system(system, problem_);
    const sched::PipelinePlan runtime = to_pipeline_plan(plan, problem_, model_, "three");
    sched::Pipeline pipe(runtime, cluster_, map, sched::test::worker_pipeline_options(key_, 120));
    const sched::RunReport r = pipe.run(frames(6));
    EXPECT_EQ(r.replans, 0);
    expect_single_device_output(r, 6);
  }
}

TEST_F(EdgeWorkers, KilledWorkerIsReplannedOverTheSurvivorsEveryFrameOnce) {
  const auto map = start_workers();
  // OFL: fused blocks, each over all three devices, so the killed worker holds a share of every
  // frame.
  const EdgePlan plan = plan_system("ofl", problem_);
  ASSERT_EQ(plan.stages[0].shares.size(), 3u);
  sched::PipelineOptions o = sched::test::worker_pipeline_options(key_, 120);
  o.replan_plan = replan_over_survivors("ofl", problem_, model_, "three");
  sched::Pipeline pipe(to_pipeline_plan(plan, problem_, model_, "three"), cluster_, map, o);
  std::map<uint64_t, int> delivered;
  bool killed = false;
  const sched::RunReport r =
      pipe.run(frames(10), [&](uint64_t id, const std::vector<sched::Packet>&) {
        ++delivered[id];
        if (!killed) workers_[1]->signal(SIGKILL);
        killed = true;
      });
  ASSERT_TRUE(killed);
  EXPECT_EQ(r.replans, 1);
  ASSERT_EQ(delivered.size(), 10u);  // nothing lost
  for (const auto& [id, n] : delivered) EXPECT_EQ(n, 1) << "frame " << id << " delivered twice";
  EXPECT_EQ(std::count(r.final_devices.begin(), r.final_devices.end(), "dev1"), 0);
  for (const char* survivor : {"dev0", "dev2"})
    EXPECT_GT(std::count(r.final_devices.begin(), r.final_devices.end(), survivor), 0)
        << "the new plan splits the frames over both survivors";
  ASSERT_FALSE(r.events.empty());
  EXPECT_NE(r.events[0].find("lost device 'dev1'"), std::string::npos) << r.events[0];
  expect_single_device_output(r, 10);
}

}  // namespace
}  // namespace tandem::cnn::edge
