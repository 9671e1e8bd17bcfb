// SPDX-License-Identifier: Apache-2.0
// Measuring the link to a worker, and smoothing what is measured (spec cnn.md §3.4 step 5: DECC,
// Neurosurgeon and DADS re-plan when the uplink's bandwidth moves).
//
// What: probe_link() runs a one-stage plan of kind "sched.probe" (a stage that answers every packet
// with an empty one) on the device's worker, through the same runtime and transport the frames
// use: round trips of a 4-byte packet (the RTT: the least of `rounds`) and of a `bytes` packet
// (the bulk time, the least of `rounds`); bandwidth = bytes / (bulk - RTT), what the link model
// (t = L + bytes/B) needs, with L = RTT / 2. No external tool (iperf) is involved. LinkTracker
// keeps an exponential moving average of the estimates and says when it has moved more than a
// threshold (20% by default) from the bandwidth the current plan was made for.
//
//   sched::LinkEstimate e = sched::probe_link("cloud", cluster, workers, options);
//   sched::LinkTracker t;                        // alpha 0.5, threshold 0.2
//   t.add(e.bandwidth_bytes_per_s);
//   if (t.moved_from(planned_bandwidth)) { /* plan again with t.bandwidth() */ }
//
// Thread-safety: probe_link may run while no other Pipeline uses the worker; LinkTracker is a
// plain value.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "tandem/export.h"
#include "tandem/sched/pipeline.h"

namespace tandem::sched {

struct LinkEstimate {
  double bandwidth_bytes_per_s = 0;
  double rtt_s = 0;   // least round trip of a 4-byte packet
  double bulk_s = 0;  // least round trip of the bulk packet
  size_t bytes = 0;   // the bulk packet's payload
};

// Probes the link to `device` (named in `workers`; InvalidArgument otherwise). `options` as for
// the frames' Pipeline (key, timeouts); link emulation stays as given, so an emulated link is
// measured as emulated. Throws TransportError/WorkerLost as a run would; InvalidArgument for
// bytes < 4096 or rounds < 1.
TANDEM_API LinkEstimate probe_link(const std::string& device, const ClusterSpec& cluster,
                                   const std::map<std::string, std::string>& workers,
                                   PipelineOptions options, size_t bytes = 1 << 20, int rounds = 2);

class TANDEM_API LinkTracker {
 public:
  // alpha: the weight of a new sample (0, 1]; threshold: the relative move that counts (> 0).
  // InvalidArgument outside those ranges.
  explicit LinkTracker(double alpha = 0.5, double threshold = 0.2);
  void add(double bandwidth_bytes_per_s);  // InvalidArgument unless positive and finite
  bool empty() const { return samples_ == 0; }
  // Forgets the average: the next sample becomes the estimate (a change the EMA would follow too
  // slowly, e.g. when measured delays no longer match the plan's).
  void restart() { samples_ = 0; }
  double bandwidth() const { return ema_; }  // 0 before the first sample
  // True when the smoothed bandwidth differs from `planned` by more than the threshold.
  bool moved_from(double planned_bandwidth_bytes_per_s) const;

 private:
  double alpha_, threshold_, ema_ = 0;
  int samples_ = 0;
};

}  // namespace tandem::sched
