// SPDX-License-Identifier: Apache-2.0
// The admission layer (admission.h) in simulated time, where the order of events is exact:
// back-pressure, timeouts (REJECT never runs a request, DELAY runs it after the others), priority
// levels, preserve_ordering, the load generator's counts, and bad options.
#include <gtest/gtest.h>

#include <set>

#include "serving_check.h"
#include "tandem/core/error.h"
#include "tandem/recsys/admission.h"
#include "tandem/recsys/serving.h"
#include "tandem/recsys/sim_executor.h"

namespace tandem::rec {
namespace {

// tiny-dlrm on SimGPU, fcfs behind the admission layer with one request in flight.
struct OneAtATime {
  explicit OneAtATime(int queries, AdmissionOptions a = {}) : fx("tiny-dlrm", queries) {
    PolicyOptions po;
    po.admission = a;
    po.admission.max_in_flight = 1;
    policy = make_policy(fx.model, ex, po);
  }
  Fixture fx;
  SimExecutor ex{sim_device("h100")};
  std::unique_ptr<ServingPolicy> policy;
};

// The submit-order ids (Response::id) in the order the requests were answered.
struct AnswerOrder {
  std::vector<int64_t> ids;
  RequestMeta meta(int64_t priority = 1, double timeout_us = 0) {
    RequestMeta m{.priority = priority, .timeout_us = timeout_us};
    m.on_done = [this](const Response* r, std::exception_ptr) {
      if (r) ids.push_back(r->id);
    };
    return m;
  }
};

Rejected::Reason reason_of(std::future<Response>& f) {
  try {
    f.get();
  } catch (const Rejected& e) {
    return e.reason();
  }
  ADD_FAILURE() << "the request was not rejected";
  return Rejected::Reason::kQueueFull;
}

TEST(RecAdmission, AFullQueueRejectsAtOnceAndTheOthersAreServed) {
  OneAtATime s(6, {.max_queue_size = 2});
  auto& [fx, ex, policy] = s;
  std::vector<std::future<Response>> f;
  for (int i = 0; i < 5; ++i) f.push_back(policy->submit(fx.pool[i]));
  // One in flight, two waiting: the fourth and fifth find the queue full and are answered now.
  for (int i : {3, 4}) {
    ASSERT_EQ(f[i].wait_for(std::chrono::seconds(0)), std::future_status::ready);
    try {
      f[i].get();
      ADD_FAILURE() << "request " << i << " was served";
    } catch (const Rejected& e) {
      EXPECT_EQ(e.reason(), Rejected::Reason::kQueueFull);
      EXPECT_NE(std::string(e.what()).find("model 'tiny-dlrm'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("max_queue_size 2"), std::string::npos) << e.what();
    }
  }
  ex.run_until_idle();
  for (int i : {0, 1, 2}) EXPECT_EQ(f[i].get().scores, fx.expected[i]);
  auto later = policy->submit(fx.pool[5]);  // the queue drained: admitted again
  ex.run_until_idle();
  EXPECT_EQ(later.get().scores, fx.expected[5]);
  EXPECT_EQ(policy->stats()["admission"]["rejected_queue_full"], 2);
}

TEST(RecAdmission, BackPressureOnTheCpuExecutorNeverHangs) {
  Fixture fx("tiny-dlrm", 16);
  CpuExecutor ex(test_cpu_profile());
  PolicyOptions po;
  po.policy = "stream-pool";
  po.admission = {.max_queue_size = 1, .max_in_flight = 1};
  auto policy = make_policy(fx.model, ex, po);
  std::vector<std::future<Response>> f;
  for (size_t i = 0; i < fx.pool.size(); ++i) f.push_back(policy->submit(fx.pool[i]));
  int answered = 0, rejected = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    try {
      EXPECT_EQ(f[i].get().scores, fx.expected[i]);
      ++answered;
    } catch (const Rejected& e) {
      EXPECT_EQ(e.reason(), Rejected::Reason::kQueueFull);
      ++rejected;
    }
  }
  EXPECT_GE(answered, 1);
  EXPECT_EQ(answered + rejected, 16);
}

TEST(RecAdmission, TimeoutRejectNeverRunsTheRequest) {
  OneAtATime s(4);
  auto& [fx, ex, policy] = s;
  auto a = policy->submit(fx.pool[0]);                     // runs at once: never times out
  auto b = policy->submit(fx.pool[1], {.timeout_us = 1});  // waits longer than 1 µs
  auto c = policy->submit(fx.pool[2], {.timeout_us = 1});  //
  auto d = policy->submit(fx.pool[3], {.timeout_us = 0});  // no timeout
  ex.run_until_idle();
  EXPECT_EQ(a.get().scores, fx.expected[0]);
  EXPECT_EQ(reason_of(b), Rejected::Reason::kTimeout);
  EXPECT_EQ(reason_of(c), Rejected::Reason::kTimeout);
  EXPECT_EQ(d.get().scores, fx.expected[3]);
  std::set<int64_t> ran;  // the queries whose ops the device ran
  for (const auto& s : ex.schedule()) ran.insert(s.query);
  EXPECT_EQ(ran.size(), 2u);
}

TEST(RecAdmission, TimeoutDelayRunsTheRequestAfterTheOthers) {
  OneAtATime s(4, {.timeout_action = TimeoutAction::kDelay});
  auto& [fx, ex, policy] = s;
  AnswerOrder order;
  std::vector<std::future<Response>> f;
  f.push_back(policy->submit(fx.pool[0], order.meta()));
  f.push_back(policy->submit(fx.pool[1], order.meta(1, 1)));  // times out: delayed
  f.push_back(policy->submit(fx.pool[2], order.meta(1, 1e9)));
  f.push_back(policy->submit(fx.pool[3], order.meta()));
  ex.run_until_idle();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(f[i].get().scores, fx.expected[i]);
  EXPECT_EQ(order.ids, (std::vector<int64_t>{0, 2, 3, 1}));
  EXPECT_EQ(policy->stats()["admission"]["delayed"], 1);
}

TEST(RecAdmission, HigherPriorityLeavesTheQueueFirst) {
  OneAtATime s(5, {.priority_levels = 3});
  auto& [fx, ex, policy] = s;
  AnswerOrder order;
  std::vector<std::future<Response>> f;
  for (int64_t p : {3, 3, 1, 2, 1}) f.push_back(policy->submit(fx.pool[f.size()], order.meta(p)));
  ex.run_until_idle();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(f[i].get().scores, fx.expected[i]);
  // 0 was in flight already; then level 1 (2, 4), level 2 (3), level 3 (1).
  EXPECT_EQ(order.ids, (std::vector<int64_t>{0, 2, 4, 3, 1}));
}

TEST(RecAdmission, PreserveOrderingAnswersInSubmitOrder) {
  Fixture fx("tiny-dlrm", 1);
  WorkloadOptions w;
  QueryFactory qf(fx.cfg, w);
  auto big = std::make_shared<QueryInputs>(qf.make(1, 4096));
  auto small = std::make_shared<QueryInputs>(qf.make(2, 1));
  for (bool preserve : {false, true}) {
    SimExecutor ex(sim_device("h100"));
    PolicyOptions po;
    po.policy = "stream-pool";
    po.streams = 2;
    po.admission.max_in_flight = 2;
    po.admission.preserve_ordering = preserve;
    auto policy = make_policy(fx.model, ex, po);
    AnswerOrder order;
    auto a = policy->submit(big, order.meta());
    auto b = policy->submit(small, order.meta());
    ex.run_until_idle();
    EXPECT_EQ(a.get().scores, fx.model.forward(*big));
    EXPECT_EQ(b.get().scores, fx.model.forward(*small));
    // Without it the small query, on the other stream, is answered first.
    EXPECT_EQ(order.ids, preserve ? (std::vector<int64_t>{0, 1}) : (std::vector<int64_t>{1, 0}));
  }
}

TEST(RecAdmission, TheLoadGeneratorCountsRejectionsApart) {
  for (TimeoutAction action : {TimeoutAction::kReject, TimeoutAction::kDelay}) {
    OneAtATime served(8, {.max_queue_size = 3, .default_timeout_us = 30, .timeout_action = action});
    auto& [fx, ex, policy] = served;
    LoadOptions lo;
    lo.clients = 8;
    lo.duration_s = 0.002;
    lo.warmup_s = 0;
    lo.reject_backoff_s = 20e-6;
    const LoadStats s = run_sim_load(*policy, ex, fx.pool, lo);
    EXPECT_GT(s.completed, 0);
    EXPECT_GT(s.rejected, 0);
    EXPECT_EQ(s.errors, 0);
    if (action == TimeoutAction::kReject)
      EXPECT_GT(s.timed_out, 0);
    else
      EXPECT_EQ(s.timed_out, 0);
    const auto j = s.to_json();
    EXPECT_EQ(j["rejected"], s.rejected);
    EXPECT_EQ(j["timed_out"], s.timed_out);
  }
}

TEST(RecAdmission, BadOptionsAndRequestsAreInvalidArguments) {
  Fixture fx("tiny-dlrm", 1);
  SimExecutor ex(sim_device("h100"));
  auto expect_bad = [&](AdmissionOptions a) {
    PolicyOptions po;
    po.admission = a;
    EXPECT_THROW(make_policy(fx.model, ex, po), InvalidArgument);
  };
  expect_bad({.max_queue_size = -1});
  expect_bad({.priority_levels = -2});
  expect_bad({.default_timeout_us = -5});
  expect_bad({.max_in_flight = -1});
  EXPECT_THROW(parse_timeout_action("drop"), InvalidArgument);
  EXPECT_EQ(parse_timeout_action("delay"), TimeoutAction::kDelay);
  PolicyOptions po;
  po.admission.priority_levels = 2;
  auto policy = make_policy(fx.model, ex, po);
  EXPECT_THROW(policy->submit(fx.pool[0], {.priority = 3}), InvalidArgument);
  EXPECT_THROW(policy->submit(fx.pool[0], {.timeout_us = -1}), InvalidArgument);
  auto plain = make_policy(fx.model, ex, {});  // without admission, the policy checks it too
  EXPECT_THROW(plain->submit(fx.pool[0], {.timeout_us = -1}), InvalidArgument);
}

}  // namespace
}  // namespace tandem::rec
