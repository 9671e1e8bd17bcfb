// SPDX-License-Identifier: Apache-2.0
// An edge/cloud split that re-plans as the uplink moves (tandem/cnn/edge/adaptive.h).
#include "tandem/cnn/edge/adaptive.h"

#include <algorithm>
#include <cmath>

#include "tandem/cnn/edge/edge_cloud_planners.h"
#include "tandem/cnn/edge/offload.h"
#include "tandem/core/error.h"
#include "tandem/sched/probe.h"

namespace tandem::cnn::edge {
namespace {

std::string plan_summary(const EdgeCloudPlan& p, const Graph& g) {
  std::string uploads;
  for (int t : p.uploads) uploads += (uploads.empty() ? "" : ",") + g.tensor(t).name;
  return cat(p.system, ": ", p.edge_nodes.size(), " node(s) on the edge, uploads [", uploads, "]");
}

}  // namespace

AdaptiveReport run_offload_adaptive(const Graph& graph, const std::string& model,
                                    ClusterSpec cluster, const EdgeCostModel& cost,
                                    const std::map<std::string, std::string>& workers,
                                    const sched::PipelineOptions& options, const Tensor& image,
                                    const AdaptiveOptions& adapt,
                                    const std::function<void(const AdaptiveSegment&)>& on_segment) {
  if (adapt.frames < 1 || adapt.frames_per_probe < 1)
    throw InvalidArgument(cat("run_offload_adaptive: frames (", adapt.frames,
                              ") and frames_per_probe (", adapt.frames_per_probe,
                              ") must be >= 1"));
  const auto& names = edge_cloud_system_names();
  if (std::find(names.begin(), names.end(), adapt.system) == names.end())
    throw InvalidArgument(cat("run_offload_adaptive: unknown system '", adapt.system, "'"));
  // Checked here (two devices, a link) before any probe.
  const std::string cloud = make_edge_cloud_problem(graph, cluster, cost).cloud.name;
  sched::LinkTracker tracker(adapt.alpha, adapt.threshold);
  AdaptiveReport report;
  sched::PipelinePlan runtime;
  AdaptiveSegment current;
  for (int first = 0; first < adapt.frames; first += adapt.frames_per_probe) {
    const size_t bytes =
        tracker.empty()
            ? adapt.probe_first_bytes
            : std::clamp(static_cast<size_t>(tracker.bandwidth() * adapt.probe_target_s),
                         size_t{16} << 10, std::max(adapt.probe_max_bytes, size_t{16} << 10));
    const sched::LinkEstimate e = sched::probe_link(cloud, cluster, workers, options, bytes);
    tracker.add(e.bandwidth_bytes_per_s);
    AdaptiveSegment s = current;
    s.first_frame = first;
    s.frames = std::min(adapt.frames_per_probe, adapt.frames - first);
    s.probed_bytes_per_s = e.bandwidth_bytes_per_s;
    s.smoothed_bytes_per_s = tracker.bandwidth();
    s.replanned = runtime.stages.empty() || tracker.moved_from(current.planned_bytes_per_s);
    if (s.replanned) {
      for (LinkProfile& l : cluster.links) {
        l.bandwidth_bytes_per_s = tracker.bandwidth();
        l.latency_s = e.rtt_s / 2;
      }
      const EdgeCloudProblem problem = make_edge_cloud_problem(graph, cluster, cost);
      const EdgeCloudPlan plan = plan_edge_cloud(adapt.system, problem);
      runtime = offload_pipeline_plan(graph, plan.edge_nodes, model, problem.edge.name,
                                      problem.cloud.name, plan.system);
      report.replans += report.segments.empty() ? 0 : 1;
      s.planned_bytes_per_s = tracker.bandwidth();
      s.plan = plan_summary(plan, graph);
      s.predicted_s = plan.metrics.makespan_s;
      current = s;
    }
    sched::Pipeline pipe(runtime, cluster, workers, options);
    // One frame first, untimed and not reported: it builds the stages (the worker imports the
    // model the first time), which is set-up, not a frame's delay.
    const uint64_t warm_up = static_cast<uint64_t>(adapt.frames) + static_cast<uint64_t>(first);
    pipe.run({offload_request(runtime, warm_up, image)});
    for (int f = first; f < first + s.frames; ++f) {
      const sched::RunReport r =
          pipe.run({offload_request(runtime, static_cast<uint64_t>(f), image)});
      report.outputs[static_cast<uint64_t>(f)] =
          r.outputs.at(static_cast<uint64_t>(f)).back().tensors.at(0);
      s.measured_s += r.makespan_s / s.frames;  // submission to delivery
    }
    s.drifted = std::abs(s.measured_s / s.predicted_s - 1) > adapt.drift;
    if (s.drifted) tracker.restart();
    report.segments.push_back(s);
    if (on_segment) on_segment(s);
  }
  return report;
}

}  // namespace tandem::cnn::edge
