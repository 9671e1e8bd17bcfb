// SPDX-License-Identifier: Apache-2.0
// Shared by the device tests of the recommender models: every tiny zoo model (each table dtype) is
// run once on the CPU nodes and once through the device path (RecModel::to), on the same queries,
// and the scores must agree within a tolerance that covers a different f32 summation order.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tandem/core/stream.h"
#include "tandem/recsys/model.h"
#include "tandem/recsys/workload.h"

namespace tandem::rec::testing {

inline const std::vector<std::string>& tiny_models() {
  static const std::vector<std::string> names = {"tiny-dlrm", "tiny-dlrm-cat", "tiny-wnd",
                                                 "tiny-din", "tiny-bst"};
  return names;
}

// Scores of `in` through the device path, node by node in topological order on `stream` (may be
// null).
inline std::vector<float> run_on_stream(const RecModel& m, const QueryInputs& in, Stream* stream) {
  m.validate(in);
  QueryState st = m.make_state(in);
  st.stream = stream;
  for (int id : m.topological_order()) m.run_node(id, st);
  return m.scores(st);
}

// For each tiny model and table dtype: the model moved to `device` (ops_on_cpu for the CPU) gives
// the CPU model's scores on queries of 1, 4 and 17 rows, without and with a stream.
inline void expect_device_matches_cpu(Device device, bool ops_on_cpu) {
  constexpr double kTol = 2e-5;  // scores in (0, 1); f32 sums in another order
  for (const std::string& name : tiny_models()) {
    for (DType dt : {DType::kF32, DType::kF16, DType::kI8}) {
      ModelConfig cfg = zoo_config(name);
      cfg.table_dtype = dt;
      const RecModel cpu = RecModel::generate(cfg);
      RecModel dev = RecModel::generate(cfg);
      dev.to(device, ops_on_cpu);
      ASSERT_EQ(dev.device(), device);
      WorkloadOptions w;
      w.variable_pooling = true;
      w.seed = 21;
      QueryFactory f(cfg, w);
      std::unique_ptr<Stream> stream = create_stream(device);
      uint64_t tag = 0;
      for (int64_t rows : {1, 4, 17}) {
        const QueryInputs q = f.make(tag++, rows);
        const std::vector<float> want = cpu.forward(q);
        for (Stream* s : {static_cast<Stream*>(nullptr), stream.get()}) {
          const std::vector<float> got = s ? run_on_stream(dev, q, s) : dev.forward(q);
          ASSERT_EQ(got.size(), want.size());
          for (size_t i = 0; i < want.size(); ++i)
            EXPECT_NEAR(got[i], want[i], kTol) << name << " " << dtype_name(dt) << " rows=" << rows
                                               << " row " << i << (s ? " (stream)" : "");
        }
      }
    }
  }
}

}  // namespace tandem::rec::testing
