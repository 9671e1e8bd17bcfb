// SPDX-License-Identifier: Apache-2.0
// An edge plan planned again over the surviving devices (tandem/cnn/edge/replan.h).
#include "tandem/cnn/edge/replan.h"

#include <algorithm>
#include <memory>
#include <set>

#include "tandem/core/error.h"

namespace tandem::cnn::edge {

sched::PlanReplanFn replan_over_survivors(const std::string& system, const EdgeProblem& problem,
                                          const std::string& model, const std::string& cluster,
                                          const PlanOptions& options) {
  // Devices lost in earlier re-plans stay lost: the runtime reports only the latest failures.
  auto lost = std::make_shared<std::set<std::string>>();
  return [=, &problem](const sched::PipelinePlan&, const std::vector<std::string>& failed,
                       const std::vector<std::string>&) {
    lost->insert(failed.begin(), failed.end());
    EdgeProblem left = problem;
    left.devices.clear();
    for (const DeviceProfile& d : problem.devices)
      if (!lost->count(d.name)) left.devices.push_back(d);
    if (left.devices.empty())
      throw Infeasible(cat("edge re-plan: every device of ", cluster, " is lost"));
    return to_pipeline_plan(plan_system(system, left, options), left, model, cluster);
  };
}

}  // namespace tandem::cnn::edge
