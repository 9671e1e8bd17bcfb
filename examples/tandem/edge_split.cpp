// SPDX-License-Identifier: Apache-2.0
// `tandem edge split` (edge_split.h). Every delay is predicted by the edge cost model (analytic,
// PICO eq. 5 with the cluster file's peak_flops, or each node through the core roofline) and the
// link model L + bytes/B.
#include "edge_split.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "edge_split_run.h"
#include "tandem/cnn/edge/chain.h"
#include "tandem/cnn/edge/edge_cloud_planners.h"
#include "tandem/core/cost_model.h"
#include "tandem/core/error.h"

namespace tandem::cli {
namespace {

struct SplitOptions {
  std::string cluster, model;
  std::string system = "all";
  double mbps = 0;            // > 0: the link set to this bandwidth
  std::vector<double> sweep;  // bandwidths, Mbit/s
  std::string output = "md";
  std::string json_path, md_path;
  std::string cost = "analytic";
  SplitRunOptions run;  // --run N and the options of running (edge_split_run.h)
};

// Every system's plan at one bandwidth, and the best baseline's delay.
struct Row {
  double mbps = 0;
  std::vector<cnn::edge::EdgeCloudPlan> plans;
  double best_baseline_s = std::numeric_limits<double>::infinity();
  std::string best_baseline;
};

Row plan_all(const cnn::Graph& g, ClusterSpec cluster, double mbps,
             const cnn::edge::EdgeCostModel& cost) {
  if (mbps > 0)
    for (LinkProfile& l : cluster.links) l.bandwidth_bytes_per_s = mbps * 1e6 / 8;
  const cnn::edge::EdgeCloudProblem pb = cnn::edge::make_edge_cloud_problem(g, cluster, cost);
  Row r;
  r.mbps = pb.link.bandwidth_bytes_per_s * 8 / 1e6;
  for (const std::string& s : cnn::edge::edge_cloud_system_names()) {
    r.plans.push_back(cnn::edge::plan_edge_cloud(s, pb));
    const double d = r.plans.back().metrics.makespan_s;
    if (s != "decc" && d < r.best_baseline_s) r.best_baseline_s = d, r.best_baseline = s;
  }
  return r;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string side_by_side(const Row& r) {
  std::string s =
      "| system | edge nodes | uploads | MB up | T_e s | T_t s | T_c s | T_e+T_t+T_c s | "
      "delay s | vs best baseline | planner s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      "---:|\n";
  for (const auto& p : r.plans) {
    const auto& m = p.metrics;
    s += "| " + p.system + " | " + std::to_string(p.edge_nodes.size()) + " | " +
         std::to_string(p.uploads.size()) + " | " + fmt("%.3f", m.bytes_up / 1e6) + " | " +
         fmt("%.4f", m.edge_s) + " | " + fmt("%.4f", m.upload_s) + " | " + fmt("%.4f", m.cloud_s) +
         " | " + fmt("%.4f", m.serial_s) + " | " + fmt("%.4f", m.makespan_s) + " | " +
         fmt("%.3f", m.makespan_s / r.best_baseline_s) + " | " + fmt("%.4f", m.planner_s) + " |\n";
  }
  return s;
}

std::string sweep_table(const std::vector<Row>& rows) {
  std::ostringstream s;
  s << "| Mbps |";
  for (const std::string& n : cnn::edge::edge_cloud_system_names()) s << " " << n << " s |";
  s << " best baseline | DECC / best | DECC's plan |\n|---:|";
  for (size_t i = 0; i < cnn::edge::edge_cloud_system_names().size(); ++i) s << "---:|";
  s << "---|---:|---|\n";
  for (const Row& r : rows) {
    s << "| " << fmt("%g", r.mbps) << " |";
    std::string from;
    double decc = 0;
    for (const auto& p : r.plans) {
      s << " " << fmt("%.4f", p.metrics.makespan_s) << " |";
      if (p.system == "decc") decc = p.metrics.makespan_s, from = p.notes.value("from", "decc");
    }
    s << " " << r.best_baseline << " | " << fmt("%.3f", decc / r.best_baseline_s) << " | " << from
      << " |\n";
  }
  return s.str();
}

nlohmann::json row_json(const Row& r, const cnn::edge::EdgeCloudProblem& pb, bool lists) {
  nlohmann::json plans = nlohmann::json::array();
  for (const auto& p : r.plans) plans.push_back(p.to_json(pb, lists));
  double decc = 0;
  for (const auto& p : r.plans)
    if (p.system == "decc") decc = p.metrics.makespan_s;
  return {{"mbps", r.mbps},
          {"best_baseline", r.best_baseline},
          {"best_baseline_s", r.best_baseline_s},
          {"decc_vs_best_baseline", decc / r.best_baseline_s},
          {"plans", plans}};
}

void write(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  std::ofstream f(path);
  f << text;
  if (!f) throw IoError("edge split: cannot write '" + path + "'");
}

int run_split(const SplitOptions& o) {
  const ClusterSpec cluster = ClusterSpec::from_json_file(o.cluster);
  const cnn::Graph g = cnn::edge::load_edge_graph(o.model);  // a virtual sink when several outputs
  const RooflineCostModel roofline;
  std::unique_ptr<cnn::edge::EdgeCostModel> model;
  if (o.cost == "analytic")
    model = std::make_unique<cnn::edge::AnalyticCostModel>();
  else
    model = std::make_unique<cnn::edge::PerOpCostModel>(g, roofline);
  const cnn::edge::EdgeCostModel& cost = *model;
  const nlohmann::json head = {{"model", o.model},
                               {"cluster", o.cluster},
                               {"cost_model", cost.name()},
                               {"predicted", "by the cost model, not measured"}};
  if (!o.sweep.empty()) {
    std::vector<Row> rows;
    nlohmann::json j = head;
    j["rows"] = nlohmann::json::array();
    for (double mbps : o.sweep) {
      rows.push_back(plan_all(g, cluster, mbps, cost));
      ClusterSpec c = cluster;
      for (LinkProfile& l : c.links) l.bandwidth_bytes_per_s = mbps * 1e6 / 8;
      j["rows"].push_back(
          row_json(rows.back(), cnn::edge::make_edge_cloud_problem(g, c, cost), false));
    }
    const std::string md = "Predicted end-to-end delay (s) of " + o.model + " on " + o.cluster +
                           " per uplink bandwidth\n\n" + sweep_table(rows);
    write(o.md_path, md);
    write(o.json_path, j.dump(2) + "\n");
    std::printf("%s", o.output == "json" ? (j.dump(2) + "\n").c_str() : md.c_str());
    return 0;
  }
  ClusterSpec c = cluster;
  if (o.mbps > 0)
    for (LinkProfile& l : c.links) l.bandwidth_bytes_per_s = o.mbps * 1e6 / 8;
  if (o.run.frames > 0) {
    SplitRunOptions r = o.run;
    r.model = o.model;
    r.json_path = o.json_path;
    r.md_path = o.md_path;
    r.systems = o.system == "all" ? cnn::edge::edge_cloud_system_names()
                                  : std::vector<std::string>{o.system};
    return run_split_frames(r, g, c, cost);
  }
  const cnn::edge::EdgeCloudProblem pb = cnn::edge::make_edge_cloud_problem(g, c, cost);
  std::string md = o.model + " on " + o.cluster + ": " + std::to_string(pb.nodes()) +
                   " nodes; edge '" + pb.edge.name + "', cloud '" + pb.cloud.name + "', uplink " +
                   fmt("%g Mbps", pb.link.bandwidth_bytes_per_s * 8 / 1e6) + ", " +
                   fmt("%g ms", pb.link.latency_s * 1e3) + " (predicted)\n\n";
  nlohmann::json j = head;
  if (o.system == "all") {
    const Row r = plan_all(g, c, 0, cost);
    md += side_by_side(r);
    j.update(row_json(r, pb, true));
  } else {
    const cnn::edge::EdgeCloudPlan p = cnn::edge::plan_edge_cloud(o.system, pb);
    md += cnn::edge::format_table(p, pb);
    j.update(p.to_json(pb, true));
  }
  write(o.md_path, md);
  write(o.json_path, j.dump(2) + "\n");
  std::printf("%s", o.output == "json" ? (j.dump(2) + "\n").c_str() : md.c_str());
  return 0;
}

}  // namespace

CLI::App* add_edge_split(CLI::App* edge, std::function<int()>& run) {
  auto o = std::make_shared<SplitOptions>();
  CLI::App* sub = edge->add_subcommand(
      "split",
      "Split a CNN between an edge device and a cloud server (DECC, Neurosurgeon, DADS, "
      "edge-only, cloud-only): predicted plan, all systems side by side, or a bandwidth sweep");
  sub->add_option("--cluster", o->cluster,
                  "ClusterSpec JSON with exactly two devices, the edge then the cloud, and a link "
                  "(e.g. configs/clusters/edge-cloud.json)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("-m,--model", o->model,
                  "ONNX CNN with one input (several outputs are joined by a virtual sink)")
      ->required()
      ->check(CLI::ExistingFile);
  std::vector<std::string> systems = cnn::edge::edge_cloud_system_names();
  systems.push_back("all");
  sub->add_option("--system", o->system,
                  "decc, neurosurgeon, dads (DSH below 1.51 Mbps, else DSL), dads-dsl, dads-dsh, "
                  "edge-only, cloud-only, or all (side by side)")
      ->check(CLI::IsMember(systems))
      ->capture_default_str();
  sub->add_option("--mbps", o->mbps, "Set the uplink to this bandwidth (Mbit/s)")
      ->check(number_in(1e-3, 1e9));
  sub->add_option("--sweep", o->sweep,
                  "Bandwidths in Mbit/s, comma-separated (e.g. 0.5,1,1.5,2,5,10,20,50,100): every "
                  "system's predicted delay at each, with DECC over the best baseline")
      ->delimiter(',')
      ->check(number_in(1e-3, 1e9));
  sub->add_option("--cost", o->cost,
                  "Cost model: analytic (PICO eq. 5: FLOPs / the device's peak_flops) or roofline "
                  "(each node through the core roofline: FLOPs and bytes against peak_flops and "
                  "mem_bandwidth_bytes_per_s)")
      ->check(CLI::IsMember({"analytic", "roofline"}))
      ->capture_default_str();
  sub->add_option("-o,--output", o->output, "md or json (stdout)")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();
  sub->add_option("--json", o->json_path, "Also write the JSON here");
  sub->add_option("--md", o->md_path, "Also write the markdown here");
  sub->add_option("--run", o->run.frames,
                  "Run N frames of each plan on the pipeline runtime (cnn.split stages: the edge "
                  "here, the cloud in process with the cluster's link emulated, or on --workers) "
                  "and print the measured delay per frame beside the prediction")
      ->check(CLI::Range(1, 100000));
  sub->add_option("--workers", o->run.workers,
                  "cloud=ENDPOINT: the cloud side on a `tandem worker` (tcp://host:port); the "
                  "link is then the real one")
      ->delimiter(',');
  sub->add_option("--key", o->run.key, "Cluster CURVE key file for tcp:// workers");
  sub->add_flag("--emulate-link", o->run.emulate_link,
                "With --workers: also emulate the cluster's link (token bucket) on top");
  sub->add_flag("--adapt", o->run.adapt,
                "With --run and one --system: probe the uplink before every --probe-every frames "
                "(a timed bulk transfer and round trip to the cloud worker), smooth it (EMA) and "
                "plan again when it moved by more than 20%");
  sub->add_option("--probe-every", o->run.frames_per_probe, "Frames between probes (--adapt)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  sub->add_flag("--verify", o->run.verify, "Compare every output with the single-device run");
  run = [o] { return run_split(*o); };
  return sub;
}

}  // namespace tandem::cli
