// SPDX-License-Identifier: Apache-2.0
// Shared by the DeviceExecutor tests: a model on `device` served by every baseline policy over a
// DeviceExecutor to concurrent clients returns, for every query, exactly the scores of sequential
// execution of that model (dynamic batching merges queries into GEMMs of other shapes, so there
// float rounding is allowed), with no lost or duplicated responses.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "recsys_device.h"
#include "tandem/recsys/serving.h"
#include "tandem/recsys/workload.h"

namespace tandem::rec::testing {

inline void check_device_policies(const std::string& name, Device device, bool ops_on_cpu,
                                  int clients) {
  const ModelConfig cfg = zoo_config(name);
  RecModel model = RecModel::generate(cfg);
  model.to(device, ops_on_cpu);
  WorkloadOptions w;
  w.size.dist = SizeDist::kUniform;
  w.size.min = 1;
  w.size.max = 9;
  w.variable_pooling = true;
  QueryFactory f(cfg, w);
  std::vector<std::shared_ptr<const QueryInputs>> pool;
  std::vector<std::vector<float>> expected;
  for (int i = 0; i < 16; ++i) {
    pool.push_back(std::make_shared<QueryInputs>(f.make(uint64_t(i))));
    expected.push_back(model.forward(*pool.back()));  // sequential, on the device
  }
  for (const std::string& policy : policy_names()) {
    SCOPED_TRACE(name + " " + policy + " on " + device.to_string());
    DeviceExecutor ex(device, test_cpu_profile());
    PolicyOptions po;
    po.policy = policy;
    po.streams = 3;
    std::mutex mu;
    std::set<int64_t> ids;
    int64_t responses = 0, mismatches = 0;
    LoadOptions lo;
    lo.clients = clients;
    lo.duration_s = 0.3;
    lo.warmup_s = 0;
    lo.on_response = [&](size_t index, const Response& r) {
      std::lock_guard lk(mu);
      ++responses;
      ids.insert(r.id);
      const auto& want = expected[index];
      bool same = r.scores.size() == want.size();
      for (size_t i = 0; same && i < want.size(); ++i)
        same = policy == "dynamic-batch" ? std::abs(r.scores[i] - want[i]) <= 1e-5f
                                         : r.scores[i] == want[i];
      if (!same) ++mismatches;
    };
    LoadStats s;
    {
      auto p = make_policy(model, ex, po);
      s = run_load(*p, pool, lo);
    }
    ex.synchronize();
    EXPECT_GT(responses, 0);
    EXPECT_EQ(s.errors, 0);
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(s.completed, responses);
    EXPECT_EQ(static_cast<int64_t>(ids.size()), responses);     // no duplicates
    if (!ids.empty()) EXPECT_EQ(*ids.rbegin(), responses - 1);  // none lost
  }
}

}  // namespace tandem::rec::testing
