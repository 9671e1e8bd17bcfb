// SPDX-License-Identifier: Apache-2.0
// The stage-kind registry (stage.h).
#include <map>
#include <mutex>

#include "tandem/core/error.h"
#include "tandem/sched/stage.h"

namespace tandem::sched {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, StageFactory> kinds;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_stage_kind(const std::string& kind, StageFactory factory) {
  if (kind.empty()) throw InvalidArgument("register_stage_kind: empty kind");
  if (!factory) throw InvalidArgument("register_stage_kind: '" + kind + "' has no factory");
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (!r.kinds.emplace(kind, std::move(factory)).second)
    throw InvalidArgument("register_stage_kind: '" + kind + "' is registered twice");
}

std::unique_ptr<Stage> make_stage(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("kind") || !config["kind"].is_string())
    throw InvalidArgument("stage config: expected an object with a string \"kind\", got " +
                          config.dump().substr(0, 200));
  const std::string kind = config["kind"].get<std::string>();
  StageFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = r.kinds.find(kind);
    if (it == r.kinds.end()) {
      std::string known;
      for (const auto& [k, f] : r.kinds) known += (known.empty() ? "" : ", ") + k;
      throw InvalidArgument("unknown stage kind '" + kind +
                            "' (registered: " + (known.empty() ? "none" : known) + ")");
    }
    factory = it->second;
  }
  auto stage = factory(config);
  if (!stage) throw InvalidArgument("stage kind '" + kind + "': factory returned nothing");
  return stage;
}

std::vector<std::string> stage_kinds() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> out;
  for (const auto& [k, f] : r.kinds) out.push_back(k);
  return out;
}

}  // namespace tandem::sched
