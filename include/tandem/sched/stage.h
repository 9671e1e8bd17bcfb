// SPDX-License-Identifier: Apache-2.0
// Stage: one step of a pipeline (a range of LLM layers, a CNN tile's layers, ...) and the packets
// that flow between stages. The pipeline runtime (src/sched) moves Packets between stages, over
// in-process queues or over the network to `tandem worker` processes; a worker builds its Stage
// from a JSON config through the stage-kind registry, so the runtime knows nothing about LLMs or
// CNNs.
//
//   struct Doubler : sched::Stage {
//     std::string kind() const override { return "test.double"; }
//     sched::Packet process(sched::Packet p) override { /* p.tensors[0] *= 2 */ return p; }
//   };
//   static sched::StageKindRegistration reg("test.double",
//       [](const nlohmann::json&) { return std::make_unique<Doubler>(); });
//   auto stage = sched::make_stage({{"kind", "test.double"}});
//
// Thread-safety: the runtime calls process() of one Stage from one thread at a time, and packets
// of one request in order (micro 0, 1, ...); different Stages run concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/core/registry.h"
#include "tandem/core/tensor.h"
#include "tandem/export.h"

namespace tandem::sched {

// What travels between stages: host tensors plus small metadata.
struct Packet {
  uint64_t request_id = 0;                         // the request (prompt, image) it belongs to
  int32_t micro = 0;                               // slice / micro-batch index within the request
  int32_t n_micro = 1;                             // slices of the request
  std::vector<Tensor> tensors;                     // activations (host memory)
  nlohmann::json meta = nlohmann::json::object();  // e.g. {"positions": [start, end]}
};

class TANDEM_API Stage {
 public:
  virtual ~Stage() = default;
  virtual std::string kind() const = 0;
  // Computes one packet; the output goes to the next stage (or back to the caller after the last).
  virtual Packet process(Packet in) = 0;
  // Drops per-request state (e.g. a KV cache) once a request is finished or must be re-run.
  virtual void reset(uint64_t request_id) { (void)request_id; }
};

using StageFactory = std::function<std::unique_ptr<Stage>(const nlohmann::json& config)>;

// The registry behind the functions below (core/registry.h).
TANDEM_API Registry<StageFactory>& stage_kind_registry();
// InvalidArgument for an empty or repeated kind.
TANDEM_API void register_stage_kind(const std::string& kind, StageFactory factory);
// Builds config["kind"]; InvalidArgument naming the kind (and the registered ones) when unknown,
// or when config has no string "kind".
TANDEM_API std::unique_ptr<Stage> make_stage(const nlohmann::json& config);
TANDEM_API std::vector<std::string> stage_kinds();  // sorted

// A stage kind whose stages may run on a group of devices (plan.h) also registers how a packet is
// split into the members' parts and their outputs stitched back, by the kind's name. Member k's
// stage is built from the stage config plus {"share": shares[k]} and runs on its own device;
// split and stitch run where the runtime runs the stage (its coordinator: PICO's master) and see
// the stage config (without a share) and every member's share.
struct GroupOps {
  std::function<std::vector<Packet>(const Packet& in, const nlohmann::json& config,
                                    const std::vector<nlohmann::json>& shares)>
      split;
  std::function<Packet(std::vector<Packet> parts, const nlohmann::json& config,
                       const std::vector<nlohmann::json>& shares)>
      stitch;
};
TANDEM_API Registry<GroupOps>& group_ops_registry();

struct TANDEM_API StageKindRegistration {
  StageKindRegistration(const std::string& kind, StageFactory factory) {
    register_stage_kind(kind, std::move(factory));
  }
};

}  // namespace tandem::sched
