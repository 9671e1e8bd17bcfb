// SPDX-License-Identifier: Apache-2.0
// HPipe's plan-level re-plan after a lost worker (hpipe.h replan_over_survivors).
#include <algorithm>

#include "tandem/core/error.h"
#include "tandem/core/log.h"
#include "tandem/llm/hpipe.h"

namespace tandem::llm::hpipe {

sched::PlanReplanFn replan_over_survivors(const ModelProfile& prof, const ClusterSpec& cluster,
                                          const PlanOptions& options) {
  return [prof, cluster, options](const sched::PipelinePlan& current,
                                  const std::vector<std::string>& failed,
                                  const std::vector<std::string>&) {
    ClusterSpec survivors;
    survivors.links = cluster.links;
    for (const std::string& d : current.devices())
      if (std::find(failed.begin(), failed.end(), d) == failed.end())
        survivors.devices.push_back(cluster.device(d));
    if (survivors.devices.empty()) throw Infeasible("HPipe re-plan: no device of the plan is left");
    std::erase_if(survivors.links, [&](const LinkProfile& l) {
      return !survivors.has_device(l.from) || !survivors.has_device(l.to);
    });
    PlanOptions o = options;
    o.batch = static_cast<int>(current.batch > 0 ? current.batch : current.micro_batches);
    // The running system's layer split (DP 1 for the heterogeneity-aware ones, even otherwise);
    // its slicing is kept (the requests are already cut).
    const std::string& sys = current.system;
    const bool dp1 = sys == "hpipe" || sys == "gp-b" || sys.rfind("uniform-", 0) == 0;
    sched::PipelinePlan next =
        make_plan(prof, survivors, current.cluster, static_cast<int>(current.prompt_len),
                  dp1 ? "gp-b" : "gpipe", o);
    next.system = current.system;
    next.slices = current.slices;
    next.micro_batches = current.micro_batches;
    predict(next, prof, survivors);
    std::string split;
    for (const StagePlan& st : layer_stages(next, "HPipe re-plan").stages)
      split += cat(split.empty() ? "" : ", ", "[", st.first_layer, ", ", st.last_layer, ") on ",
                   st.device);
    log().warn("HPipe re-plan ({}) over {} survivors: layers {}; predicted {:.4f} s", sys,
               survivors.devices.size(), split, next.predicted.latency_s);
    return next;
  };
}

}  // namespace tandem::llm::hpipe
