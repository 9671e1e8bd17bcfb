// SPDX-License-Identifier: Apache-2.0
// Profiler: measures this machine and writes a DeviceProfile (behind `tandem profile`).
//
//   tandem::ProfileOptions opt;               // defaults take ~10 s on a 2-core VM
//   tandem::DeviceProfile p = tandem::profile_device(tandem::Device::cpu(), opt);
//   std::ofstream("me.json") << p.to_json().dump(2);
//
// Measurements are best-of-N after warm-up (shared machines are noisy); nothing here asserts
// timings. One repetition runs the measured call enough times to last min_time_s; repetitions stop
// early once a measurement has used max_measure_s (so a slow reference kernel cannot stall the
// profile).
//
// What is measured:
//   FMA peak     a register-resident multiply-add loop (independent chains, no memory traffic) on
//                `threads` std::threads at once; AVX-512, AVX2+FMA or the baseline ISA, chosen at
//                run time. FLOPs = chains * lanes * 2 per iteration.
//   bandwidth    CPU: STREAM triad a[i] = b[i] + s * c[i] over three double arrays of
//                bandwidth_array_bytes each, OpenMP-parallel; bytes = 3 * array bytes per pass
//                (write- allocate traffic is not counted, as in STREAM). CUDA: device-to-device
//                copies, bytes = 2 * copy size (read + write).
//   GEMM         ops::gemm f32 c = a b on the device; FLOPs = 2 m n k; peak_flops is the best of
//                gemm_sizes (square).
//   op tables    gemm (decode and prefill shapes of a 576-wide layer, plus the gemm_sizes),
//   rms_norm,
//                softmax and attention at a few LLM shapes, keyed by op_key() (graph.h).
// CPU measurements run with cpu_num_threads() temporarily set to `threads` (restored afterwards; do
// not profile while other code changes that setting). CUDA measurements synchronize the device per
// repetition and only run where a GPU exists.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tandem/core/cluster.h"
#include "tandem/core/device.h"
#include "tandem/export.h"

namespace tandem {

struct ProfileOptions {
  int repeats = 5;             // best-of repetitions per measurement
  double min_time_s = 0.05;    // minimum timed duration of one repetition
  int threads = 0;             // CPU threads to use (0 = cpu_num_threads())
  bool op_tables = true;       // also measure the per-op latency tables
  double max_measure_s = 1.0;  // stop repeating a measurement once it has run this long (seconds)
  int64_t bandwidth_array_bytes = int64_t{64}
                                  << 20;  // bytes per triad array (>= 64 MiB defeats caches)
  std::vector<int64_t> gemm_sizes = {256, 512, 1024};  // square GEMM sizes for peak_flops
  std::function<void(const std::string&)> progress;    // called with a line per step (may be empty)
};

// Peak f32 FLOP/s of a register-resident FMA loop on `threads` CPU threads (AVX-512 when
// available).
TANDEM_API double measure_cpu_fma_peak_flops(int threads, const ProfileOptions& opt = {});
// The variant measure_cpu_fma_peak_flops runs on this CPU: "avx512f", "avx2+fma" or "baseline".
TANDEM_API std::string cpu_fma_variant();
// Sustained read+write memory bandwidth (STREAM-like triad over arrays far larger than the caches).
// `device` may be the CPU or a CUDA device.
TANDEM_API double measure_memory_bandwidth_bytes_per_s(Device device,
                                                       const ProfileOptions& opt = {});
// f32 GEMM FLOP/s through ops::gemm at size m x n x k on `device`.
TANDEM_API double measure_gemm_flops(Device device, int64_t m, int64_t n, int64_t k,
                                     const ProfileOptions& opt = {});
// The whole profile: peak (GEMM) FLOP/s, bandwidth, memory size, per-op latency tables.
TANDEM_API DeviceProfile profile_device(Device device, const ProfileOptions& opt = {});

}  // namespace tandem
