// SPDX-License-Identifier: Apache-2.0
// DeepRecSched (the recsys spec §2.7, after harvard-acc/DeepRecSys' scheduler and load generator):
// split and offload over a CPU executor and an accelerator executor, and the hill-climbing tuner
// of the sub-batch size b* and the offload threshold θ*. Its baseline B6 is the static
// configuration: no split, no offload.
//
// Split: a query of B rows on the CPU path runs as ceil(B / b*) sub-requests of at most b* rows,
// submitted at once to the CPU policy (its streams are DeepRecSys' inference engines), and the
// sub-requests' scores are stitched back in row order. Offload: a query of q >= θ* rows runs whole
// on the accelerator's policy. In simulated time the two executors share one clock (the
// SimExecutor constructor that takes `clock`), so one load generator drives both.
//
// Tuner (tune_deeprecsched): each configuration is measured by achievable_qps, an open-loop run
// whose Poisson rate moves on a log-spaced grid (arr_steps points per decade): after every
// req_granularity responses, up one step while their p95 < target / (1 + stable_region), down one
// when it is > target; after sched_timeout updates the median of the last arr_steps rates is the
// configuration's achievable QPS. The batch configurations are tried first (in the given order),
// then the thresholds with the best b*, each sequence stopping at the first configuration that
// does worse than its predecessor.
//
//   SimExecutor gpu(sim_device("h100")), cpu(sim_cpu_device(profile), {}, gpu);
//   auto p = make_split_offload(model, cpu, {.policy = "stream-pool", .streams = 32}, &gpu,
//                               {.policy = "fcfs"}, {.sub_batch = 128, .offload_threshold = 256});
//   auto s = run_sim_load(*p, gpu, pool, {.rate_qps = 500, .duration_s = 1});
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/export.h"
#include "tandem/recsys/serving.h"
#include "tandem/recsys/sim_executor.h"

namespace tandem::rec {

struct TANDEM_API SplitOffload {
  int64_t sub_batch = 0;          // b*: rows per CPU sub-request; 0: no split
  int64_t offload_threshold = 0;  // θ*: queries of at least this many rows go to the accelerator;
                                  // 0: none
  // "static", "b=128", "b=128 theta=256", "theta=256".
  std::string name() const;
};

// The split/offload policy over `cpu` (with `cpu_policy`) and `accel` (with `accel_policy`; null:
// no accelerator, then offload_threshold must be 0). submit() is thread-safe; Response::id is this
// policy's submit order. stats(): queries, offloaded, cpu_queries, sub_requests. InvalidArgument
// for a negative b* or θ*, or θ* without an accelerator.
TANDEM_API std::unique_ptr<ServingPolicy> make_split_offload(const RecModel& model, Executor& cpu,
                                                             const PolicyOptions& cpu_policy,
                                                             Executor* accel,
                                                             const PolicyOptions& accel_policy,
                                                             const SplitOffload& config);

struct TANDEM_API HillClimbOptions {
  double target_p95_ms = 25;  // DeepRecSys example
  double stable_region = 0.1;
  int req_granularity = 100;       // responses per p95 (and per rate update)
  int sched_timeout = 40;          // rate updates per configuration
  int arr_steps = 8;               // grid points per decade of the rate; rates in the median
  double start_qps = 100;          // the first configuration's first rate; the next ones start at
                                   // their predecessor's achievable QPS
  int64_t max_outstanding = 1024;  // arrivals beyond this many unanswered queries are dropped
  uint64_t seed = 1;
  std::vector<int64_t> batch_configs = {512, 256, 128};  // DeepRecSys example
  std::vector<int64_t> thresholds = {96, 128, 192, 256, 384, 512};
  void validate() const;  // InvalidArgument naming the field
};

struct TANDEM_API AchievableQps {
  double qps = 0;
  std::vector<double> rates, p95_ms;  // per update: the rate of the window, its p95
  int64_t responses = 0, dropped = 0, errors = 0;
  nlohmann::json to_json() const;
};

// Steps 1-2 of the tuner for one configuration: `policy` over `ex` (and any executor on its
// clock), open loop in simulated time from start_qps.
TANDEM_API AchievableQps achievable_qps(ServingPolicy& policy, SimExecutor& ex,
                                        const std::vector<std::shared_ptr<const QueryInputs>>& pool,
                                        const HillClimbOptions& options, double start_qps);

struct TANDEM_API DeepRecSchedTuning {
  struct Tried {
    SplitOffload config;
    AchievableQps result;
  };
  std::vector<Tried> tried;  // in order; tried[0] is the static configuration (B6)
  size_t best = 0;           // the highest achievable QPS among `tried`
  nlohmann::json to_json() const;
};

// Measures one configuration, starting its rate search at start_qps (fresh executors and policy
// each time, so that runs do not disturb each other).
using ConfigRunner = std::function<AchievableQps(const SplitOffload& config, double start_qps)>;
// The whole tuner: static first, then the batch configurations, then (with_accelerator) the
// thresholds.
TANDEM_API DeepRecSchedTuning tune_deeprecsched(const ConfigRunner& run,
                                                const HillClimbOptions& options,
                                                bool with_accelerator);

}  // namespace tandem::rec
