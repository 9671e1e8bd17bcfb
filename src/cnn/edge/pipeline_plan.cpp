// SPDX-License-Identifier: Apache-2.0
// An edge plan as the runtime's PipelinePlan with "cnn.tiles" stages (tandem/cnn/edge/plan.h).
#include <map>

#include "tandem/cnn/edge/plan.h"

namespace tandem::cnn::edge {

namespace {

nlohmann::json rect(const Region& r) { return {{"rows", {r.h0, r.h1}}, {"cols", {r.w0, r.w1}}}; }

// One entry per device, in the order the devices first appear; a device with several tiles gets
// them as a list.
std::vector<sched::DeviceShare> group(const Stage& s) {
  std::vector<sched::DeviceShare> out;
  std::map<std::string, size_t> at;
  for (const DeviceShare& sh : s.shares) {
    // A channel share: alone for a dense piece, beside its region (hybrid) or the whole map.
    nlohmann::json one = sh.out.empty() ? nlohmann::json::object() : rect(sh.out);
    if (sh.channels()) one["channels"] = {sh.c0, sh.c1};
    auto it = at.find(sh.device);
    if (it == at.end()) {
      at[sh.device] = out.size();
      out.push_back({sh.device, one});
      continue;
    }
    nlohmann::json& share = out[it->second].share;
    if (!share.contains("tiles")) share = {{"tiles", {share}}};
    share["tiles"].push_back(one);
  }
  return out;
}

}  // namespace

sched::PipelinePlan to_pipeline_plan(const EdgePlan& plan, const EdgeProblem& pb,
                                     const std::string& model, const std::string& cluster) {
  const Chain& c = *pb.chain;
  sched::PipelinePlan p;
  p.system = plan.system;
  p.cluster = cluster;
  p.batch = 1;
  for (const Stage& s : plan.stages) {
    nlohmann::json config = {{"kind", "cnn.tiles"},
                             {"model", model},
                             {"pieces", {s.first, s.last}},
                             {"from", c.graph().tensor(c.piece(s.first).in_tensor).name},
                             {"to", c.graph().tensor(c.piece(s.last).out_tensor).name}};
    p.stages.emplace_back(group(s), std::move(config));
  }
  const Metrics& m = plan.metrics;
  p.predicted.latency_s = m.latency_s;
  p.predicted.period_s = m.period_s;
  p.predicted.throughput_per_s = m.throughput_fps;
  p.predicted.unit = "frames";
  for (const StageMetrics& s : m.stages) p.predicted.per_stage_busy_s.push_back(s.time_s);
  p.predicted.source = pb.cost->name();
  const nlohmann::json full = plan.to_json(pb);
  p.predicted.extra = full.at("predicted");
  p.predicted.extra["pipelined"] = plan.pipelined;
  p.extra["notes"] = plan.notes;
  return p;
}

}  // namespace tandem::cnn::edge
