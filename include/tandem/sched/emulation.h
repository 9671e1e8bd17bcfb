// SPDX-License-Identifier: Apache-2.0
// Emulated heterogeneity on one machine: a device that runs real kernels on a thread budget and
// stretches its wall time to a speed factor, and a link that delays bytes by latency + jitter +
// bytes / bandwidth and drops messages (which the runtime then re-sends after a timeout).
//
// Why: the kernel here has no netem and the machine has one kind of CPU, yet the planners target
// mismatched devices over slow links. An EmulatedDevice with speed_factor 0.5 runs a stage, then
// sleeps until twice the stage's work has passed: wall = max(elapsed, busy / speed_factor), where
// busy is the thread's CPU time with threads = 1 (so time another process held the core is not
// stretched too: several slow devices sharing the cores would otherwise multiply each other's
// contention by 1 / speed_factor) and the elapsed time otherwise; an EmulatedLink built from a
// ClusterSpec LinkProfile sleeps latency_s + U(-jitter, +jitter) + bytes / bandwidth_bytes_per_s
// per message. Drops are drawn from a seeded generator, so a run's fault pattern repeats.
//
//   EmulatedDevice dev{.threads = 2, .speed_factor = 0.5};
//   double compute_s = 0;
//   Packet out = dev.run(stage, std::move(in), &compute_s);   // ~2x the real wall time
//   EmulatedLink link(cluster.link("p100-0", "rtx-0"), {.jitter_s = 0.001, .drop = 0.01});
//   auto cost = link.transmit(bytes);   // sleeps; cost.attempts > 1 when a copy was dropped
//
// Thread-safety: EmulatedDevice is a value; an EmulatedLink is used by one thread (its counters
// are atomics and may be read from others).
#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "tandem/core/cluster.h"
#include "tandem/export.h"
#include "tandem/sched/stage.h"

namespace tandem::sched {

struct TANDEM_API EmulatedDevice {
  int threads = 0;            // CPU threads for the stage's kernels (0: leave the process setting)
  double speed_factor = 1.0;  // (0, 1]: 0.5 = half as fast as this machine; > 1 cannot speed up
  // Seconds this device takes for what ran here in `elapsed_s`: core on_device_s (cost_model.h),
  // the one place speed_factor applies.
  double emulated_s(double elapsed_s) const;
  // Runs stage.process(in); then sleeps until emulated_s(busy) has passed, busy as above (a
  // device cannot be sped up by sleeping: factors > 1 run at this machine's speed). `compute_s`
  // (optional) receives the wall time.
  Packet run(Stage& stage, Packet in, double* compute_s = nullptr) const;
  // Runs stage.process(in) without sleeping; `compute_s` receives emulated_s(busy)
  // (replays, which schedule measured times in the simulator instead of waiting them out).
  Packet measure(Stage& stage, Packet in, double* compute_s) const;
  nlohmann::json to_json() const;
  static EmulatedDevice from_profile(const DeviceProfile& d);
  static EmulatedDevice from_json(const nlohmann::json& j);  // InvalidArgument on bad values

 private:
  Packet process_timed(Stage& stage, Packet in, double* elapsed_s, double* busy_s) const;
};

struct LinkFaults {
  double jitter_s = 0;              // uniform in [-jitter_s, +jitter_s], clamped so delay >= 0
  double drop = 0;                  // probability that one copy of a message is lost, [0, 1)
  double retransmit_timeout_s = 0;  // wait before re-sending a lost copy (0: 2 x latency + 1 ms)
  uint64_t seed = 1;
};

struct LinkCounters {
  uint64_t messages = 0, bytes = 0, drops = 0;
  double delay_s = 0;  // total emulated time spent (including retransmit waits)
};

class TANDEM_API EmulatedLink {
 public:
  EmulatedLink(const LinkProfile& profile, const LinkFaults& faults);
  // The delay one message of `bytes` takes (draws jitter and drops; does not sleep).
  struct Cost {
    double delay_s = 0;
    int attempts = 1;
  };
  Cost plan_transmit(uint64_t bytes);
  // Sleeps for plan_transmit(bytes).delay_s and updates the counters.
  Cost transmit(uint64_t bytes);
  LinkCounters counters() const;
  const LinkProfile& profile() const { return profile_; }

 private:
  LinkProfile profile_;
  LinkFaults faults_;
  std::mt19937_64 rng_;
  std::atomic<uint64_t> messages_{0}, bytes_{0}, drops_{0};
  std::atomic<uint64_t> delay_ns_{0};
};

}  // namespace tandem::sched
