// SPDX-License-Identifier: Apache-2.0
// The edge CNN planners in the planner registry (sched/planner.h). The request's model is an ONNX
// file; options (all optional): lambda (frames/s), latency_cap_s (PICO's T_lim),
// allow_idle_devices, refine_mapping, efl_rows, efl_cols, efl_fused.
#include <utility>

#include "core/json_reader.h"
#include "tandem/cnn/edge/chain.h"
#include "tandem/cnn/edge/planners.h"
#include "tandem/sched/planner.h"

namespace tandem::cnn::edge {
namespace {

using tandem::detail::JsonField;

PlanOptions read_options(const nlohmann::json& j) {
  const JsonField o(j, "planner options", "");
  o.expect_object({"lambda", "latency_cap_s", "allow_idle_devices", "refine_mapping", "efl_rows",
                   "efl_cols", "efl_fused"});
  PlanOptions opt;
  if (o.has("lambda")) opt.lambda = o.at("lambda").non_negative_number();
  if (o.has("latency_cap_s")) opt.latency_cap_s = o.at("latency_cap_s").positive_number();
  if (o.has("allow_idle_devices")) opt.allow_idle_devices = o.at("allow_idle_devices").boolean();
  if (o.has("refine_mapping")) opt.refine_mapping = o.at("refine_mapping").boolean();
  auto grid = [&](const char* key, int& out) {
    if (!o.has(key)) return;
    const JsonField f = o.at(key);
    out = static_cast<int>(f.in_range(static_cast<double>(f.positive_integer()), 1, 1 << 20));
  };
  grid("efl_rows", opt.efl_rows);
  grid("efl_cols", opt.efl_cols);
  grid("efl_fused", opt.efl_fused);
  return opt;
}

sched::Planner edge_planner(const std::string& system, const std::string& description) {
  return {"cnn", description, [system](const sched::PlanRequest& r) {
            const PlanOptions opt = read_options(r.options);
            const Graph g = load_edge_graph(r.model);
            const Chain chain = linearise(g);
            const AnalyticCostModel cost;
            const EdgeProblem pb = make_problem(chain, r.cluster, cost);
            return to_pipeline_plan(plan_system(system, pb, opt), pb, r.model, r.cluster_name);
          }};
}

// One entry per system of system_names(), registered when the library loads.
const bool kRegistered = [] {
  const std::pair<const char*, const char*> systems[] = {
      {"pico", "PICO: CNN pipeline of device groups (DP + greedy)"},
      {"apico", "APICO: PICO or the fused plan by M/D/1 at lambda"},
      {"lw", "LW: layer-wise rows on all devices (MoDNN)"},
      {"efl", "EFL: DeepThings fused tiles + work stealing"},
      {"ofl", "OFL: fused blocks on all devices (AOFL-style DP)"},
      {"pipeedge", "PipeEdge: interval DP, one device a stage"},
      {"single", "the whole CNN on its fastest device"},
      {"deepzoning", "DeepZoning: merged zones, AWP rows/channels LP (latency)"},
      {"deepzoning-tp", "DeepZoning zones + AWP on PICO's DP (throughput)"},
      {"coedge", "CoEdge-style: per-layer rows by LP, gathered"}};
  for (const auto& [name, description] : systems)
    sched::planner_registry().add(name, edge_planner(name, description));
  return true;
}();

}  // namespace
}  // namespace tandem::cnn::edge
