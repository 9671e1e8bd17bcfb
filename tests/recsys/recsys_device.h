// SPDX-License-Identifier: Apache-2.0
// The device profile the recsys tests price graphs with: fixed numbers (70 GFLOP/s, 10 GB/s, the
// 2-core VM the cost-class expectations were written for), so cost classes do not depend on the
// machine the tests run on. Not a default of the library: callers there pass their device.
#pragma once

#include "tandem/core/cluster.h"

namespace tandem::rec {

inline DeviceProfile test_cpu_profile() {
  DeviceProfile d;
  d.name = "test-cpu";
  d.kind = "cpu";
  d.description = "fixed test profile: 70 GFLOP/s, 10 GB/s";
  d.peak_flops = 70e9;
  d.mem_bandwidth_bytes_per_s = 10e9;
  d.threads = 2;
  return d;
}

}  // namespace tandem::rec
