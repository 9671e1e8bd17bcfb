// SPDX-License-Identifier: Apache-2.0
// HPipe replay: runs an HPipe plan in this process, stage by stage and slice by slice, through the
// real "llm.layers" stages (sched::make_stage), each on the runtime's emulated device
// (sched::EmulatedDevice::measure: the time stretched by the device's speed factor, no sleeping).
// The pipelined schedule's makespan then comes from the discrete-event simulator
// (sched/simulator.h) over those measured times plus the emulated links' latency + bytes /
// bandwidth, beside the same simulation over the cost model's predictions, so predicted and
// measured are reported per stage. It measures the compute honestly and models the overlap; the
// multi-process runtime (`tandem pipeline run`, sched/pipeline.h) measures the overlap too, at
// the price of real time.
//
//   auto r = hpipe::replay_plan(plan, cluster, profile, prompt_ids, {});
//   r.measured.makespan_s;  r.predicted.makespan_s;  r.last_logits;   // [1, vocab]
//
// The requests of a batch have the same cost: the replay runs measured_requests requests, keeps
// each stage x slice's least time (best-of, as the profile measures) and uses it for every request
// of the batch. Thread-safety: sets
// cpu_num_threads while it runs (restored afterwards).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "tandem/core/cluster.h"
#include "tandem/core/tensor.h"
#include "tandem/export.h"
#include "tandem/llm/hpipe.h"
#include "tandem/sched/simulator.h"

namespace tandem::llm::hpipe {

struct ReplayOptions {
  int threads = 1;            // cpu_num_threads of every emulated device (as profiled)
  int measured_requests = 1;  // requests actually run (least time per stage x slice kept)
};

struct TANDEM_API ReplayResult {
  std::vector<std::vector<double>> measured_s;   // [packet][stage], seconds on the emulated device
  std::vector<std::vector<double>> predicted_s;  // the cost model's, same shape
  std::vector<std::vector<double>> transfer_s;   // [packet][boundary], emulated links
  sched::PipelineSimResult measured, predicted;  // the schedule over each
  std::vector<double> stage_measured_s, stage_predicted_s;  // per stage, summed over packets
  Tensor last_logits;                                       // f32 [1, vocab], last prompt token
  double wall_s = 0;                                        // real time the replay took
  nlohmann::json to_json() const;                           // summary (no per-packet arrays)
};

// InvalidArgument when the prompt length differs from the plan's or a plan device is missing from
// the cluster; errors of the model / stages propagate.
TANDEM_API ReplayResult replay_plan(const sched::PipelinePlan& plan, const ClusterSpec& cluster,
                                    const ModelProfile& profile, std::span<const int32_t> prompt,
                                    const ReplayOptions& options = {});

}  // namespace tandem::llm::hpipe
