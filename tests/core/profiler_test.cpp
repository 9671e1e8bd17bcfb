// SPDX-License-Identifier: Apache-2.0
// Profiler with tiny options: every measurement is positive and finite (speed is never asserted),
// and the profile's JSON parses back with tables the cost model can use.
#include "tandem/core/profiler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tandem/core/backend.h"
#include "tandem/core/cost_model.h"
#include "tandem/core/error.h"

namespace tandem {
namespace {

ProfileOptions tiny() {
  ProfileOptions o;
  o.repeats = 1;
  o.min_time_s = 0.0;
  o.max_measure_s = 0.0;
  o.threads = 1;
  o.bandwidth_array_bytes = 1 << 20;
  o.gemm_sizes = {32, 64};
  return o;
}

bool positive_finite(double v) { return std::isfinite(v) && v > 0; }

TEST(Profiler, FmaPeak) {
  const std::string v = cpu_fma_variant();
  EXPECT_TRUE(v == "avx512f" || v == "avx2+fma" || v == "baseline") << v;
  ProfileOptions o = tiny();
  o.min_time_s = 0.002;
  EXPECT_TRUE(positive_finite(measure_cpu_fma_peak_flops(1, o)));
  EXPECT_TRUE(positive_finite(measure_cpu_fma_peak_flops(2, o)));
}

TEST(Profiler, MemoryBandwidth) {
  const double bw = measure_memory_bandwidth_bytes_per_s(Device::cpu(), tiny());
  EXPECT_TRUE(positive_finite(bw)) << bw;
}

TEST(Profiler, GemmFlops) {
  const int before = cpu_num_threads();
  ProfileOptions o = tiny();
  o.threads = 2;
  EXPECT_TRUE(positive_finite(measure_gemm_flops(Device::cpu(), 48, 40, 32, o)));
  EXPECT_EQ(cpu_num_threads(), before);  // the thread setting is restored
  EXPECT_THROW(measure_gemm_flops(Device::cpu(), 0, 4, 4, o), InvalidArgument);
}

TEST(Profiler, RejectsBadOptions) {
  ProfileOptions o = tiny();
  o.repeats = 0;
  EXPECT_THROW(measure_memory_bandwidth_bytes_per_s(Device::cpu(), o), InvalidArgument);
  o = tiny();
  o.bandwidth_array_bytes = 16;
  EXPECT_THROW(measure_memory_bandwidth_bytes_per_s(Device::cpu(), o), InvalidArgument);
  o = tiny();
  o.gemm_sizes.clear();
  EXPECT_THROW(profile_device(Device::cpu(), o), InvalidArgument);
  o = tiny();
  o.min_time_s = -1;
  EXPECT_THROW(measure_cpu_fma_peak_flops(1, o), InvalidArgument);
}

TEST(Profiler, ProfileDeviceParsesBack) {
  ProfileOptions o = tiny();
  std::vector<std::string> lines;
  o.progress = [&](const std::string& l) { lines.push_back(l); };
  const DeviceProfile p = profile_device(Device::cpu(), o);
  EXPECT_EQ(p.name, BackendRegistry::global().get(Device::cpu()).device_info(0).name);
  EXPECT_EQ(p.kind, "cpu");
  EXPECT_EQ(p.threads, 1);
  EXPECT_TRUE(positive_finite(p.peak_flops));
  EXPECT_TRUE(positive_finite(p.mem_bandwidth_bytes_per_s));
  EXPECT_TRUE(positive_finite(p.mem_bytes));
  // 2 peak GEMMs + 4 layer GEMMs + 2 norms + 2 softmax + 3 attention.
  EXPECT_EQ(p.op_latency_s.size(), 13u);
  for (const auto& [key, t] : p.op_latency_s) EXPECT_TRUE(positive_finite(t)) << key;
  EXPECT_GE(lines.size(), p.op_latency_s.size());
  EXPECT_TRUE(p.op_latency_s.count("gemm:k=576,m=128,n=576,weight=f32"));
  EXPECT_TRUE(p.op_latency_s.count("rms_norm:dim=576,rows=128"));

  const DeviceProfile back =
      DeviceProfile::from_json(nlohmann::json::parse(p.to_json().dump(2)), "profile");
  EXPECT_EQ(back.to_json(), p.to_json());
  // Every key names a node the cost model can rebuild, and the profiled model reproduces the table.
  const auto samples = table_samples(back);
  EXPECT_EQ(samples.size(), p.op_latency_s.size());
  EXPECT_EQ(prediction_error(ProfiledCostModel(), back, samples).max_abs_rel_error, 0.0);
  EXPECT_TRUE(
      std::isfinite(prediction_error(RooflineCostModel(), back, samples).mean_abs_rel_error));

  o.op_tables = false;
  EXPECT_TRUE(profile_device(Device::cpu(), o).op_latency_s.empty());
}

}  // namespace
}  // namespace tandem
