// SPDX-License-Identifier: Apache-2.0
// The profiler on a CUDA device (runs only where a GPU exists; label cuda).
#include <gtest/gtest.h>

#include <cmath>

#include "common/gpu.h"
#include "tandem/core/profiler.h"

namespace tandem {
namespace {

bool positive_finite(double v) { return std::isfinite(v) && v > 0; }

TEST(ProfilerCuda, ProfileDevice) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  ProfileOptions o;
  o.repeats = 1;
  o.min_time_s = 0.0;
  o.max_measure_s = 0.0;
  o.gemm_sizes = {256, 512};
  o.bandwidth_array_bytes = 8 << 20;
  const DeviceProfile p = profile_device(Device::cuda(0), o);
  EXPECT_EQ(p.kind, "cuda");
  EXPECT_TRUE(positive_finite(p.peak_flops));
  EXPECT_TRUE(positive_finite(p.mem_bandwidth_bytes_per_s));
  EXPECT_TRUE(positive_finite(p.mem_bytes));
  for (const auto& [key, t] : p.op_latency_s) EXPECT_TRUE(positive_finite(t)) << key;
  EXPECT_EQ(DeviceProfile::from_json(p.to_json()).to_json(), p.to_json());
}

}  // namespace
}  // namespace tandem
