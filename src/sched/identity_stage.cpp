// SPDX-License-Identifier: Apache-2.0
// "sched.identity": returns its packet unchanged (config {"kind": "sched.identity"}). It isolates
// the runtime's own cost (queues, encoding, transport) in `tandem pipeline overhead` and tests.
#include "tandem/core/error.h"
#include "tandem/sched/stage.h"

namespace tandem::sched {
namespace {

class IdentityStage : public Stage {
 public:
  std::string kind() const override { return "sched.identity"; }
  Packet process(Packet in) override { return in; }
};

const StageKindRegistration kIdentityRegistration("sched.identity", [](const nlohmann::json& c) {
  for (const auto& [k, v] : c.items())
    if (k != "kind") throw InvalidArgument("sched.identity: unknown config key \"" + k + "\"");
  return std::make_unique<IdentityStage>();
});

}  // namespace
}  // namespace tandem::sched
