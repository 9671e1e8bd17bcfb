// SPDX-License-Identifier: Apache-2.0
// `tandem edge plan`: plans an ONNX CNN on an edge cluster with PICO or one of its baselines (LW,
// EFL, OFL, PipeEdge, single device; spec cnn.md §3.1, §4) and prints the plan (stages, devices,
// rows, predicted period/latency, redundancy, utilisation) as a table or JSON. `--system all`
// prints every system side by side. Planning only: `edge run` / `edge compare` come with the
// cnn.tiles stage kind.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "tandem/cnn/edge/planners.h"
#include "tandem/cnn/onnx_import.h"
#include "tandem/core/cluster.h"
#include "tandem/core/error.h"

namespace tandem::cli {
namespace {

struct EdgePlanOptions {
  std::string cluster;
  std::string model;
  std::string system = "pico";
  double lambda = 0;
  double latency_cap_s = 0;  // 0: none
  bool allow_idle = false;
  bool refine = false;
  std::string output = "md";
};

std::string row(const cnn::edge::EdgePlan& p, double single_period) {
  const cnn::edge::Metrics& m = p.metrics;
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "| %s | %zu | %.4f | %.4f | %.2f | %.2fx | %.2f%% | %.1f%% | %.2f | %.4f | %.4f |\n",
      p.system.c_str(), p.stages.size(), m.period_s, m.latency_s, m.throughput_fps,
      single_period / m.period_s, 100 * m.redundancy, 100 * m.mean_utilisation, m.bytes_moved / 1e6,
      m.medium_s, m.planner_s);
  return buf;
}

int run_edge_plan(const EdgePlanOptions& o) {
  const ClusterSpec cluster = ClusterSpec::from_json_file(o.cluster);
  const cnn::Graph g = cnn::import_onnx(o.model);
  const cnn::edge::Chain chain = cnn::edge::linearise(g);
  const cnn::edge::AnalyticCostModel cost;
  const cnn::edge::EdgeProblem pb = cnn::edge::make_problem(chain, cluster, cost);
  cnn::edge::PlanOptions po{
      .lambda = o.lambda, .allow_idle_devices = o.allow_idle, .refine_mapping = o.refine};
  if (o.latency_cap_s > 0) po.latency_cap_s = o.latency_cap_s;
  if (o.system != "all") {
    const cnn::edge::EdgePlan plan = cnn::edge::plan_system(o.system, pb, po);
    if (o.output == "json") {
      nlohmann::json j = plan.to_json(pb);
      j["model"] = o.model;
      j["cluster"] = o.cluster;
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("%s on %s: %d pieces, %.2f GFLOP; %zu devices, medium %.2f MB/s\n\n",
                  o.model.c_str(), o.cluster.c_str(), chain.size(), chain.total_flops() * 1e-9,
                  pb.devices.size(), pb.medium.bandwidth_bytes_per_s / 1e6);
      std::printf("%s", cnn::edge::format_table(plan, pb).c_str());
    }
    return 0;
  }
  std::vector<cnn::edge::EdgePlan> plans;
  for (const std::string& s : cnn::edge::system_names())
    if (s != "apico" || o.lambda > 0) plans.push_back(cnn::edge::plan_system(s, pb, po));
  double single = 0;
  for (const auto& p : plans)
    if (p.system == "single") single = p.metrics.period_s;
  if (o.output == "json") {
    nlohmann::json j = {
        {"model", o.model}, {"cluster", o.cluster}, {"plans", nlohmann::json::array()}};
    for (const auto& p : plans) j["plans"].push_back(p.to_json(pb));
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s on %s: %d pieces, %.2f GFLOP; %zu devices, medium %.2f MB/s\n\n", o.model.c_str(),
              o.cluster.c_str(), chain.size(), chain.total_flops() * 1e-9, pb.devices.size(),
              pb.medium.bandwidth_bytes_per_s / 1e6);
  std::printf(
      "| system | stages | period s | latency s | frames/s | vs single | redundancy | "
      "utilisation | MB/frame | medium s | planner s |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& p : plans) std::printf("%s", row(p, single).c_str());
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<EdgePlanOptions>();
  CLI::App* edge =
      app.add_subcommand("edge", "CNN inference on an edge cluster: PICO and baselines");
  edge->require_subcommand(1);
  CLI::App* plan = edge->add_subcommand(
      "plan", "Plan a CNN on a cluster (PICO, LW, EFL, OFL, PipeEdge, single) and print it");
  plan->add_option("--cluster", o->cluster, "ClusterSpec JSON (e.g. configs/clusters/pico-8.json)")
      ->required()
      ->check(CLI::ExistingFile);
  plan->add_option("-m,--model", o->model, "ONNX CNN with one input and one output")
      ->required()
      ->check(CLI::ExistingFile);
  std::vector<std::string> systems = cnn::edge::system_names();
  systems.push_back("all");
  plan->add_option("--system", o->system,
                   "pico, apico (pipeline or fused by M/D/1 latency at --lambda), lw, efl, ofl, "
                   "pipeedge, single, or all (a comparison table)")
      ->check(CLI::IsMember(systems))
      ->capture_default_str();
  plan->add_option("--lambda", o->lambda, "Poisson frame rate (frames/s) for the mean latency")
      ->check(number_in(0, 1e9));
  plan->add_option("--latency-cap", o->latency_cap_s, "PICO's T_lim in seconds (0: none)")
      ->check(number_in(0, 1e9));
  plan->add_flag("--allow-idle", o->allow_idle,
                 "PICO: let the DP leave devices idle (the paper uses all of them)");
  plan->add_flag("--refine", o->refine,
                 "PICO: local search over the device mapping after the paper's greedy step "
                 "(not in the paper)");
  plan->add_option("-o,--output", o->output, "md or json")->check(CLI::IsMember({"md", "json"}));
  return Command{edge, [o] { return run_edge_plan(*o); }};
});

}  // namespace
}  // namespace tandem::cli
