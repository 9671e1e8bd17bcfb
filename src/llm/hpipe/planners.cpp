// SPDX-License-Identifier: Apache-2.0
// HPipe and its baselines in the planner registry (sched/planner.h). The request's model is a
// model profile (`tandem hpipe profile`); options: prompt_len (required), batch, granularity,
// max_candidates, max_grid, and k for "uniform" (K equal slices).
#include "core/json_reader.h"
#include "tandem/core/registry.h"
#include "tandem/llm/hpipe.h"
#include "tandem/sched/planner.h"

namespace tandem::llm::hpipe {
namespace {

using detail::JsonField;

int option(const JsonField& options, const char* key, int fallback, int hi) {
  if (!options.has(key)) return fallback;
  const JsonField f = options.at(key);
  const int64_t v = f.positive_integer();
  if (v > hi) f.fail(cat("expected at most ", hi, ", got ", f.shown()));
  return static_cast<int>(v);
}

sched::PipelinePlan plan_with(const std::string& system, const sched::PlanRequest& req) {
  const JsonField o(req.options, "planner options", "");
  o.expect_object({"prompt_len", "batch", "granularity", "max_candidates", "max_grid", "k"});
  if (!o.has("prompt_len")) o.fail("'prompt_len' missing (tokens per request)");
  PlanOptions opt;
  opt.batch = option(o, "batch", opt.batch, kMaxBatch);
  opt.granularity = option(o, "granularity", opt.granularity, 1 << 20);
  opt.max_candidates = option(o, "max_candidates", opt.max_candidates, 1 << 16);
  opt.max_grid = option(o, "max_grid", opt.max_grid, 1 << 16);
  const int prompt_len = option(o, "prompt_len", 0, 1 << 30);
  std::string name = system;
  if (system == "uniform")
    name = cat("uniform-", option(o, "k", 8, 128));
  else if (o.has("k"))
    o.at("k").fail(cat("only the 'uniform' planner takes k, not '", system, "'"));
  return make_plan(ModelProfile::load(req.model), req.cluster, req.cluster_name, prompt_len, name,
                   opt);
}

sched::Planner llm_planner(const std::string& system, const std::string& description) {
  return {"llm", description,
          [system](const sched::PlanRequest& r) { return plan_with(system, r); }};
}

Registration hpipe_reg(sched::planner_registry(), "hpipe",
                       llm_planner("hpipe", "HPipe: DP 1 layer partition + DP 2 token slicing"));
Registration gpipe_reg(sched::planner_registry(), "gpipe",
                       llm_planner("gpipe",
                                   "GPipe: even layer split, one request per micro-batch"));
Registration gpb_reg(sched::planner_registry(), "gp-b",
                     llm_planner("gp-b", "GPipe on HPipe's heterogeneous layer partition"));
Registration terapipe_reg(sched::planner_registry(), "terapipe",
                          llm_planner("terapipe",
                                      "TeraPipe: even split, token slicing at the mean speed"));
Registration base_reg(sched::planner_registry(), "base",
                      llm_planner("base", "even split, the whole batch as one packet"));
Registration uniform_reg(sched::planner_registry(), "uniform",
                         llm_planner("uniform", "HPipe's partition with k equal token slices"));

}  // namespace
}  // namespace tandem::llm::hpipe
