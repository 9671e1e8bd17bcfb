// SPDX-License-Identifier: Apache-2.0
// The stage-kind and group-ops registries (stage.h), tandem::Registry instances.
#include "tandem/core/error.h"
#include "tandem/core/registry.h"
#include "tandem/sched/stage.h"

namespace tandem::sched {

Registry<StageFactory>& stage_kind_registry() {
  static Registry<StageFactory> r("stage kind");
  return r;
}

Registry<GroupOps>& group_ops_registry() {
  static Registry<GroupOps> r("group stage kind");
  return r;
}

void register_stage_kind(const std::string& kind, StageFactory factory) {
  if (!factory) throw InvalidArgument("register_stage_kind: '" + kind + "' has no factory");
  stage_kind_registry().add(kind, std::move(factory));
}

std::unique_ptr<Stage> make_stage(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("kind") || !config["kind"].is_string())
    throw InvalidArgument("stage config: expected an object with a string \"kind\", got " +
                          config.dump().substr(0, 200));
  const std::string kind = config["kind"].get<std::string>();
  auto stage = stage_kind_registry().get(kind)(config);
  if (!stage) throw InvalidArgument("stage kind '" + kind + "': factory returned nothing");
  return stage;
}

std::vector<std::string> stage_kinds() { return stage_kind_registry().names(); }

}  // namespace tandem::sched
