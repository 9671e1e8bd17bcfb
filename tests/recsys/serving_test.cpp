// SPDX-License-Identifier: Apache-2.0
// Concurrent serving: under load from many clients every policy returns, for every query, exactly
// the scores of sequential execution (no lost, duplicated or mixed-up results); plus the executor's
// stream semantics, the tracer's Chrome-trace output, open-loop load and bad options.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "recsys_device.h"
#include "tandem/core/error.h"
#include "tandem/recsys/serving.h"
#include "tandem/recsys/workload.h"

namespace tandem::rec {
namespace {

struct Fixture {
  explicit Fixture(const std::string& name, int n_queries = 24)
      : cfg(zoo_config(name)), model(RecModel::generate(cfg)) {
    WorkloadOptions w;
    w.index.dist = IndexDist::kZipf;
    w.size.dist = SizeDist::kUniform;
    w.size.min = 1;
    w.size.max = 9;
    w.variable_pooling = true;
    QueryFactory f(cfg, w);
    for (int i = 0; i < n_queries; ++i) {
      pool.push_back(std::make_shared<QueryInputs>(f.make(uint64_t(i))));
      expected.push_back(model.forward(*pool.back()));
    }
  }
  ModelConfig cfg;
  RecModel model;
  std::vector<std::shared_ptr<const QueryInputs>> pool;
  std::vector<std::vector<float>> expected;
};

void check_policy(Fixture& fx, const PolicyOptions& po, int clients) {
  CpuExecutor ex(test_cpu_profile());
  auto policy = make_policy(fx.model, ex, po);
  std::mutex mu;
  std::set<int64_t> ids;
  int64_t responses = 0, mismatches = 0, duplicates = 0;
  LoadOptions lo;
  lo.clients = clients;
  lo.duration_s = 0.4;
  lo.warmup_s = 0;
  lo.on_response = [&](size_t index, const Response& r) {
    std::lock_guard lk(mu);
    ++responses;
    if (!ids.insert(r.id).second) ++duplicates;
    const auto& want = fx.expected[index];
    bool same = r.scores.size() == want.size();
    for (size_t i = 0; same && i < want.size(); ++i)
      // Merged batches run GEMMs of other shapes, so allow float rounding there only.
      same = po.policy == "dynamic-batch" ? std::abs(r.scores[i] - want[i]) <= 1e-6f
                                          : r.scores[i] == want[i];
    if (!same) ++mismatches;
  };
  const LoadStats s = run_load(*policy, fx.pool, lo);
  EXPECT_GT(responses, clients) << po.policy;
  EXPECT_EQ(s.errors, 0) << po.policy;
  EXPECT_EQ(mismatches, 0) << po.policy << " " << fx.cfg.name;
  EXPECT_EQ(duplicates, 0) << po.policy;
  EXPECT_EQ(s.completed, responses) << po.policy;
  EXPECT_EQ(int64_t(ids.size()), responses);
  // Ids are the submit order 0..n-1: none lost.
  EXPECT_EQ(*ids.rbegin(), responses - 1) << po.policy;
  EXPECT_GT(s.latency_ms.p99, 0);
  EXPECT_LE(s.latency_ms.p50, s.latency_ms.p99);
  EXPECT_LE(s.queue_ms.mean, s.latency_ms.mean);
}

TEST(RecServing, EveryPolicyReturnsTheSequentialResultsUnderLoad) {
  for (const char* model : {"tiny-dlrm", "tiny-din", "tiny-bst"}) {
    Fixture fx(model);
    for (const auto& name : policy_names()) {
      PolicyOptions po;
      po.policy = name;
      po.streams = 3;
      po.max_batch_rows = 16;
      po.max_queue_delay_us = 300;
      check_policy(fx, po, 12);
    }
  }
}

TEST(RecServing, DynamicBatchingMergesQueries) {
  Fixture fx("tiny-wnd");
  CpuExecutor ex(test_cpu_profile());
  PolicyOptions po;
  po.policy = "dynamic-batch";
  po.streams = 1;
  po.max_batch_rows = 64;
  po.max_queue_delay_us = 20000;
  auto policy = make_policy(fx.model, ex, po);
  std::vector<std::future<Response>> futs;
  for (int i = 0; i < 6; ++i) futs.push_back(policy->submit(fx.pool[i]));
  int64_t max_batch = 0;
  for (int i = 0; i < 6; ++i) {
    Response r = futs[i].get();
    EXPECT_EQ(r.scores.size(), fx.expected[i].size());
    for (size_t k = 0; k < r.scores.size(); ++k) EXPECT_NEAR(r.scores[k], fx.expected[i][k], 1e-6);
    max_batch = std::max(max_batch, r.batch_rows);
  }
  EXPECT_GT(max_batch, fx.pool[0]->rows);  // at least two queries shared a launch
}

TEST(RecServing, BadQueriesAndOptionsAreRejected) {
  Fixture fx("tiny-dlrm", 2);
  CpuExecutor ex(test_cpu_profile());
  auto policy = make_policy(fx.model, ex, {});
  auto bad = std::make_shared<QueryInputs>(*fx.pool[0]);
  bad->dense.clear();
  EXPECT_THROW(policy->submit(bad), InvalidArgument);
  PolicyOptions po;
  po.policy = "round-robin";
  EXPECT_THROW(make_policy(fx.model, ex, po), InvalidArgument);
  po.policy = "stream-pool";
  po.streams = 0;
  EXPECT_THROW(make_policy(fx.model, ex, po), InvalidArgument);
}

TEST(RecServing, ExecutorStreamsEventsAndTrace) {
  Fixture fx("tiny-bst", 2);
  CpuExecutor ex(test_cpu_profile());
  Tracer tracer;
  ex.set_tracer(&tracer);
  const int s0 = ex.create_stream(), s1 = ex.create_stream();
  // Split one query over two streams: the first half of the nodes on s0, the rest on s1 after an
  // event; the result equals sequential execution.
  QueryState st = fx.model.make_state(*fx.pool[0]);
  const auto& order = fx.model.topological_order();
  const size_t half = order.size() / 2;
  for (size_t i = 0; i < half; ++i) ex.launch(s0, {&fx.model, order[i], &st, 7, "X"});
  auto e = ex.create_event();
  ex.record(*e, s0);
  ex.wait(s1, *e);
  for (size_t i = half; i < order.size(); ++i) ex.launch(s1, {&fx.model, order[i], &st, 7, "X"});
  void* p = ex.alloc_async(256, s1);
  ex.free_async(p, 256, s1);
  ex.synchronize();
  EXPECT_TRUE(ex.done(*e));
  EXPECT_EQ(fx.model.scores(st), fx.expected[0]);
  EXPECT_EQ(tracer.size(), order.size());
  const auto j = tracer.chrome_json();
  int spans = 0;
  for (const auto& ev : j["traceEvents"])
    if (ev["ph"] == "X") {
      ++spans;
      EXPECT_GE(ev["dur"].get<double>(), 0.0);
      EXPECT_EQ(ev["args"]["query"], 7);
    }
  EXPECT_EQ(spans, int(order.size()));
  EXPECT_GT(tracer.mean_overlap(), 0.0);
  EXPECT_LE(tracer.mean_overlap(), 2.0 + 1e-9);  // two streams
  EXPECT_THROW(ex.launch(5, {&fx.model, 0, &st, 0, ""}), InvalidArgument);
}

TEST(RecServing, AFailingNodeIsKeptInTheQueryState) {
  Fixture fx("tiny-dlrm", 1);
  CpuExecutor ex(test_cpu_profile());
  // The output node launched before its inputs throws inside the stream; the executor keeps the
  // error in the state (policies hand it to the query's promise) instead of losing it.
  QueryState st = fx.model.make_state(*fx.pool[0]);
  const int s = ex.create_stream();
  ex.launch(s, {&fx.model, fx.model.topological_order().back(), &st, 0, ""});  // inputs missing
  ex.synchronize();
  ASSERT_TRUE(static_cast<bool>(st.error));
  EXPECT_THROW(std::rethrow_exception(st.error), Error);
}

TEST(RecServing, OpenLoopPoissonLoad) {
  Fixture fx("tiny-dlrm", 8);
  CpuExecutor ex(test_cpu_profile());
  auto policy = make_policy(fx.model, ex, {.policy = "stream-pool", .streams = 2});
  std::atomic<int> n{0};
  LoadOptions lo;
  lo.rate_qps = 400;
  lo.duration_s = 0.3;
  lo.warmup_s = 0;
  lo.on_response = [&](size_t, const Response&) { ++n; };
  const LoadStats s = run_load(*policy, fx.pool, lo);
  EXPECT_EQ(s.errors, 0);
  EXPECT_EQ(s.completed, n.load());
  EXPECT_GT(s.completed, 40);  // ~120 expected; the bound only checks that arrivals happened
  EXPECT_EQ(s.clients, 0);
  EXPECT_NEAR(s.rate_qps, 400, 1e-9);
}

// A policy that answers every query only after `delay`, counting how many are outstanding.
class SlowPolicy final : public ServingPolicy {
 public:
  explicit SlowPolicy(std::chrono::milliseconds delay) : delay_(delay) {}
  ~SlowPolicy() override {
    for (auto& t : threads_) t.join();
  }
  std::string name() const override { return "slow"; }
  std::future<Response> submit(std::shared_ptr<const QueryInputs>) override {
    const int now = ++outstanding_;
    int seen = max_outstanding_.load();
    while (now > seen && !max_outstanding_.compare_exchange_weak(seen, now)) {
    }
    auto promise = std::make_shared<std::promise<Response>>();
    threads_.emplace_back([this, promise] {
      std::this_thread::sleep_for(delay_);
      --outstanding_;
      promise->set_value(Response{});
    });
    return promise->get_future();
  }
  int max_outstanding() const { return max_outstanding_.load(); }

 private:
  std::chrono::milliseconds delay_;
  std::atomic<int> outstanding_{0}, max_outstanding_{0};
  std::vector<std::thread> threads_;
};

// An open loop far faster than the policy (1e12 queries/s grew to 11 GB before issue 24) keeps
// at most max_outstanding queries in flight and counts the arrivals it drops.
TEST(RecServing, OpenLoopOverloadIsBoundedAndCounted) {
  Fixture fx("tiny-dlrm", 2);
  SlowPolicy policy(std::chrono::milliseconds(50));
  LoadOptions lo;
  lo.rate_qps = 1e5;
  lo.duration_s = 0.3;
  lo.warmup_s = 0;
  lo.max_outstanding = 4;
  const LoadStats s = run_load(policy, fx.pool, lo);
  EXPECT_LE(policy.max_outstanding(), 4);
  EXPECT_GT(s.dropped, 1000);
  EXPECT_GT(s.completed, 0);
  EXPECT_EQ(s.to_json()["dropped"], s.dropped);
  lo.rate_qps = 1e12;
  EXPECT_THROW(run_load(policy, fx.pool, lo), InvalidArgument);
  lo.rate_qps = 100;
  lo.max_outstanding = 0;
  EXPECT_THROW(run_load(policy, fx.pool, lo), InvalidArgument);
}

}  // namespace
}  // namespace tandem::rec
