// SPDX-License-Identifier: Apache-2.0
// The link probe and its tracker (tandem/sched/probe.h), and the "sched.probe" stage kind: it
// answers every packet with an empty one (config {"kind": "sched.probe"}), so a round trip times
// the packet's way there and an empty answer's way back.
#include "tandem/sched/probe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "tandem/core/error.h"
#include "tandem/sched/stage.h"

namespace tandem::sched {
namespace {

class ProbeStage : public Stage {
 public:
  std::string kind() const override { return "sched.probe"; }
  Packet process(Packet in) override {
    in.tensors.clear();
    return in;
  }
};

const StageKindRegistration kProbeRegistration("sched.probe", [](const nlohmann::json& c) {
  for (const auto& [k, v] : c.items())
    if (k != "kind") throw InvalidArgument("sched.probe: unknown config key \"" + k + "\"");
  return std::make_unique<ProbeStage>();
});

// The least wall time of `rounds` runs of one packet of `floats` f32 through `pipe`.
double least_round_trip(Pipeline& pipe, int64_t floats, int rounds, uint64_t& id) {
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < rounds; ++r) {
    Request req;
    req.id = id++;
    req.micros.resize(1);
    req.micros[0].tensors = {Tensor::zeros(Shape{floats}, DType::kF32)};
    const auto t0 = std::chrono::steady_clock::now();
    pipe.run({std::move(req)});
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

LinkEstimate probe_link(const std::string& device, const ClusterSpec& cluster,
                        const std::map<std::string, std::string>& workers, PipelineOptions options,
                        size_t bytes, int rounds) {
  if (!workers.count(device) || workers.at(device) == "local")
    throw InvalidArgument(cat("probe_link: device '", device, "' has no worker to probe"));
  if (bytes < 4096 || rounds < 1)
    throw InvalidArgument(
        cat("probe_link: bytes must be >= 4096 and rounds >= 1 (got ", bytes, ", ", rounds, ")"));
  PipelinePlan plan;
  plan.system = "probe";
  plan.stages.emplace_back(device, nlohmann::json{{"kind", "sched.probe"}});
  options.replan = {};
  options.replan_plan = {};
  options.max_replans = 0;
  Pipeline pipe(plan, cluster, workers, options);
  uint64_t id = 0;
  least_round_trip(pipe, 1, 1, id);  // connects and builds the stage
  LinkEstimate e;
  e.bytes = bytes;
  e.rtt_s = least_round_trip(pipe, 1, rounds, id);
  e.bulk_s = least_round_trip(pipe, static_cast<int64_t>(bytes / 4), rounds, id);
  // A bulk time within the RTT's noise means a link faster than the probe can tell: report what
  // the bulk time alone allows, never a negative or infinite bandwidth.
  e.bandwidth_bytes_per_s =
      static_cast<double>(bytes) / std::max(e.bulk_s - e.rtt_s, 0.05 * e.bulk_s);
  return e;
}

LinkTracker::LinkTracker(double alpha, double threshold) : alpha_(alpha), threshold_(threshold) {
  if (!(alpha > 0 && alpha <= 1))
    throw InvalidArgument(cat("LinkTracker: alpha must be in (0, 1], got ", alpha));
  if (!(threshold > 0)) throw InvalidArgument(cat("LinkTracker: threshold must be > 0"));
}

void LinkTracker::add(double b) {
  if (!(b > 0) || !std::isfinite(b))
    throw InvalidArgument(cat("LinkTracker: a bandwidth sample must be positive, got ", b));
  ema_ = samples_ == 0 ? b : alpha_ * b + (1 - alpha_) * ema_;
  ++samples_;
}

bool LinkTracker::moved_from(double planned) const {
  if (samples_ == 0 || !(planned > 0)) return false;
  return std::abs(ema_ - planned) > threshold_ * planned;
}

}  // namespace tandem::sched
