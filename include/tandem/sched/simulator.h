// SPDX-License-Identifier: Apache-2.0
// Discrete-event pipeline simulator: predicts the makespan, throughput and per-resource busy time
// of packets flowing through a chain of stages placed on devices, with transfers over links between
// consecutive stages. It is generic (no LLM knowledge): the caller gives, per packet and stage, the
// compute seconds, and per packet and stage boundary, the transfer seconds; a planner fills them
// from its cost model (HPipe: per-slice predictions) or from measured times (a replay), so the same
// schedule arithmetic serves 2 devices measured here and 64 devices that are not.
//
// Semantics (the HPipe runtime's, spec llm.md 2.1 "Runtime phase"):
//   - packet p enters stage 0 at release_s[p] (0 when absent); stage j runs packet p once its input
//     has arrived and the device has finished what it ran before (one task at a time per device,
//     ready tasks in order of readiness, ties by packet then stage);
//   - the output of stage j goes over link j (a FIFO resource: one transfer at a time) and arrives
//     at stage j+1 transfer_s[p][j] later; sends are asynchronous (the device is free at once);
//   - several stages may share a device (stage_device), and links are keyed by the device pair, so
//     two stages on one device never pay a transfer (transfer_s must be 0 there);
//   - a "device" here is whatever runs one task at a time: a plan stage whose work is shared by a
//     group of devices (plan.h) is one such resource, its compute_s the group's time (the slowest
//     member plus the stage's split/stitch transfers, as the planner prices it).
//
//   sched::PipelineSimInput in;
//   in.compute_s = {{1.0, 2.0}, {1.0, 2.0}};   // 2 packets x 2 stages
//   in.transfer_s = {{0.5}, {0.5}};            // 1 boundary
//   auto r = sched::simulate_pipeline(in);     // r.makespan_s == 5.5
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/export.h"

namespace tandem::sched {

struct PipelineSimInput {
  std::vector<std::vector<double>> compute_s;   // [packet][stage] seconds, >= 0
  std::vector<std::vector<double>> transfer_s;  // [packet][stage boundary] (n_stages - 1 each)
  std::vector<int> stage_device;                // stage -> device index (empty: stage j on j)
  std::vector<double> release_s;                // packet -> arrival time (empty: all at 0)
};

// One executed task (a packet on a stage, or a packet's transfer after a stage).
struct SimTask {
  int packet = 0;
  int stage = 0;
  bool transfer = false;
  double start_s = 0;
  double end_s = 0;
};

struct PipelineSimResult {
  double makespan_s = 0;                    // last completion time (from time 0)
  std::vector<double> packet_done_s;        // completion of each packet at the last stage
  std::vector<double> device_busy_s;        // per device: seconds computing
  std::vector<double> link_busy_s;          // per stage boundary: seconds transferring
  std::vector<double> stage_first_start_s;  // per stage: when it first started (pipeline fill)
  std::vector<SimTask> timeline;            // every task, in completion order
  int events = 0;                           // events processed
};

// InvalidArgument naming the packet / stage for ragged or negative inputs.
TANDEM_API PipelineSimResult simulate_pipeline(const PipelineSimInput& input);

// Bubble fraction of device d: 1 - busy / makespan.
TANDEM_API double bubble_fraction(const PipelineSimResult& result, int device);

}  // namespace tandem::sched
