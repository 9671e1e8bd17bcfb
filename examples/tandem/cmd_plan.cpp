// SPDX-License-Identifier: Apache-2.0
// `tandem plan`: any registered planner (sched/planner.h) by its system name, the same way for
// every engine; `tandem plan --list` prints the registry.
//
//   tandem plan --list
//   tandem plan --system hpipe --cluster configs/clusters/hetero3.json --model p.hpipe.json \
//               --set prompt_len=2048 --set batch=4 -o plan.json
#include <cstdio>
#include <memory>

#include "commands.h"
#include "tandem/core/error.h"
#include "tandem/core/json.h"
#include "tandem/sched/planner.h"

namespace tandem::cli {
namespace {

struct PlanOptions {
  bool list = false;
  std::string system, cluster, model, out, output = "md";
  std::vector<std::string> set;
};

// "key=value": the value as JSON when it parses (numbers, true, lists), else as a string.
nlohmann::json planner_options(const std::vector<std::string>& pairs) {
  nlohmann::json o = nlohmann::json::object();
  for (const std::string& kv : pairs) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw InvalidArgument("plan: --set expects KEY=VALUE, got '" + kv + "'");
    const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    try {
      o[key] = parse_json(value, "--set " + key);
    } catch (const ParseError&) {
      o[key] = value;
    }
  }
  return o;
}

int list_planners(const std::string& output) {
  const auto entries = sched::planner_registry().entries();
  if (output == "json") {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& [name, p] : entries)
      j.push_back({{"system", name}, {"domain", p.domain}, {"description", p.description}});
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("| system | domain | description |\n|---|---|---|\n");
  for (const auto& [name, p] : entries)
    std::printf("| %s | %s | %s |\n", name.c_str(), p.domain.c_str(), p.description.c_str());
  return 0;
}

void print_plan(const sched::PipelinePlan& plan) {
  std::printf("system %s on %s: %zu stages\n", plan.system.c_str(), plan.cluster.c_str(),
              plan.stages.size());
  std::printf("| stage | kind | devices | busy s |\n|---|---|---|---|\n");
  for (size_t i = 0; i < plan.stages.size(); ++i) {
    std::string devices;
    for (const auto& d : plan.stages[i].devices)
      devices += (devices.empty() ? "" : ", ") + d.device;
    const auto& busy = plan.predicted.per_stage_busy_s;
    std::printf("| %zu | %s | %s | %s |\n", i, plan.stages[i].kind().c_str(), devices.c_str(),
                i < busy.size() ? cat(busy[i]).c_str() : "");
  }
  const auto& p = plan.predicted;
  std::printf("predicted latency %.4g s", p.latency_s);
  if (p.period_s > 0) std::printf(", period %.4g s", p.period_s);
  if (p.throughput_per_s > 0)
    std::printf(", %.4g %s/s", p.throughput_per_s, p.unit.empty() ? "items" : p.unit.c_str());
  std::printf(" (%s)\n", p.source.c_str());
}

int run_plan(const PlanOptions& o) {
  if (o.list) return list_planners(o.output);
  if (o.system.empty() || o.cluster.empty() || o.model.empty())
    throw InvalidArgument("plan: --system, --cluster and --model are required (or --list)");
  sched::PlanRequest req{ClusterSpec::from_json_file(o.cluster), o.cluster, o.model,
                         planner_options(o.set)};
  const sched::PipelinePlan plan = sched::make_plan(o.system, req);
  if (o.output == "json")
    std::printf("%s\n", plan.to_json().dump(2).c_str());
  else
    print_plan(plan);
  if (!o.out.empty()) plan.save(o.out);
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* sub = app.add_subcommand(
      "plan", "Plan with any registered planner (HPipe, its baselines, ...): prints the plan");
  sub->add_flag("--list", o->list, "List the registered planners and exit");
  sub->add_option("--system", o->system, "Planner name (see --list)");
  sub->add_option("--cluster", o->cluster, "ClusterSpec JSON")->check(CLI::ExistingFile);
  sub->add_option("-m,--model", o->model,
                  "The planner's model input (HPipe: a model profile from `tandem hpipe profile`)");
  sub->add_option("--set", o->set,
                  "Planner option KEY=VALUE, repeatable (HPipe: prompt_len, "
                  "batch, granularity, max_candidates, max_grid; uniform: k)");
  sub->add_option("--out", o->out, "Write the plan JSON here");
  sub->add_option("-o,--output", o->output, "Print format")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();
  return Command{sub, [o] { return run_plan(*o); }};
});

}  // namespace
}  // namespace tandem::cli
