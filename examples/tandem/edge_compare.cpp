// SPDX-License-Identifier: Apache-2.0
// `tandem edge compare` (edge_compare.h). For each model: the chain's pieces are profiled once on
// this host (TileBench, one thread), then for each bandwidth (every link of the cluster set to it)
// each system is planned with the chosen cost model, evaluated (the prediction) and replayed
// (every share's tile timed on the engine, composed with the same link model: the measurement).
// Rows give both and their error, throughput against one device, redundancy and utilisation.
#include "edge_compare.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "tandem/cnn/edge/measure.h"
#include "tandem/cnn/edge/planners.h"
#include "tandem/core/cluster.h"

namespace tandem::cli {
namespace {

struct CompareOptions {
  std::string cluster;
  std::vector<std::string> models;
  std::vector<double> mbps;  // empty: the cluster's own links
  std::vector<std::string> systems;
  std::string cost = "profiled";
  int repeats = 3;
  std::string json_path, md_path;
};

ClusterSpec with_bandwidth(ClusterSpec c, double mbps) {
  for (LinkProfile& l : c.links) l.bandwidth_bytes_per_s = mbps * 1e6 / 8;
  return c;
}

double error_pct(double predicted, double measured) {
  return measured > 0 ? 100 * (predicted - measured) / measured : 0.0;
}

nlohmann::json finite(double v) { return std::isfinite(v) ? nlohmann::json(v) : nullptr; }

struct Row {
  std::string model, system;
  double mbps = 0;
  size_t stages = 0;
  cnn::edge::Metrics predicted, measured;
  double vs_single = 0;  // measured throughput over the single device's measured
};

nlohmann::json row_json(const Row& r) {
  auto m = [](const cnn::edge::Metrics& x) {
    return nlohmann::json{{"period_s", finite(x.period_s)},
                          {"latency_s", finite(x.latency_s)},
                          {"throughput_fps", finite(x.throughput_fps)},
                          {"redundancy", x.redundancy},
                          {"mean_utilisation", x.mean_utilisation},
                          {"bytes_moved", x.bytes_moved},
                          {"medium_s", x.medium_s}};
  };
  return {{"model", r.model},
          {"mbps", r.mbps},
          {"system", r.system},
          {"stages", r.stages},
          {"planner_s", r.predicted.planner_s},
          {"predicted", m(r.predicted)},
          {"replayed", m(r.measured)},
          {"period_error_pct", error_pct(r.predicted.period_s, r.measured.period_s)},
          {"latency_error_pct", error_pct(r.predicted.latency_s, r.measured.latency_s)},
          {"throughput_vs_single", finite(r.vs_single)}};
}

std::string table(const std::vector<Row>& rows) {
  std::ostringstream s;
  s << "| model | Mbps | system | stages | period pred. s | period replay s | error | latency "
       "pred. s | latency replay s | error | frames/s | vs single | redundancy | utilisation "
       "|\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  char buf[512];
  for (const Row& r : rows) {
    std::snprintf(buf, sizeof buf,
                  "| %s | %g | %s | %zu | %.4f | %.4f | %+.1f%% | %.4f | %.4f | %+.1f%% | %.2f | "
                  "%.2fx | %.1f%% | %.0f%% |\n",
                  r.model.c_str(), r.mbps, r.system.c_str(), r.stages, r.predicted.period_s,
                  r.measured.period_s, error_pct(r.predicted.period_s, r.measured.period_s),
                  r.predicted.latency_s, r.measured.latency_s,
                  error_pct(r.predicted.latency_s, r.measured.latency_s), r.measured.throughput_fps,
                  r.vs_single, 100 * r.measured.redundancy, 100 * r.measured.mean_utilisation);
    s << buf;
  }
  return s.str();
}

std::string stem(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  std::string s = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = s.rfind('.');
  return dot == std::string::npos ? s : s.substr(0, dot);
}

void compare_model(const CompareOptions& o, const ClusterSpec& base, const std::string& path,
                   std::vector<Row>& rows) {
  const cnn::Graph graph = cnn::edge::load_edge_graph(path);
  const cnn::edge::Chain chain = cnn::edge::linearise(graph);
  std::fprintf(stderr, "edge compare: %s: %d pieces, profiling on this host...\n", path.c_str(),
               chain.size());
  cnn::edge::TileBench bench(chain, o.repeats);
  const cnn::edge::ProfiledCostModel profiled(chain, cnn::edge::profile_pieces(bench));
  const cnn::edge::AnalyticCostModel analytic;
  const cnn::edge::EdgeCostModel& cost =
      o.cost == "analytic" ? static_cast<const cnn::edge::EdgeCostModel&>(analytic) : profiled;
  std::vector<double> bandwidths = o.mbps;
  if (bandwidths.empty()) bandwidths.push_back(0);
  for (double mbps : bandwidths) {
    const ClusterSpec cluster = mbps > 0 ? with_bandwidth(base, mbps) : base;
    const cnn::edge::EdgeProblem pb = cnn::edge::make_problem(chain, cluster, cost);
    const double shown = pb.medium.bandwidth_bytes_per_s * 8 / 1e6;
    std::fprintf(stderr, "edge compare: %s at %g Mbps: ", stem(path).c_str(), shown);
    const size_t first = rows.size();
    double single_fps = 0;
    for (const std::string& system : o.systems) {
      std::fprintf(stderr, "%s ", system.c_str());
      const cnn::edge::EdgePlan plan = cnn::edge::plan_system(system, pb, {});
      Row r{.model = stem(path), .system = system, .mbps = shown, .stages = plan.stages.size()};
      r.predicted = plan.metrics;
      r.measured = cnn::edge::replay(plan, pb, bench);
      if (system == "single") single_fps = r.measured.throughput_fps;
      rows.push_back(std::move(r));
    }
    std::fprintf(stderr, "\n");
    for (size_t i = first; i < rows.size(); ++i)
      rows[i].vs_single = single_fps > 0 ? rows[i].measured.throughput_fps / single_fps : NAN;
  }
}

int run_compare(const CompareOptions& o) {
  const ClusterSpec base = ClusterSpec::from_json_file(o.cluster);
  for (const std::string& s : o.systems)
    if (s == "apico") throw InvalidArgument("edge compare: apico needs a load; leave it out");
  std::vector<Row> rows;
  for (const std::string& m : o.models) compare_model(o, base, m, rows);
  const std::string md = table(rows);
  std::printf(
      "Predicted with the %s cost model; replayed: every share's tile timed on this host's "
      "engine (one thread, min of %d), carried to its device by its speed factor, composed with "
      "the link model.\n\n%s",
      o.cost.c_str(), o.repeats, md.c_str());
  if (!o.md_path.empty()) {
    std::ofstream f(o.md_path);
    f << md;
    if (!f) throw IoError("edge compare: cannot write '" + o.md_path + "'");
  }
  if (!o.json_path.empty()) {
    nlohmann::json j = {{"cluster", o.cluster},
                        {"cost_model", o.cost},
                        {"repeats", o.repeats},
                        {"rows", nlohmann::json::array()}};
    for (const Row& r : rows) j["rows"].push_back(row_json(r));
    std::ofstream f(o.json_path);
    f << j.dump(2) << "\n";
    if (!f) throw IoError("edge compare: cannot write '" + o.json_path + "'");
  }
  return 0;
}

}  // namespace

CLI::App* add_edge_compare(CLI::App* edge, std::function<int()>& run) {
  auto o = std::make_shared<CompareOptions>();
  CLI::App* sub = edge->add_subcommand(
      "compare",
      "Every system x model x bandwidth: planned, predicted and replayed on the real engine");
  sub->add_option("--cluster", o->cluster, "ClusterSpec JSON (e.g. configs/clusters/pico-8.json)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("-m,--model", o->models, "ONNX CNN (repeatable)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--mbps", o->mbps,
                  "Bandwidths to sweep, Mbit/s, comma-separated (every link set to each); "
                  "default: the cluster's own")
      ->delimiter(',')
      ->check(number_in(1e-3, 1e6));
  std::vector<std::string> known = cnn::edge::system_names();
  o->systems.clear();
  for (const std::string& s : known)
    if (s != "apico") o->systems.push_back(s);
  sub->add_option("--system", o->systems, "Systems, comma-separated (default: all but apico)")
      ->delimiter(',')
      ->check(CLI::IsMember(known));
  sub->add_option("--cost", o->cost,
                  "Cost model the planners use: profiled (per-piece tables measured here "
                  "first) or analytic (PICO eq. 5, alpha 1)")
      ->check(CLI::IsMember({"profiled", "analytic"}))
      ->capture_default_str();
  sub->add_option("--repeats", o->repeats, "Timed runs per tile (the minimum is kept)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  sub->add_option("--json", o->json_path, "Write every row as JSON");
  sub->add_option("--md", o->md_path, "Write the table as markdown");
  run = [o] { return run_compare(*o); };
  return sub;
}

}  // namespace tandem::cli
