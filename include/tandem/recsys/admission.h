// SPDX-License-Identifier: Apache-2.0
// Triton-compatible admission per model (the recsys spec §2.7): one queue in front of any
// ServingPolicy, so every policy gets the same priority levels, back-pressure and timeouts.
//
// The layer hands the wrapped policy at most `max_in_flight` requests at once; the others wait in
// its queue and leave it by priority level (1 first), FIFO within a level. Per level, requests
// whose queue time passed their timeout are either answered at once with a timeout error, never
// run (REJECT), or kept and run after that level's other requests (DELAY). A request that finds
// max_queue_size requests waiting is rejected at once. Timeouts are checked whenever the queue
// changes (a submit or a completion), as Triton's scheduler does, and only while a request waits:
// one handed to the policy always runs. preserve_ordering answers requests in submit order.
// Rejections are a Rejected error in the request's future, saying which model, which limit and
// why; run_load / run_sim_load count them apart from answered requests (LoadStats::rejected,
// timed_out).
//
//   tandem::rec::PolicyOptions po{.policy = "recos"};
//   po.admission = {.priority_levels = 2, .max_queue_size = 64, .default_timeout_us = 20000};
//   auto policy = tandem::rec::make_policy(model, executor, po);  // wrapped: admission.enabled()
//   auto fut = policy->submit(query, {.priority = 2});
//   try { fut.get(); } catch (const tandem::rec::Rejected& e) { e.reason(); }
#pragma once

#include <cstdint>
#include <string>

#include "tandem/core/error.h"
#include "tandem/export.h"

namespace tandem::rec {

enum class TimeoutAction { kReject, kDelay };
// "reject" or "delay" (InvalidArgument naming the accepted values otherwise).
TANDEM_API TimeoutAction parse_timeout_action(const std::string& s);
TANDEM_API const char* to_string(TimeoutAction a);

struct TANDEM_API AdmissionOptions {
  // 0: priorities off (one level); N: requests carry priority 1 (highest) .. N.
  int64_t priority_levels = 0;
  int64_t max_queue_size = 0;     // waiting requests at most; 0: unbounded
  double default_timeout_us = 0;  // queue timeout of a request whose meta has none; 0: none
  TimeoutAction timeout_action = TimeoutAction::kReject;
  bool preserve_ordering = false;  // answer in submit order
  int max_in_flight = 0;           // requests handed to the policy at once; 0: its streams
  // True when any field asks for the layer (make_policy wraps the policy only then).
  bool enabled() const {
    return priority_levels > 0 || max_queue_size > 0 || default_timeout_us > 0 ||
           preserve_ordering || max_in_flight > 0;
  }
  // InvalidArgument naming the field for a negative or non-finite value.
  void validate() const;
};

// The error of a request the admission layer did not run.
class TANDEM_API Rejected : public Error {
 public:
  enum class Reason { kQueueFull, kTimeout };
  Rejected(Reason reason, const std::string& what) : Error(what), reason_(reason) {}
  Reason reason() const { return reason_; }

 private:
  Reason reason_;
};

}  // namespace tandem::rec
