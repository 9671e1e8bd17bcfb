// SPDX-License-Identifier: Apache-2.0
// RecStream online (recstream_online.h): switches of the stream configuration under load lose no
// query and answer none twice, each answer equals the sequential forward; a switch waits for the
// previous old configuration to drain; decisions by the committed weights and by hill climbing;
// bad input is refused with a clear error while the policy keeps serving.
#include "tandem/recsys/recstream_online.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <thread>

#include "serving_check.h"
#include "tandem/core/error.h"

namespace tandem::rec {
namespace {

const char* const kCycle[] = {"recos:4", "stream-pool:2", "recos:1", "stream-pool:8", "recos:2"};

std::string committed_weights(const char* name = "sim-h100.json") {
  std::string path = TANDEM_SOURCE_DIR;
  path += "/configs/recsys/recstream/";
  path += name;
  return path;
}

// Every switch drained, every query counted once in exactly one configuration.
void check_switch_stats(const RecStreamOnlinePolicy& p, int64_t answered) {
  const nlohmann::json st = p.stats()["online"];
  int64_t completed = 0;
  for (const auto& c : st["configs"]) {
    EXPECT_EQ(c["in_flight"].get<int64_t>(), 0) << c;
    EXPECT_EQ(c["submitted"].get<int64_t>(), c["completed"].get<int64_t>()) << c;
    completed += c["completed"].get<int64_t>();
  }
  EXPECT_EQ(completed, answered);
  EXPECT_TRUE(st["draining"].is_null());
  for (const auto& s : st["switches"]) {
    EXPECT_NE(s["from"], s["to"]) << s;
    ASSERT_TRUE(s["drain_s"].is_number()) << s;  // the old configuration drained
    EXPECT_GE(s["drain_s"].get<double>(), 0) << s;
  }
}

// 32 clients on the CPU executor (wall clock), a forced switch every 200 ms.
TEST(RecStreamOnline, ForcedSwitchesOnTheCpuLoseNoQuery) {
  Fixture fx("tiny-dlrm");
  CpuExecutor ex(test_cpu_profile());
  auto p = make_recstream_online(fx.model, ex, {.period_s = 1e3});  // forced switches only
  std::atomic<bool> stop{false};
  int forced = 0;
  std::thread switcher([&] {
    for (int i = 0; !stop.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (!stop.load()) p->force_switch(kCycle[i % 5]), ++forced;
    }
  });
  const LoadStats s = check_served(fx, *p, "recstream-online", 32, nullptr, 1.0);
  stop = true;
  switcher.join();
  check_switch_stats(*p, s.completed);
  const nlohmann::json st = p->stats()["online"];
  EXPECT_GE(forced, 2);
  EXPECT_GE(st["switches"].size(), 1u);  // the rest may have replaced one still waiting
  for (const auto& sw : st["switches"]) EXPECT_EQ(sw["reason"], "forced");
}

// The same in simulated time on SimExecutor: a forced switch every 20 simulated ms (the 200 ms
// of the wall-clock test scaled to a 0.12 s run).
TEST(RecStreamOnline, ForcedSwitchesInSimulatedTimeLoseNoQuery) {
  Fixture fx("tiny-din");
  SimExecutor ex(sim_device("h100"));
  auto p = make_recstream_online(fx.model, ex, {.period_s = 1e3});
  bool live = true;
  int i = 0;
  std::function<void()> tick = [&] {
    if (!live) return;
    p->force_switch(kCycle[i++ % 5]);
    ex.at(ex.now_us() + 2e3, tick);
  };
  ex.at(ex.now_us() + 2e3, tick);
  const LoadStats s = check_served(fx, *p, "recstream-online", 32, &ex, 0.012);
  live = false;
  check_switch_stats(*p, s.completed);
  const nlohmann::json sw = p->stats()["online"]["switches"];
  EXPECT_GE(sw.size(), 4u);
  int64_t drained = 0;
  for (const auto& r : sw) drained += r["drained"].get<int64_t>();
  EXPECT_GT(drained, 0);  // switched while the old configuration had queries in flight
}

// A switch while the old configuration has queries in flight drains them there; a second forced
// switch waits for that drain, then applies.
TEST(RecStreamOnline, SecondSwitchWaitsForTheDrain) {
  Fixture fx("tiny-dlrm", 8);
  SimExecutor ex(sim_device("h100"));
  auto p = make_recstream_online(fx.model, ex, {});
  std::vector<std::future<Response>> futs;
  for (const auto& q : fx.pool) futs.push_back(p->submit(q));
  p->force_switch("recos:2");
  EXPECT_EQ(p->current_config(), "recos:2");
  futs.push_back(p->submit(fx.pool[0]));  // goes to recos:2
  p->force_switch("recos:4");             // stream-pool:1 still drains: waits
  EXPECT_EQ(p->current_config(), "recos:2");
  EXPECT_EQ(p->stats()["online"]["pending"], "recos:4");
  ex.run_until_idle();
  EXPECT_EQ(p->current_config(), "recos:4");
  for (size_t k = 0; k < futs.size(); ++k) {
    const Response r = futs[k].get();
    EXPECT_EQ(r.id, int64_t(k));
    EXPECT_EQ(r.scores, fx.expected[k % fx.pool.size()]);
  }
  const nlohmann::json sw = p->stats()["online"]["switches"];
  ASSERT_EQ(sw.size(), 2u);
  EXPECT_EQ(sw[0]["from"], "stream-pool:1");
  EXPECT_EQ(sw[0]["drained"], 8);
  EXPECT_GT(sw[0]["drain_s"].get<double>(), 0);
  EXPECT_EQ(sw[1]["from"], "recos:2");
  EXPECT_EQ(sw[1]["to"], "recos:4");
  EXPECT_GE(sw[1]["t_s"].get<double>(),
            sw[0]["t_s"].get<double>() + sw[0]["drain_s"].get<double>());
  check_switch_stats(*p, int64_t(futs.size()));
}

// The committed SimGPU H100 weights decide: predictions are reported beside the measured p99, and
// a switch happens only for a predicted gain over min_gain.
TEST(RecStreamOnline, WeightsDecideInSimulatedTime) {
  Fixture fx("tiny-dlrm");
  SimExecutor ex(sim_device("h100"));
  auto p = make_recstream_online(
      fx.model, ex, {.weights = committed_weights(), .window_s = 0.001, .period_s = 0.001});
  const LoadStats s = check_served(fx, *p, "recstream-online", 32, &ex, 0.005);
  check_switch_stats(*p, s.completed);
  const nlohmann::json st = p->stats()["online"];
  EXPECT_EQ(st["mode"], "recstream");
  EXPECT_GE(st["predictions"].get<int64_t>(), 1);
  const nlohmann::json& last = st["last_prediction"];
  EXPECT_EQ(last["predicted_p99_ms_per_config"].size(), 10u);
  EXPECT_GT(last["z"][0].get<double>(), 3.0);  // log2 of about 32 queries in flight
  for (const auto& sw : st["switches"]) {
    EXPECT_EQ(sw["reason"], "recstream");
    EXPECT_GT(sw["predicted_gain"].get<double>(), 0.05) << sw;
  }
  EXPECT_TRUE(st["decision_errors"].empty());
}

// Without weights (and with weights for another executor) hill climbing over K decides.
TEST(RecStreamOnline, HillClimbingWithoutFittingWeights) {
  Fixture fx("tiny-dlrm");
  SimExecutor ex(sim_device("a100"));
  auto p = make_recstream_online(
      fx.model, ex, {.weights = committed_weights(), .window_s = 0.002, .period_s = 0.001});
  const nlohmann::json before = p->stats()["online"];
  EXPECT_EQ(before["mode"], "hill");
  EXPECT_NE(before["mode_reason"].get<std::string>().find("do not fit"), std::string::npos);
  const LoadStats s = check_served(fx, *p, "recstream-online", 32, &ex, 0.01);
  check_switch_stats(*p, s.completed);
  const nlohmann::json sw = p->stats()["online"]["switches"];
  ASSERT_GE(sw.size(), 1u);
  EXPECT_EQ(sw[0]["reason"], "hill-probe");
  EXPECT_EQ(sw[0]["from"], "stream-pool:1");
  EXPECT_EQ(sw[0]["to"], "stream-pool:2");  // the first probe doubles K
  for (const auto& r : sw) {
    const std::string reason = r["reason"];
    EXPECT_TRUE(reason == "hill-probe" || reason == "hill-settle") << r;
    EXPECT_TRUE(r["measured_from_p99_ms"].is_number()) << r;
  }
}

// The CPU executor's committed weights load and decide on a CpuExecutor, and fit no simulator.
TEST(RecStreamOnline, CommittedCpuWeightsFitOnlyTheCpuExecutor) {
  Fixture fx("tiny-dlrm");
  CpuExecutor cpu(test_cpu_profile());
  auto on_cpu =
      make_recstream_online(fx.model, cpu, {.weights = committed_weights("cpu-2core.json")});
  EXPECT_EQ(on_cpu->stats()["online"]["mode"], "recstream");
  SimExecutor sim(sim_device("h100"));
  auto on_sim =
      make_recstream_online(fx.model, sim, {.weights = committed_weights("cpu-2core.json")});
  EXPECT_EQ(on_sim->stats()["online"]["mode"], "hill");
}

void write_file(const std::string& path, const nlohmann::json& j) {
  std::ofstream(path) << j.dump();
}

TEST(RecStreamOnline, BadInputIsRefusedAndServingGoesOn) {
  Fixture fx("tiny-dlrm", 4);
  SimExecutor ex(sim_device("h100"));
  EXPECT_THROW(make_recstream_online(fx.model, ex, {.period_s = 0}), InvalidArgument);
  EXPECT_THROW(make_recstream_online(fx.model, ex, {.period_s = -1}), InvalidArgument);
  EXPECT_THROW(make_recstream_online(fx.model, ex, {.window_s = 0}), InvalidArgument);
  EXPECT_THROW(make_recstream_online(fx.model, ex, {.initial = "fcfs:2"}), InvalidArgument);
  EXPECT_THROW(make_recstream_online(fx.model, ex, {.weights = "/nonexistent/w.json"}), IoError);

  nlohmann::json w;
  std::ifstream(committed_weights()) >> w;
  const std::string dir = ::testing::TempDir();
  nlohmann::json bad_version = w, bad_shape = w;
  bad_version["version"] = 2;
  bad_shape["W2"][0].push_back(0.5);  // one row one column too wide
  write_file(dir + "recstream-v2.json", bad_version);
  write_file(dir + "recstream-shape.json", bad_shape);
  EXPECT_THROW(make_recstream_online(fx.model, ex, {.weights = dir + "recstream-v2.json"}),
               ParseError);

  auto p = make_recstream_online(fx.model, ex, {.weights = committed_weights()});
  auto fut = p->submit(fx.pool[0]);
  EXPECT_THROW(p->force_switch("recos:zero"), InvalidArgument);
  EXPECT_THROW(p->force_switch("fcfs:1"), InvalidArgument);
  try {
    p->load_weights(dir + "recstream-shape.json");
    ADD_FAILURE() << "a weight file of the wrong shape was read";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("W2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(p->load_weights(dir + "recstream-v2.json"), ParseError);
  EXPECT_EQ(p->stats()["online"]["mode"], "recstream");  // what it had
  EXPECT_EQ(p->current_config(), "stream-pool:1");
  auto fut2 = p->submit(fx.pool[1]);
  ex.run_until_idle();
  EXPECT_EQ(fut.get().scores, fx.expected[0]);
  EXPECT_EQ(fut2.get().scores, fx.expected[1]);
  std::remove((dir + "recstream-v2.json").c_str());
  std::remove((dir + "recstream-shape.json").c_str());
}

}  // namespace
}  // namespace tandem::rec
