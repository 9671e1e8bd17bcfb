// SPDX-License-Identifier: Apache-2.0
// The edge planners by name (tandem/cnn/edge/planners.h).
#include <algorithm>

#include "tandem/cnn/edge/planners.h"
#include "tandem/core/error.h"

namespace tandem::cnn::edge {

const std::vector<std::string>& system_names() {
  static const std::vector<std::string> kNames = {
      "pico",     "apico",  "lw",         "efl",           "ofl",
      "pipeedge", "single", "deepzoning", "deepzoning-tp", "coedge"};
  return kNames;
}

EdgePlan plan_system(const std::string& system, const EdgeProblem& pb, const PlanOptions& o) {
  if (system == "pico") return plan_pico(pb, o);
  if (system == "apico") return plan_apico(pb, o);
  if (system == "lw") return plan_lw(pb, o);
  if (system == "efl") return plan_efl(pb, o);
  if (system == "ofl") return plan_ofl(pb, o);
  if (system == "pipeedge") return plan_pipeedge(pb, o);
  if (system == "single") return plan_single(pb, o);
  if (system == "deepzoning") return plan_deepzoning(pb, o);
  if (system == "deepzoning-tp") return plan_deepzoning_tp(pb, o);
  if (system == "coedge") return plan_coedge(pb, o);
  std::string known;
  for (const std::string& s : system_names()) known += (known.empty() ? "" : ", ") + s;
  throw InvalidArgument(cat("edge plan: unknown system '", system, "' (known: ", known, ")"));
}

}  // namespace tandem::cnn::edge
