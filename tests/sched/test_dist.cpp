// SPDX-License-Identifier: Apache-2.0
// Multi-process runs: `tandem worker` processes on loopback with a cluster key; a killed and a
// stopped worker mid-run (every answer exactly once, equal to the fault-free run); a worker with
// another key refused and the refusal logged.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "child_worker.h"
#include "sched_test_util.h"
#include "tandem/sched/client.h"

namespace tandem::sched {
namespace {

namespace fs = std::filesystem;
using test::ChildWorker;
using test::expect_bit_equal;
using test::mlp_plan;
using test::mlp_requests;

class SchedDist : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!zmq_has_curve()) GTEST_SKIP() << "libzmq without CURVE";
    if (std::string(TANDEM_CLI_PATH).empty())
      GTEST_SKIP() << "built without the tandem tool (TANDEM_BUILD_EXAMPLES=OFF)";
    if (!fs::exists(TANDEM_CLI_PATH)) GTEST_SKIP() << "no tandem binary at " << TANDEM_CLI_PATH;
    dir_ = fs::temp_directory_path() /
           ("tandem_sched_dist_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    key_path_ = (dir_ / "cluster.key").string();
    key_ = ClusterKey::generate();
    key_.save(key_path_);
  }
  void TearDown() override {
    workers_.clear();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::map<std::string, std::string> start_workers(int n) {
    return test::start_workers(workers_, dir_, key_path_, n);
  }
  PipelineOptions options() const { return test::worker_pipeline_options(key_, 60); }

  fs::path dir_;
  std::string key_path_;
  ClusterKey key_;
  std::vector<std::unique_ptr<ChildWorker>> workers_;
};

// Worker to worker (each worker forwards to the next over its own CURVE connection) and hub and
// spoke on the same three workers: both bit-equal to the sequential run, hence to each other.
TEST_F(SchedDist, ThreeWorkerProcessesOnLoopbackEqualSequential) {
  auto map = start_workers(3);
  const auto plan = mlp_plan({"dev0", "dev1", "dev2"}, 6, 64);
  for (Topology t : {Topology::kWorkerToWorker, Topology::kHubAndSpoke}) {
    PipelineOptions o = options();
    o.topology = t;
    Pipeline pipe(plan, ClusterSpec{}, map, o);
    RunReport r = pipe.run(mlp_requests(4, {6, 2, 8}, 64));
    expect_bit_equal(r.outputs, run_sequential(plan, mlp_requests(4, {6, 2, 8}, 64)));
    EXPECT_EQ(r.replans, 0);
    EXPECT_EQ(r.direct_hops, t == Topology::kWorkerToWorker ? 2 : 0);
    EXPECT_EQ(r.forwarded_bytes > 0, t == Topology::kWorkerToWorker);
    for (const auto& tl : r.timelines) EXPECT_EQ(tl.intervals.size(), 12u);
  }
}

// Kills (SIGKILL) or stops (SIGSTOP) worker 1 once the first answer is back; the run re-plans onto
// the two survivors and re-runs what was in flight.
void run_with_fault(SchedDist* self, std::map<std::string, std::string> map, ChildWorker& victim,
                    int sig, const PipelineOptions& o) {
  const auto plan = mlp_plan({"dev0", "dev1", "dev2"}, 6, 96);
  const std::vector<int64_t> slices = {16, 16, 16, 16};
  // The slow middle device keeps packets in flight when the fault hits.
  const ClusterSpec c = test::slow_middle_cluster(0.05);
  Pipeline pipe(plan, c, map, o);
  std::map<uint64_t, int> delivered;
  bool faulted = false;
  RunReport r = pipe.run(mlp_requests(8, slices, 96), [&](uint64_t id, const std::vector<Packet>&) {
    ++delivered[id];
    if (!faulted) {
      victim.signal(sig);
      faulted = true;
    }
  });
  ASSERT_TRUE(faulted);
  EXPECT_EQ(r.replans, 1);
  EXPECT_GT(r.requests_rerun, 0u);
  ASSERT_EQ(delivered.size(), 8u);
  for (const auto& [id, n] : delivered) EXPECT_EQ(n, 1) << "request " << id;
  EXPECT_EQ(std::count(r.final_devices.begin(), r.final_devices.end(), "dev1"), 0);
  expect_bit_equal(r.outputs, run_sequential(plan, mlp_requests(8, slices, 96)));
  ASSERT_FALSE(r.events.empty());
  EXPECT_NE(r.events[0].find("lost device 'dev1'"), std::string::npos) << r.events[0];
  // After the re-plan stage 1 runs on a survivor beside another stage; every hop stays direct.
  EXPECT_EQ(r.direct_hops, o.topology == Topology::kWorkerToWorker ? 2 : 0);
}

TEST_F(SchedDist, KilledWorkerMidRunEveryAnswerOnceAndUnchanged) {
  auto map = start_workers(3);
  run_with_fault(this, map, *workers_[1], SIGKILL, options());
}

TEST_F(SchedDist, KilledWorkerMidRunHubAndSpoke) {
  auto map = start_workers(3);
  PipelineOptions o = options();
  o.topology = Topology::kHubAndSpoke;
  run_with_fault(this, map, *workers_[1], SIGKILL, o);
}

TEST_F(SchedDist, StalledWorkerIsDetectedByHeartbeat) {
  auto map = start_workers(3);
  run_with_fault(this, map, *workers_[1], SIGSTOP, options());
}

TEST_F(SchedDist, WorkerWithAnotherKeyIsRefusedAndLogsIt) {
  auto map = start_workers(1);
  ClientOptions co;
  co.heartbeat_interval_s = 0.05;
  co.heartbeat_timeout_s = 0.5;
  co.connect_timeout_s = 1.0;
  WorkerClient intruder(map["dev0"], ClusterKey::generate(), co);
  EXPECT_THROW(intruder.hello(), WorkerLost);
  WorkerClient member(map["dev0"], key_, co);
  EXPECT_NO_THROW(member.hello());
  std::string log;
  for (int i = 0; i < 100; ++i) {
    log = workers_[0]->log();
    if (log.find("refused") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(log.find("refused a peer"), std::string::npos) << log;
  // A pipeline whose only worker refuses it fails cleanly instead of hanging.
  PipelineOptions o = options();
  o.key = ClusterKey::generate();
  o.client.connect_timeout_s = 1.0;
  o.max_replans = 0;
  Pipeline pipe(mlp_plan({"dev0"}, 1, 8), ClusterSpec{}, map, o);
  EXPECT_THROW(pipe.run(mlp_requests(1, {2}, 8)), Error);
}

TEST_F(SchedDist, PipelineRunCommandVerifiesAndWritesJson) {
  auto map = start_workers(1);
  const std::string json = (dir_ / "run.json").string();
  const std::string cmd = std::string(TANDEM_CLI_PATH) + " pipeline run --plan " +
                          TANDEM_SOURCE_DIR + "/bench/sched/mlp3.plan.json --cluster " +
                          TANDEM_SOURCE_DIR + "/configs/clusters/hetero3.json --requests 2 --key " +
                          key_path_ + " --workers slow=" + map["dev0"] + " --verify --json " +
                          json + " > " + (dir_ / "run.out").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["verify"]["bit_exact"], 8);
  EXPECT_EQ(j["verify"]["outputs"], 8);
  EXPECT_EQ(j["timelines"].size(), 5u);  // three stages and the two links between them
  EXPECT_EQ(j["timelines"][1]["kind"], "link");
  EXPECT_EQ(j["timelines"][1]["link"]["messages"], 8);
  EXPECT_GT(j["measured"]["latency_s"].get<double>(), 0.0);
}

// With a plan-level re-plan (a planner asked again over the survivors), the lost worker's layers
// are re-split over the two others instead of moving its stage whole: two stages over dev0 and
// dev2, every request answered once, outputs unchanged (the stateless MLP computes the same under
// any split).
TEST_F(SchedDist, KilledWorkerReplanReSplitsTheLayersOverTheSurvivors) {
  auto map = start_workers(3);
  const auto plan = mlp_plan({"dev0", "dev1", "dev2"}, 6, 96, false);
  const std::vector<int64_t> slices = {16, 16, 16, 16};
  PipelineOptions o = options();
  std::vector<std::string> failed_seen;
  o.replan_plan = [&](const PipelinePlan& current, const std::vector<std::string>& failed,
                      const std::vector<std::string>&) {
    failed_seen = failed;
    std::vector<std::string> survivors;
    for (const auto& d : current.devices())
      if (std::find(failed.begin(), failed.end(), d) == failed.end()) survivors.push_back(d);
    return mlp_plan(survivors, 6, 96, false);
  };
  const ClusterSpec c = test::slow_middle_cluster(0.05);  // packets in flight at the fault
  Pipeline pipe(plan, c, map, o);
  std::map<uint64_t, int> delivered;
  RunReport r = pipe.run(mlp_requests(8, slices, 96), [&](uint64_t id, const std::vector<Packet>&) {
    if (delivered.empty()) workers_[1]->signal(SIGKILL);
    ++delivered[id];
  });
  EXPECT_EQ(r.replans, 1);
  EXPECT_EQ(failed_seen, std::vector<std::string>{"dev1"});
  EXPECT_EQ(r.final_devices, (std::vector<std::string>{"dev0", "dev2"}));
  ASSERT_EQ(delivered.size(), 8u);
  for (const auto& [id, n] : delivered) EXPECT_EQ(n, 1) << "request " << id;
  expect_bit_equal(r.outputs, run_sequential(plan, mlp_requests(8, slices, 96)));
  ASSERT_GE(r.events.size(), 2u);
  EXPECT_NE(r.events[1].find("re-plan: 2 stages over dev0, dev2"), std::string::npos)
      << r.events[1];
}

}  // namespace
}  // namespace tandem::sched
