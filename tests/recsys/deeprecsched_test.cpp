// SPDX-License-Identifier: Apache-2.0
// DeepRecSched (deeprecsched.h) in simulated time: two SimExecutors on one clock, split scores
// equal to the unsplit query's, offload by size, the tuner's determinism and its relation to the
// static configuration (B6), and bad options.
#include <gtest/gtest.h>

#include <set>

#include "serving_check.h"
#include "tandem/core/error.h"
#include "tandem/recsys/deeprecsched.h"
#include "tandem/recsys/sim_executor.h"

namespace tandem::rec {
namespace {

// Rows are computed independently, but GEMMs of other row counts may round differently.
void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-6) << "row " << k;
}

struct TwoDevices {
  SimExecutor gpu{sim_device("h100")};
  SimExecutor cpu{sim_cpu_device(test_cpu_profile()), {.seed = 2}, gpu};
};

const PolicyOptions kEngines{.policy = "stream-pool", .streams = 4};
const PolicyOptions kAccel{.policy = "fcfs"};

TEST(RecDeepRecSched, TwoExecutorsShareOneClock) {
  Fixture fx("tiny-dlrm", 2);
  TwoDevices d;
  auto on_gpu = make_policy(fx.model, d.gpu, kAccel);
  auto on_cpu = make_policy(fx.model, d.cpu, kAccel);
  auto a = on_gpu->submit(fx.pool[0]);
  auto b = on_cpu->submit(fx.pool[1]);
  d.gpu.run_until_idle();  // driving one runs the other's ops too
  EXPECT_EQ(a.get().scores, fx.expected[0]);
  EXPECT_EQ(b.get().scores, fx.expected[1]);
  EXPECT_EQ(d.gpu.now_us(), d.cpu.now_us());
  ASSERT_FALSE(d.cpu.schedule().empty());
  ASSERT_FALSE(d.gpu.schedule().empty());
  // Both queries ran at once on the common time line, which ends with the later of them.
  EXPECT_EQ(d.cpu.schedule().front().start_us, 0);
  EXPECT_EQ(d.gpu.schedule().front().start_us, 0);
  EXPECT_EQ(d.gpu.now_us(),
            std::max(d.cpu.schedule().back().end_us, d.gpu.schedule().back().end_us));
}

TEST(RecDeepRecSched, SplitScoresEqualTheUnsplitQuery) {
  Fixture fx("tiny-dlrm", 12, 40);  // 1..40 rows: a sub-batch of 8 splits most
  const auto& pool = fx.pool;
  TwoDevices d;
  auto policy = make_split_offload(fx.model, d.cpu, kEngines, &d.gpu, kAccel, {.sub_batch = 8});
  std::vector<std::future<Response>> f;
  int64_t parts = 0;
  for (const auto& q : pool) {
    f.push_back(policy->submit(q));
    parts += (q->rows + 7) / 8;
  }
  d.gpu.run_until_idle();
  for (size_t i = 0; i < pool.size(); ++i) {
    const Response r = f[i].get();
    expect_near(r.scores, fx.expected[i]);
    EXPECT_EQ(r.id, int64_t(i));
    EXPECT_LE(r.batch_rows, 8);
  }
  EXPECT_EQ(policy->stats()["sub_requests"], parts);
  EXPECT_EQ(policy->stats()["offloaded"], 0);
  EXPECT_TRUE(d.gpu.schedule().empty());
}

TEST(RecDeepRecSched, OffloadSendsLargeQueriesToTheAccelerator) {
  Fixture fx("tiny-dlrm", 16, 40);
  const auto& pool = fx.pool;
  TwoDevices d;
  const int64_t theta = 20;
  auto policy = make_split_offload(fx.model, d.cpu, kEngines, &d.gpu, kAccel,
                                   {.sub_batch = 8, .offload_threshold = theta});
  std::vector<std::future<Response>> f;
  int64_t large = 0;
  for (const auto& q : pool) {
    f.push_back(policy->submit(q));
    large += q->rows >= theta;
  }
  d.gpu.run_until_idle();
  for (size_t i = 0; i < pool.size(); ++i) expect_near(f[i].get().scores, fx.expected[i]);
  ASSERT_GT(large, 0);
  ASSERT_LT(large, int64_t(pool.size()));
  EXPECT_EQ(policy->stats()["offloaded"], large);
  std::set<int64_t> on_gpu;  // queries whose ops ran on the accelerator
  for (const auto& s : d.gpu.schedule()) on_gpu.insert(s.query);
  EXPECT_EQ(int64_t(on_gpu.size()), large);
}

HillClimbOptions small_climb() {
  return {.target_p95_ms = 0.5,
          .req_granularity = 20,
          .sched_timeout = 12,
          .arr_steps = 4,
          .start_qps = 2000,
          .batch_configs = {32, 16, 8},
          .thresholds = {8, 16, 32}};
}

DeepRecSchedTuning tune_tiny(const RecModel& model,
                             const std::vector<std::shared_ptr<const QueryInputs>>& pool) {
  const HillClimbOptions h = small_climb();
  return tune_deeprecsched(
      [&](const SplitOffload& c, double start) {
        TwoDevices d;
        auto policy = make_split_offload(model, d.cpu, kEngines, &d.gpu, kAccel, c);
        return achievable_qps(*policy, d.gpu, pool, h, start);
      },
      h, true);
}

TEST(RecDeepRecSched, TheTunerIsDeterministicAndAtLeastAsGoodAsStatic) {
  Fixture fx("tiny-dlrm", 32, 40);
  const DeepRecSchedTuning a = tune_tiny(fx.model, fx.pool), b = tune_tiny(fx.model, fx.pool);
  EXPECT_EQ(a.to_json(), b.to_json());
  ASSERT_GE(a.tried.size(), 2u);
  EXPECT_EQ(a.tried.front().config.name(), "static");
  for (const auto& t : a.tried) {
    EXPECT_EQ(int(t.result.rates.size()), small_climb().sched_timeout) << t.config.name();
    EXPECT_GT(t.result.qps, 0) << t.config.name();
  }
  for (const auto& t : a.tried) EXPECT_GE(a.tried[a.best].result.qps, t.result.qps);
  EXPECT_GE(a.tried[a.best].result.qps, a.tried.front().result.qps);
}

TEST(RecDeepRecSched, BadOptionsAreInvalidArguments) {
  Fixture fx("tiny-dlrm", 1);
  TwoDevices d;
  EXPECT_THROW(make_split_offload(fx.model, d.cpu, kEngines, &d.gpu, kAccel, {.sub_batch = -1}),
               InvalidArgument);
  EXPECT_THROW(
      make_split_offload(fx.model, d.cpu, kEngines, nullptr, kAccel, {.offload_threshold = 4}),
      InvalidArgument);
  HillClimbOptions h;
  h.batch_configs = {128, 0};
  EXPECT_THROW(h.validate(), InvalidArgument);
  h = {};
  h.target_p95_ms = -1;
  EXPECT_THROW(h.validate(), InvalidArgument);
  h = {};
  h.req_granularity = 0;
  EXPECT_THROW(h.validate(), InvalidArgument);
  EXPECT_THROW(slice_query(*fx.pool[0], 0, fx.pool[0]->rows + 1), InvalidArgument);
}

}  // namespace
}  // namespace tandem::rec
