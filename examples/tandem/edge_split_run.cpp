// SPDX-License-Identifier: Apache-2.0
// `tandem edge split --run N [--adapt]` (edge_split_run.h).
#include "edge_split_run.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>

#include "commands.h"
#include "tandem/cnn/edge/adaptive.h"
#include "tandem/cnn/edge/edge_cloud_planners.h"
#include "tandem/cnn/edge/offload.h"
#include "tandem/cnn/executor.h"
#include "tandem/core/error.h"
#include "tandem/sched/pipeline.h"

namespace tandem::cli {
namespace {

struct Measured {
  std::string system, summary;
  double predicted_s = 0, mean_s = 0, min_s = 0, upload_mb = 0;
  bool exact = true;
};

void write_file(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  std::ofstream f(path);
  if (!f) throw IoError("edge split: cannot write " + path);
  f << text;
}

// One system's plan on the runtime: a warm-up frame, then `frames` frames one at a time.
Measured run_one(const SplitRunOptions& o, const std::string& system, const cnn::Graph& g,
                 const ClusterSpec& cluster, const cnn::edge::EdgeCostModel& cost,
                 const std::map<std::string, std::string>& workers,
                 const sched::PipelineOptions& po, const Tensor& image, const Tensor& want) {
  const cnn::edge::EdgeCloudProblem pb = cnn::edge::make_edge_cloud_problem(g, cluster, cost);
  const cnn::edge::EdgeCloudPlan plan = cnn::edge::plan_edge_cloud(system, pb);
  sched::PipelinePlan runtime = cnn::edge::offload_pipeline_plan(
      g, plan.edge_nodes, o.model, pb.edge.name, pb.cloud.name, system);
  runtime.stages[0].stage["threads"] = pb.edge.threads;
  if (runtime.stages.size() > 1) runtime.stages[1].stage["threads"] = pb.cloud.threads;
  Measured m{system,
             "",
             plan.metrics.makespan_s,
             0,
             std::numeric_limits<double>::infinity(),
             plan.metrics.bytes_up / 1e6};
  m.summary = std::to_string(plan.edge_nodes.size()) + " edge nodes, " +
              std::to_string(plan.uploads.size()) + " upload(s)";
  sched::Pipeline pipe(runtime, cluster, workers, po);
  pipe.run({cnn::edge::offload_request(runtime, 1u << 30, image)});  // stage set-up, untimed
  for (int f = 0; f < o.frames; ++f) {
    const sched::RunReport r =
        pipe.run({cnn::edge::offload_request(runtime, static_cast<uint64_t>(f), image)});
    const double dt = r.makespan_s;  // submission to delivery (not the run's thread set-up)
    m.mean_s += dt / o.frames;
    m.min_s = std::min(m.min_s, dt);
    if (o.verify) {
      const Tensor got = r.outputs.at(static_cast<uint64_t>(f)).back().tensors.at(0).contiguous();
      m.exact =
          m.exact && got.shape() == want.shape() &&
          std::memcmp(got.raw_data(), want.raw_data(), static_cast<size_t>(want.nbytes())) == 0;
    }
  }
  return m;
}

}  // namespace

int run_split_frames(const SplitRunOptions& o, const cnn::Graph& g, const ClusterSpec& cluster,
                     const cnn::edge::EdgeCostModel& cost) {
  const std::map<std::string, std::string> workers = worker_map(o.workers, "edge split");
  sched::PipelineOptions po;
  if (!o.key.empty()) po.key = sched::ClusterKey::load(o.key);
  // In process the link is the cluster's, emulated; to a worker it is the real one unless asked.
  po.emulate_links = workers.empty() || o.emulate_link;
  po.emulate_devices = true;
  // Heartbeats share the connection with the uploads: on a slow uplink one frame's tensor (or a
  // probe) holds it for seconds, which must not read as a lost worker.
  po.client.heartbeat_timeout_s = std::max(po.client.heartbeat_timeout_s, 15.0);
  const Shape& in = g.tensor(g.inputs()[0]).shape;
  std::vector<float> v(static_cast<size_t>(in.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 251) / 125.0f - 1.0f;
  const Tensor image = Tensor::from_vector(std::move(v), in, DType::kF32);
  const Tensor want =
      o.verify ? cnn::Executor(g, {.winograd = false}).run({image}).at(0) : Tensor();
  const double mbps = cluster.links.at(0).bandwidth_bytes_per_s * 8 / 1e6;
  nlohmann::json j = {{"model", o.model},
                      {"cost_model", cost.name()},
                      {"planned_mbps", mbps},
                      {"link", workers.empty() || o.emulate_link ? "emulated" : "real"},
                      {"frames", o.frames}};
  std::string md;
  if (o.adapt) {
    if (o.systems.size() != 1) throw InvalidArgument("edge split --adapt: give one --system");
    std::fprintf(stderr, "edge split: %s, %d frames, probing every %d...\n", o.systems[0].c_str(),
                 o.frames, o.frames_per_probe);
    const cnn::edge::AdaptiveReport r = cnn::edge::run_offload_adaptive(
        g, o.model, cluster, cost, workers, po, image,
        {.system = o.systems[0], .frames = o.frames, .frames_per_probe = o.frames_per_probe},
        [](const cnn::edge::AdaptiveSegment& s) {
          std::fprintf(stderr, "  frames %d-%d: probed %.2f Mbit/s%s\n", s.first_frame,
                       s.first_frame + s.frames - 1, s.probed_bytes_per_s * 8e-6,
                       s.replanned ? ", re-planned" : "");
        });
    md = "| frames | probed Mbit/s | smoothed | plan made for | re-planned | plan | predicted s | "
         "measured s | error | drift |\n|---|---:|---:|---:|---|---|---:|---:|---:|---|\n";
    j["segments"] = nlohmann::json::array();
    for (const auto& s : r.segments) {
      char row[512];
      std::snprintf(row, sizeof row,
                    "| %d-%d | %.2f | %.2f | %.2f | %s | %s | %.4f | %.4f | %+.1f%% | %s |\n",
                    s.first_frame, s.first_frame + s.frames - 1, s.probed_bytes_per_s * 8e-6,
                    s.smoothed_bytes_per_s * 8e-6, s.planned_bytes_per_s * 8e-6,
                    s.replanned ? "yes" : "no", s.plan.c_str(), s.predicted_s, s.measured_s,
                    100 * (s.predicted_s / s.measured_s - 1), s.drifted ? "yes" : "no");
      md += row;
      j["segments"].push_back({{"first_frame", s.first_frame},
                               {"frames", s.frames},
                               {"probed_mbps", s.probed_bytes_per_s * 8e-6},
                               {"smoothed_mbps", s.smoothed_bytes_per_s * 8e-6},
                               {"planned_mbps", s.planned_bytes_per_s * 8e-6},
                               {"replanned", s.replanned},
                               {"plan", s.plan},
                               {"predicted_s", s.predicted_s},
                               {"measured_s", s.measured_s},
                               {"drifted", s.drifted}});
    }
    j["replans"] = r.replans;
  } else {
    md = "| system | plan | uploads MB | predicted s | measured mean s | min s | error |" +
         std::string(o.verify ? " exact |" : "") + "\n|---|---|---:|---:|---:|---:|---:|" +
         (o.verify ? "---|" : "") + "\n";
    j["systems"] = nlohmann::json::array();
    for (const std::string& s : o.systems) {
      std::fprintf(stderr, "edge split: running %s (%d frames)...\n", s.c_str(), o.frames);
      const Measured m = run_one(o, s, g, cluster, cost, workers, po, image, want);
      char row[512];
      std::snprintf(row, sizeof row, "| %s | %s | %.3f | %.4f | %.4f | %.4f | %+.1f%% |%s\n",
                    m.system.c_str(), m.summary.c_str(), m.upload_mb, m.predicted_s, m.mean_s,
                    m.min_s, 100 * (m.predicted_s / m.mean_s - 1),
                    o.verify ? (m.exact ? " yes |" : " **no** |") : "");
      md += row;
      j["systems"].push_back({{"system", m.system},
                              {"plan", m.summary},
                              {"upload_mb", m.upload_mb},
                              {"predicted_s", m.predicted_s},
                              {"measured_mean_s", m.mean_s},
                              {"measured_min_s", m.min_s}});
      if (o.verify) j["systems"].back()["exact"] = m.exact;
    }
  }
  char head[512];
  std::snprintf(head, sizeof head,
                "%s, uplink planned at %g Mbit/s (%s link), %s: predicted vs measured delay per "
                "frame (%d frames one at a time after a warm-up; devices emulated by speed)\n\n",
                o.model.c_str(), mbps, std::string(j["link"]).c_str(), cost.name().c_str(),
                o.frames);
  md = head + md;
  write_file(o.md_path, md);
  write_file(o.json_path, j.dump(2) + "\n");
  std::printf("%s", md.c_str());
  return 0;
}

}  // namespace tandem::cli
