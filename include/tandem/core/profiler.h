// SPDX-License-Identifier: Apache-2.0
// Profiler: measures this machine and writes a DeviceProfile (behind `tandem profile`).
//
//   tandem::ProfileOptions opt;               // defaults take ~10 s on a 2-core VM
//   tandem::DeviceProfile p = tandem::profile_device(tandem::Device::cpu(), opt);
//   std::ofstream("me.json") << p.to_json().dump(2);
//
// Measurements are best-of-N after warm-up (shared machines are noisy); nothing here asserts timings.
#pragma once

#include <functional>
#include <string>

#include "tandem/core/cluster.h"
#include "tandem/core/device.h"
#include "tandem/export.h"

namespace tandem {

struct ProfileOptions {
  int repeats = 5;                 // best-of repetitions per measurement
  double min_time_s = 0.05;        // minimum timed duration of one repetition
  int threads = 0;                 // CPU threads to use (0 = cpu_num_threads())
  bool op_tables = true;           // also measure the per-op latency tables
  std::function<void(const std::string&)> progress;  // called with a line per step (may be empty)
};

// Peak f32 FLOP/s of a register-resident FMA loop on `threads` CPU threads (AVX-512 when available).
TANDEM_API double measure_cpu_fma_peak_flops(int threads, const ProfileOptions& opt = {});
// Sustained read+write memory bandwidth (STREAM-like triad over arrays far larger than the caches).
TANDEM_API double measure_memory_bandwidth_bytes_per_s(Device device, const ProfileOptions& opt = {});
// f32 GEMM FLOP/s through ops::gemm at size m x n x k on `device`.
TANDEM_API double measure_gemm_flops(Device device, int64_t m, int64_t n, int64_t k,
                                     const ProfileOptions& opt = {});
// The whole profile: peak (GEMM) FLOP/s, bandwidth, memory size, per-op latency tables.
TANDEM_API DeviceProfile profile_device(Device device, const ProfileOptions& opt = {});

}  // namespace tandem
