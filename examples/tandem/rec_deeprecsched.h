// SPDX-License-Identifier: Apache-2.0
// `tandem rec-tune --deeprecsched`: DeepRecSched's hill climbing of the sub-batch size b* and the
// offload threshold θ* (tandem/recsys/deeprecsched.h) against the static configuration B6, on a
// simulated CPU (the CPU path, --cpu-device) and a simulated accelerator (--device) sharing one
// clock. Prints each configuration's achievable QPS at the p95 target, and the tuned (b*, θ*).
//
//   tandem rec-tune --deeprecsched --model rm2 --device sim:h100 --cpu-device sim:cpu
//       --size-quantiles bench/recsys/mlperf_dist_quantile.txt -o json
// (--cpu-profile FILE describes the CPU path by a `tandem profile` JSON instead of measuring it.)
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/recsys/deeprecsched.h"
#include "tandem/recsys/sim_executor.h"

namespace tandem::cli {

struct DeepRecSchedCli {
  bool enabled = false;
  std::string cpu_device = "sim:cpu";
  std::string cpu_profile;  // a DeviceProfile JSON for the CPU path (overrides --cpu-device)
  int engines = 32;         // CPU streams (DeepRecSys' inference engines)
  std::string accel_policy = "fcfs";
  bool offload = true;
  rec::HillClimbOptions hill;
};

// --deeprecsched and its options.
void add_deeprecsched_options(CLI::App* sub, DeepRecSchedCli& o);

// Tunes on `pool`; `device` is the accelerator (sim:NAME), simulated with `sim` (the CPU path with
// seed sim.seed + 1); `params` goes into the JSON as is.
int run_deeprecsched(const rec::RecModel& model,
                     const std::vector<std::shared_ptr<const rec::QueryInputs>>& pool,
                     const DeepRecSchedCli& o, const std::string& device,
                     const rec::SimOptions& sim, const std::string& output, nlohmann::json params);

}  // namespace tandem::cli
