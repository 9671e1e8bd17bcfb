// SPDX-License-Identifier: Apache-2.0
// Hostile input against the pipeline runtime and the `tandem` tool (issue 24): plan files with the
// path named once and bad fields refused, a stage that never finishes building cannot hold the
// coordinator, and the tool refuses unknown subcommands, out-of-range flags and plans whose model
// is not a regular file with an error instead of a hang.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "sched_test_util.h"
#include "tandem/sched/client.h"
#include "tandem/sched/pipeline.h"
#include "tandem/sched/stage.h"

namespace tandem::sched {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

fs::path scratch(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("tandem_hostile_" + std::to_string(::getpid()) + "_" + name);
  fs::create_directories(d);
  return d;
}

std::string plan_error(const std::string& path) {
  try {
    (void)PipelinePlan::from_json_file(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SchedPlanFile, ErrorsNameThePathOnceAndRefuseBadValues) {
  const fs::path dir = scratch("plan");
  const std::string path = (dir / "x.json").string();
  std::ofstream(path) << R"({"version": 1, "stages": 3})";
  const std::string e = plan_error(path);
  EXPECT_EQ(e, path + ": stages: expected an array, got 3");
  std::ofstream(path) << R"({"version": 1, "prompt_len": 0,
      "stages": [{"device": "d", "stage": {"kind": "sched.identity"}}]})";
  EXPECT_NE(plan_error(path).find("prompt_len: expected a positive integer, got 0"),
            std::string::npos)
      << plan_error(path);
  std::ofstream(path) << R"({"version": 1, "version": 1,
      "stages": [{"device": "d", "stage": {"kind": "sched.identity"}}]})";
  EXPECT_NE(plan_error(path).find("duplicate key 'version'"), std::string::npos);
  fs::remove_all(dir);
}

// A stage kind whose construction takes far longer than the coordinator is willing to wait.
const StageKindRegistration kSlowBuild("test.slow_build", [](const nlohmann::json&) {
  std::this_thread::sleep_for(std::chrono::seconds(3));
  return make_stage({{"kind", "sched.identity"}});
});

TEST(SchedPipeline, AStageThatNeverFinishesBuildingTimesOutTheRun) {
  PipelinePlan plan;
  plan.stages.push_back({"host", {{"kind", "test.slow_build"}}});
  PipelineOptions po;
  po.client.configure_timeout_s = 0.4;
  const auto t0 = Clock::now();
  {
    Pipeline pipe(plan, ClusterSpec{}, {}, po);
    try {
      pipe.run(test::mlp_requests(1, {4}, 8));
      ADD_FAILURE() << "the run waited out the stage build";
    } catch (const TransportError& e) {
      EXPECT_NE(std::string(e.what()).find("within 0.4"), std::string::npos) << e.what();
      EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 2.5);
    }
  }
  EXPECT_THROW(WorkerClient("inproc://x", std::nullopt, {.configure_timeout_s = 0}),
               InvalidArgument);
}

// --- the tool ------------------------------------------------------------------------------------

struct CliResult {
  int rc = -1;
  std::string output;  // stdout and stderr
};

// Runs `tandem ARGS` under `timeout` (a hang fails instead of blocking the suite).
CliResult run_cli(const std::string& args, int timeout_s = 60) {
  CliResult r;
  const std::string cmd = "timeout " + std::to_string(timeout_s) + " " +
                          std::string(TANDEM_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(TANDEM_CLI_PATH)) GTEST_SKIP() << "no tandem binary at " << TANDEM_CLI_PATH;
  }
};

TEST_F(Cli, UnknownSubcommandWithHelpIsAnError) {
  const CliResult r = run_cli("frobnicate --help");
  EXPECT_NE(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("unknown subcommand 'frobnicate'"), std::string::npos) << r.output;
  EXPECT_EQ(run_cli("-q version").rc, 0);
  EXPECT_EQ(run_cli("rec-serve --help").rc, 0);
}

TEST_F(Cli, RecServeFlagsAreCapped) {
  for (const char* flag : {"--rate 1e12",         "--pool 100000000",     "--pool 0",
                           "--pool -1",           "--query-size -5",      "--rows-scale 0",
                           "--rows-scale -1",     "--cache-rows -1",      "-t -1",
                           "-t 100000",           "--trace-events -1",    "--size-sd -4",
                           "--max-outstanding 0", "--recstream-period 0", "--recstream-window -1",
                           "--recstream-gain -1", "--load-phases 8:x",    "--gpu-cache-mib -1",
                           "--gpu-cache-tau 2",   "--gpu-cache-mib 4",    "--gpu-cache-prefetch"}) {
    const CliResult r = run_cli(std::string("rec-serve -m tiny-dlrm -d 0.05 ") + flag, 30);
    EXPECT_NE(r.rc, 0) << flag << ": " << r.output;
    const std::string name = std::string(flag).substr(0, std::string(flag).find(' '));
    EXPECT_NE(r.output.find(name), std::string::npos) << flag << ": " << r.output;
  }
}

TEST_F(Cli, KvFlagsAreCheckedBeforeAnyModelLoads) {
  const fs::path dir = scratch("kv");
  const std::string text = (dir / "t.txt").string();
  std::ofstream(text) << "some text";
  for (const char* depth : {"2", "-1", "1.5", "nan"}) {
    const CliResult r = run_cli("kv-eval -f " + text + " --depths " + depth, 30);
    EXPECT_NE(r.rc, 0) << depth << ": " << r.output;
    EXPECT_NE(r.output.find("--depths"), std::string::npos) << depth << ": " << r.output;
  }
  const CliResult q = run_cli("generate -p hi --kv-quant ''", 30);
  EXPECT_NE(q.rc, 0) << q.output;
  EXPECT_NE(q.output.find("--kv-quant"), std::string::npos) << q.output;
  fs::remove_all(dir);
}

TEST_F(Cli, OpenLoopOverloadDropsArrivalsInsteadOfQueueingThem) {
  const CliResult r = run_cli(
      "rec-serve -m tiny-dlrm -d 0.3 --warmup 0 --rate 1e6 --max-outstanding 8 -o json", 60);
  ASSERT_EQ(r.rc, 0) << r.output;
  const size_t brace = r.output.find("{\n");
  ASSERT_NE(brace, std::string::npos) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(brace));
  EXPECT_GT(j["results"]["dropped"].get<int64_t>(), 0) << r.output;
  EXPECT_EQ(j["params"]["max_outstanding"], 8);
}

TEST_F(Cli, APlanWhoseModelIsNotARegularFileFailsFast) {
  const fs::path dir = scratch("devzero");
  const std::string plan = (dir / "plan.json").string();
  std::ofstream(plan) << R"({"version": 1, "system": "hpipe", "cluster": "none", "prompt_len": 4,
    "micro_batches": 1, "slices": [4], "stages": [{"device": "d0", "stage": {"kind": "llm.layers",
    "model": "/dev/zero", "sha256": "00", "first_layer": 0, "last_layer": 1, "embed": true,
    "head": true}}]})";
  const auto t0 = Clock::now();
  const CliResult r = run_cli("pipeline run --plan " + plan, 60);
  EXPECT_NE(r.rc, 0) << r.output;
  EXPECT_NE(r.output.find("/dev/zero"), std::string::npos) << r.output;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 30.0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::sched
