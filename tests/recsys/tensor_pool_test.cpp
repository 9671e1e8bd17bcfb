// SPDX-License-Identifier: Apache-2.0
// Unified asynchronous tensor management (the recsys spec §2.4) under the op-level schedulers:
// property tests of the invariant "no block is handed out again while a consumer event of its
// previous tensor is pending". Randomised schedules on SimGPU (seeds, jitter, models, policies,
// streams, issue horizons, 1..64 clients) and randomised worker delays on the CPU executor; each
// run asserts zero violations in the pool's own check, that every answer equals sequential
// execution, that the intermediate outputs really came from the pool, and that none is left in use.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "forwarding_executor.h"
#include "serving_check.h"

namespace tandem::rec {
namespace {

// An issue horizon far beyond any op: the scheduler issues whole queries ahead of execution,
// which leaves the longest time between a free and the consumers it must wait for.
constexpr double kIssueEverything = 1e9;

void expect_pool_clean(const StreamPoolStats& p, const std::vector<std::string>& messages,
                       const std::string& what) {
  EXPECT_EQ(p.violations, 0) << what << ": " << (messages.empty() ? "" : messages.front());
  EXPECT_GT(p.allocations, 0) << what;
  EXPECT_EQ(p.in_use_bytes, 0) << what;  // every intermediate tensor was freed
}

TEST(RecTensorPool, SimGpuRandomisedSchedulesKeepBlocksSafe) {
  const char* const models[] = {"tiny-dlrm", "tiny-wnd", "tiny-din", "tiny-bst"};
  std::vector<std::unique_ptr<Fixture>> fx;
  for (const char* m : models) fx.push_back(std::make_unique<Fixture>(m, 16));
  const int clients[] = {1, 4, 16, 64};
  const double horizons[] = {0, 1, 40, kIssueEverything};
  std::mt19937_64 rng(20);
  int64_t reuses = 0;
  for (uint64_t seed = 1; seed <= 32; ++seed) {
    Fixture& f = *fx[seed % 4];
    PolicyOptions po;
    po.policy = kOpPolicies[rng() % 4];
    po.streams = 2 + static_cast<int>(rng() % 5);
    po.horizon_us = horizons[rng() % 4];
    const double jitter = 0.5 * std::uniform_real_distribution<double>(0, 1)(rng);
    SimExecutor sim(sim_device(rng() % 2 ? "h100" : "a100"), {.seed = seed, .jitter = jitter});
    const int c = clients[(seed / 4) % 4];
    const std::string what = cat(f.cfg.name, " ", po.policy, " seed ", seed, " streams ",
                                 po.streams, " horizon ", po.horizon_us, " clients ", c);
    SCOPED_TRACE(what);
    check_policy(f, po, c, &sim, 2e-3);
    expect_pool_clean(sim.pool_stats(), sim.pool_violations(), what);
    reuses += sim.pool_stats().reuses;
  }
  EXPECT_GT(reuses, 0);
}

TEST(RecTensorPool, WithoutThePoolNodesKeepTheirOwnBuffers) {
  Fixture f("tiny-dlrm", 8);
  SimExecutor sim(sim_device("h100"));
  check_policy(f, {.policy = "recos", .streams = 3, .tensor_pool = false}, 8, &sim, 1e-3);
  EXPECT_EQ(sim.pool_stats().allocations, 0);
}

// Sleeps a random 0..max_us µs on the stream before every op (a slow or preempted worker), and
// delegates everything else, the pool included, to the CPU executor.
class DelayingExecutor final : public ForwardingExecutor {
 public:
  DelayingExecutor(CpuExecutor& inner, uint64_t seed, int max_us)
      : ForwardingExecutor(inner), rng_(seed), max_us_(max_us) {}
  void launch(int s, const OpInstance& op, LaunchLimits limits) override {
    delay(s);
    inner().launch(s, op, limits);
  }
  void launch_group(int s, const std::vector<OpInstance>& ops, LaunchLimits limits) override {
    delay(s);
    inner().launch_group(s, ops, limits);
  }

 private:
  void delay(int s) {
    int us;
    {
      std::lock_guard lk(mu_);
      us = static_cast<int>(rng_() % static_cast<uint64_t>(max_us_ + 1));
    }
    inner().host(s, [us] { std::this_thread::sleep_for(std::chrono::microseconds(us)); });
  }
  std::mutex mu_;
  std::mt19937_64 rng_;
  int max_us_;
};

TEST(RecTensorPool, CpuExecutorRandomWorkerDelaysKeepBlocksSafe) {
  Fixture dlrm("tiny-dlrm", 16), bst("tiny-bst", 16);
  const int clients[] = {4, 16, 64};
  uint64_t seed = 0;
  for (Fixture* f : {&dlrm, &bst})
    for (const char* policy : kOpPolicies) {
      ++seed;
      CpuExecutor cpu(test_cpu_profile());
      DelayingExecutor ex(cpu, seed, 200);
      PolicyOptions po{.policy = policy, .streams = 3};
      po.horizon_us = seed % 2 ? kIssueEverything : 0;
      const int c = clients[seed % 3];
      const std::string what = cat(f->cfg.name, " ", policy, " seed ", seed, " clients ", c);
      SCOPED_TRACE(what);
      check_policy(*f, po, c, nullptr, 0.12, &ex);
      cpu.synchronize();
      expect_pool_clean(cpu.pool_stats(), cpu.pool_violations(), what);
      EXPECT_GT(cpu.pool_stats().reuses, 0) << what;
    }
}

}  // namespace
}  // namespace tandem::rec
