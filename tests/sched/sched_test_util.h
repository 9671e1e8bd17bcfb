// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the sched runtime tests: sched.mlp plans, requests, bit-exact comparison, the
// three-device cluster whose slow middle device keeps packets in flight when a fault hits.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "tandem/core/cluster.h"
#include "tandem/sched/mlp_stage.h"
#include "tandem/sched/pipeline.h"

namespace tandem::sched::test {

// dev0, dev1, dev2 (one thread each); dev1 runs at `slow` of this machine's speed.
inline ClusterSpec slow_middle_cluster(double slow) {
  ClusterSpec c;
  for (int i = 0; i < 3; ++i) {
    DeviceProfile d;
    d.name = "dev";
    d.name += std::to_string(i);
    d.peak_flops = 1e10;
    d.mem_bandwidth_bytes_per_s = 1e10;
    d.mem_bytes = 1e9;
    d.threads = 1;
    d.speed_factor = i == 1 ? slow : 1.0;
    c.devices.push_back(d);
  }
  return c;
}

// A plan of `devices.size()` sched.mlp stages over `layers` layers (split as evenly as possible).
inline PipelinePlan mlp_plan(const std::vector<std::string>& devices, int layers, int d,
                             bool carry = true) {
  PipelinePlan p;
  p.system = "test";
  const int n = static_cast<int>(devices.size());
  for (int i = 0; i < n; ++i) {
    const int a = layers * i / n, b = layers * (i + 1) / n;
    p.stages.push_back({devices[i],
                        {{"kind", "sched.mlp"},
                         {"d", d},
                         {"first_layer", a},
                         {"last_layer", b},
                         {"seed", 11},
                         {"carry", carry}}});
  }
  return p;
}

inline std::vector<Request> mlp_requests(int n, const std::vector<int64_t>& slices, int d) {
  std::vector<Request> rs;
  for (int r = 0; r < n; ++r) {
    Request q;
    q.id = static_cast<uint64_t>(100 + r);
    int64_t pos = 0;
    for (size_t m = 0; m < slices.size(); ++m) {
      Packet p;
      p.tensors.push_back(mlp_stage_input(slices[m], d, 5, q.id, static_cast<int32_t>(m)));
      p.meta = {{"pos_start", pos}, {"seq", m}};
      pos += slices[m];
      q.micros.push_back(std::move(p));
    }
    rs.push_back(std::move(q));
  }
  return rs;
}

inline void expect_bit_equal(const std::map<uint64_t, std::vector<Packet>>& got,
                             const std::map<uint64_t, std::vector<Packet>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [id, ps] : want) {
    ASSERT_TRUE(got.count(id)) << "request " << id << " missing";
    const auto& gs = got.at(id);
    ASSERT_EQ(gs.size(), ps.size()) << "request " << id;
    for (size_t m = 0; m < ps.size(); ++m) {
      EXPECT_EQ(gs[m].micro, ps[m].micro);
      ASSERT_EQ(gs[m].tensors.size(), 1u);
      const Tensor& a = gs[m].tensors[0];
      const Tensor& b = ps[m].tensors[0];
      ASSERT_EQ(a.shape(), b.shape());
      EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.nbytes())), 0)
          << "request " << id << " micro " << m << " differs";
    }
  }
}

}  // namespace tandem::sched::test
