// SPDX-License-Identifier: Apache-2.0
// The planner registry (planner.h).
#include "tandem/sched/planner.h"

namespace tandem::sched {

Registry<Planner>& planner_registry() {
  static Registry<Planner> r("planner");
  return r;
}

PipelinePlan make_plan(const std::string& system, const PlanRequest& request) {
  const Planner p = planner_registry().get(system);
  if (!p.plan) throw InvalidArgument("planner '" + system + "' has no plan function");
  return p.plan(request);
}

}  // namespace tandem::sched
