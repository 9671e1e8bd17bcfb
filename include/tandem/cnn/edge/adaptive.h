// SPDX-License-Identifier: Apache-2.0
// Running an edge/cloud split that follows the uplink (spec cnn.md §3.4 step 5, issue 19): probe,
// smooth, re-plan when the bandwidth moves, switch plans between frames.
//
// What: run_offload_adaptive() runs `frames` frames of one image through an edge-cloud plan
// (edge_cloud_planners.h, any system) on the pipeline runtime (offload.h: cnn.split stages, the
// edge here, the cloud on its worker), in segments of `frames_per_probe`. Before each segment it
// probes the link to the cloud's worker (sched/probe.h: RTT and a bulk round trip through the same
// transport; the bulk packet sized to the last estimate), adds the estimate to a LinkTracker (EMA),
// and plans again when the smoothed bandwidth
// has moved more than the threshold (20%) from the one the current plan was made for: the
// cluster's link is set to the estimate (bandwidth, and latency = RTT / 2) and the system plans the
// problem anew. A plan changes only between segments, after every frame of the previous one came
// out, so no frame is lost or repeated. When a segment's measured delay drifts from the prediction
// by more than `drift`, the next probe restarts the average (the EMA alone follows a sharp drop
// over several probes). Frames run one at a time (the delay of one inference is what DECC
// minimises), after one untimed warm-up frame per segment (the stages' set-up); each segment
// reports the predicted makespan beside the measured mean frame delay.
//
//   cnn::edge::AdaptiveOptions o{.system = "decc", .frames = 12, .frames_per_probe = 4};
//   auto report = cnn::edge::run_offload_adaptive(graph, "m.onnx", cluster, cost, workers, po,
//                                                  image, o);
//   for (const auto& s : report.segments) fmt::print("{} {}\n", s.probed_mbps, s.measured_s);
//
// Thread-safety: one call at a time per worker (the probe and the frames share its link).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tandem/cnn/edge/cost.h"
#include "tandem/cnn/graph.h"
#include "tandem/core/cluster.h"
#include "tandem/core/tensor.h"
#include "tandem/export.h"
#include "tandem/sched/pipeline.h"

namespace tandem::cnn::edge {

struct AdaptiveOptions {
  std::string system = "decc";  // an edge_cloud_system_names() entry
  int frames = 12;
  int frames_per_probe = 4;
  double alpha = 0.5;      // EMA weight of a new probe
  double threshold = 0.2;  // relative bandwidth move that re-plans
  // When a segment's measured delay differs from the plan's prediction by more than this
  // (relative), the next probe replaces the smoothed bandwidth instead of being averaged in.
  double drift = 0.5;
  // The bulk probe's size: the first probe sends probe_first_bytes; later ones what the smoothed
  // bandwidth carries in probe_target_s, within [16 KiB, probe_max_bytes]. A bulk transfer holds
  // the connection (heartbeats wait behind it), so it is kept short on a slow link; when the link
  // may drop sharply, give the options a heartbeat timeout above probe_max_bytes / the slowest
  // bandwidth.
  size_t probe_first_bytes = 256 << 10;
  size_t probe_max_bytes = 1 << 20;
  double probe_target_s = 0.25;
};

struct AdaptiveSegment {
  int first_frame = 0, frames = 0;
  double probed_bytes_per_s = 0;  // this probe's estimate
  double smoothed_bytes_per_s = 0;
  double planned_bytes_per_s = 0;  // the bandwidth the plan in force was made for
  bool replanned = false;          // the plan was made before this segment
  bool drifted = false;            // measured vs predicted past `drift`: the next probe restarts
  std::string plan;                // system, edge nodes / uploads (EdgeCloudPlan summary)
  double predicted_s = 0;          // the plan's predicted makespan (at planned_bytes_per_s)
  double measured_s = 0;           // mean wall time of one frame, end to end
};

struct AdaptiveReport {
  std::vector<AdaptiveSegment> segments;
  int replans = 0;                     // plans made after the first
  std::map<uint64_t, Tensor> outputs;  // by frame
};

// `cluster`: two devices (edge, then cloud) and their link, as make_edge_cloud_problem wants; the
// cloud must be in `workers`. `on_segment` (optional) is called after each segment, e.g. to
// report progress. InvalidArgument for frames or frames_per_probe < 1 or an unknown system.
TANDEM_API AdaptiveReport run_offload_adaptive(
    const Graph& graph, const std::string& model, ClusterSpec cluster, const EdgeCostModel& cost,
    const std::map<std::string, std::string>& workers, const sched::PipelineOptions& options,
    const Tensor& image, const AdaptiveOptions& adapt = {},
    const std::function<void(const AdaptiveSegment&)>& on_segment = {});

}  // namespace tandem::cnn::edge
