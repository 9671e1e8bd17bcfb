// SPDX-License-Identifier: Apache-2.0
// An edge plan as JSON and as a markdown table (tandem/cnn/edge/plan.h).
#include <cmath>
#include <cstdio>

#include "cnn/edge/zones.h"
#include "tandem/cnn/edge/plan.h"

namespace tandem::cnn::edge {

namespace {

nlohmann::json share_json(const DeviceShare& s) {
  nlohmann::json j = nlohmann::json::object();
  if (!s.out.empty()) j = {{"rows", {s.out.h0, s.out.h1}}, {"cols", {s.out.w0, s.out.w1}}};
  if (s.channels()) j["channels"] = {s.c0, s.c1};
  return j;
}

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nullptr; }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

nlohmann::json EdgePlan::to_json(const EdgeProblem& pb) const {
  const Chain& c = *pb.chain;
  nlohmann::json stages = nlohmann::json::array();
  for (size_t i = 0; i < this->stages.size(); ++i) {
    const Stage& s = this->stages[i];
    nlohmann::json devs = nlohmann::json::array();
    for (const DeviceShare& sh : s.shares)
      devs.push_back({{"device", sh.device}, {"share", share_json(sh)}});
    nlohmann::json st = {{"pieces", {s.first, s.last}},
                         {"from_tensor", c.graph().tensor(c.piece(s.first).in_tensor).name},
                         {"to_tensor", c.graph().tensor(c.piece(s.last).out_tensor).name},
                         {"devices", devs}};
    if (i < metrics.stages.size()) {
      const StageMetrics& m = metrics.stages[i];
      st["predicted"] = {{"time_s", m.time_s},
                         {"comp_s", m.comp_s},
                         {"comm_s", m.comm_s},
                         {"flops", m.flops},
                         {"bytes", m.bytes}};
    }
    stages.push_back(st);
  }
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceMetrics& d : metrics.devices)
    devices.push_back({{"device", d.device},
                       {"busy_s", d.busy_s},
                       {"utilisation", d.utilisation},
                       {"flops", d.flops},
                       {"peak_mem_bytes", d.peak_mem_bytes},
                       {"weight_bytes", d.weight_bytes}});
  return {{"system", system},
          {"pipelined", pipelined},
          {"pieces", c.size()},
          {"cost_model", pb.cost->name()},
          {"medium",
           {{"bandwidth_bytes_per_s", pb.medium.bandwidth_bytes_per_s},
            {"latency_s", pb.medium.latency_s}}},
          {"stages", stages},
          {"predicted",
           {{"period_s", metrics.period_s},
            {"latency_s", metrics.latency_s},
            {"throughput_fps", metrics.throughput_fps},
            {"lambda", metrics.lambda},
            {"latency_at_lambda_s", number(metrics.latency_at_lambda_s)},
            {"redundancy", metrics.redundancy},
            {"mean_utilisation", metrics.mean_utilisation},
            {"bytes_moved", metrics.bytes_moved},
            {"medium_s", metrics.medium_s},
            {"planner_s", metrics.planner_s},
            {"devices", devices}}},
          {"notes", notes}};
}

std::string format_table(const EdgePlan& plan, const EdgeProblem& pb) {
  const Chain& c = *pb.chain;
  const Metrics& m = plan.metrics;
  std::string out =
      "| stage | pieces | nodes | mode | devices: share | comp s | comm s | T(S) s |\n"
      "|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < plan.stages.size(); ++i) {
    const Stage& s = plan.stages[i];
    std::string devs;
    for (const DeviceShare& sh : s.shares) {
      devs += (devs.empty() ? "" : ", ") + sh.device + ": ";
      const bool whole = sh.out.empty() || sh.out == c.out_region(s.last);
      if (whole && !sh.channels()) devs += "all";
      if (!whole)
        devs += cat("rows ", sh.out.h0, "-", sh.out.h1) +
                (sh.out.w0 == 0 && sh.out.w1 == c.out_region(s.last).w1
                     ? std::string()
                     : cat(" cols ", sh.out.w0, "-", sh.out.w1));
      if (sh.channels()) devs += cat(whole ? "" : " ", "channels ", sh.c0, "-", sh.c1);
    }
    const StageMetrics& sm = m.stages[i];
    out += cat("| ", i, " | ", s.first, "-", s.last, " | ", c.piece(s.first).name, " .. ",
               c.piece(s.last).name, " | ", detail::mode_name(detail::stage_mode(s, pb)), " | ",
               devs, " | ", fmt("%.4f", sm.comp_s), " | ", fmt("%.4f", sm.comm_s), " | ",
               fmt("%.4f", sm.time_s), " |\n");
  }
  std::string util;
  for (const DeviceMetrics& d : m.devices)
    util += cat(" ", d.device, " ", fmt("%.0f%%", 100 * d.utilisation));
  out += cat("\n", plan.system, (plan.pipelined ? " (pipelined)" : " (one stage after another)"),
             ": period ", fmt("%.4f", m.period_s), " s (", fmt("%.2f", m.throughput_fps),
             " frames/s), latency ", fmt("%.4f", m.latency_s), " s");
  if (m.lambda > 0)
    out += cat(", mean latency at λ=", m.lambda, "/s ", fmt("%.4f", m.latency_at_lambda_s), " s");
  out += cat("\nredundancy ", fmt("%.2f%%", 100 * m.redundancy), ", mean utilisation ",
             fmt("%.1f%%", 100 * m.mean_utilisation), ", moved ", fmt("%.2f", m.bytes_moved / 1e6),
             " MB/frame (", fmt("%.4f", m.medium_s), " s on the medium), planner ",
             fmt("%.3f", m.planner_s), " s\nutilisation:", util, "\n");
  return out;
}

}  // namespace tandem::cnn::edge
