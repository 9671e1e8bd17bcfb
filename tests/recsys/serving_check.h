// SPDX-License-Identifier: Apache-2.0
// What the serving tests share: a model with a pool of queries and their sequential scores, and
// check_policy, which serves them under closed-loop load and checks every answer.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "recsys_device.h"
#include "tandem/recsys/serving.h"
#include "tandem/recsys/sim_executor.h"
#include "tandem/recsys/workload.h"

namespace tandem::rec {

struct Fixture {
  // n_queries queries of 1..max_rows rows.
  explicit Fixture(const std::string& name, int n_queries = 24, int64_t max_rows = 9)
      : cfg(zoo_config(name)), model(RecModel::generate(cfg)) {
    WorkloadOptions w;
    w.index.dist = IndexDist::kZipf;
    w.size.dist = SizeDist::kUniform;
    w.size.min = 1;
    w.size.max = max_rows;
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

// The op-level schedulers (issue 20) next to the baselines.
inline const char* const kOpPolicies[] = {"recos", "race", "recos+race", "b4"};

// Wall-clock test loads run this many times longer under the thread sanitizer (CI's TSan phase),
// which slows the executor's threads by an order of magnitude: every client must still be
// answered more than once.
#if defined(__SANITIZE_THREAD__)
inline constexpr double kWallTimeScale = 10;
#else
inline constexpr double kWallTimeScale = 1;
#endif

// Runs `clients` closed-loop clients against `policy` (built over `sim` when given, simulated
// time; else over a wall-clock executor, duration_s x kWallTimeScale) and checks every answer
// against sequential execution: scores within `tolerance`, each query answered exactly once, ids
// 0..n-1 (none lost). `tag` names the policy in failures.
inline LoadStats check_served(Fixture& fx, ServingPolicy& policy, const std::string& tag,
                              int clients, SimExecutor* sim, double duration_s,
                              float tolerance = 0) {
  std::mutex mu;
  std::set<int64_t> ids;
  int64_t responses = 0, mismatches = 0, duplicates = 0;
  LoadOptions lo;
  lo.clients = clients;
  lo.duration_s = sim ? duration_s : duration_s * kWallTimeScale;
  lo.warmup_s = 0;
  lo.on_response = [&](size_t index, const Response& r) {
    std::lock_guard lk(mu);
    ++responses;
    if (!ids.insert(r.id).second) ++duplicates;
    const auto& want = fx.expected[index];
    bool same = r.scores.size() == want.size();
    for (size_t i = 0; same && i < want.size(); ++i)
      same = std::abs(r.scores[i] - want[i]) <= tolerance;
    if (!same) ++mismatches;
  };
  const LoadStats s = sim ? run_sim_load(policy, *sim, fx.pool, lo) : run_load(policy, fx.pool, lo);
  // Every client got its first answer; in simulated time the window always holds more. On a wall
  // clock a loaded machine (ctest -j2 beside other jobs) may answer each client only once in the
  // window, so more than one round is not asserted there.
  if (sim) {
    EXPECT_GT(responses, clients) << tag;
  } else {
    EXPECT_GE(responses, clients) << tag;
  }
  EXPECT_EQ(s.errors, 0) << tag;
  EXPECT_EQ(mismatches, 0) << tag << " " << fx.cfg.name;
  EXPECT_EQ(duplicates, 0) << tag;
  EXPECT_EQ(s.completed, responses) << tag;
  EXPECT_EQ(int64_t(ids.size()), responses);
  // Ids are the submit order 0..n-1: none lost.
  if (!ids.empty()) EXPECT_EQ(*ids.rbegin(), responses - 1) << tag;
  EXPECT_GT(s.latency_ms.p99, 0);
  EXPECT_LE(s.latency_ms.p50, s.latency_ms.p99);
  EXPECT_LE(s.queue_ms.mean, s.latency_ms.mean);
  return s;
}

// check_served for the policy `po` names, on the CPU executor (`wall`, or a CpuExecutor of its own
// when null) or on `sim` when given.
inline void check_policy(Fixture& fx, const PolicyOptions& po, int clients,
                         SimExecutor* sim = nullptr, double duration_s = 0.4,
                         Executor* wall = nullptr) {
  CpuExecutor cpu(test_cpu_profile());
  Executor& ex = sim ? static_cast<Executor&>(*sim) : wall ? *wall : cpu;
  auto policy = make_policy(fx.model, ex, po);
  // Merged batches run GEMMs of other shapes, so allow float rounding there only.
  check_served(fx, *policy, po.policy, clients, sim, duration_s,
               po.policy == "dynamic-batch" ? 1e-6f : 0.0f);
}

}  // namespace tandem::rec
