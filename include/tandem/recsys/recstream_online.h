// SPDX-License-Identifier: Apache-2.0
// RecStream online (the recsys spec §2.5 "Online use", B5 b): a serving policy that changes its
// stream configuration (recstream.h: scheduler x K) while it serves, without losing or repeating a
// query.
//
// It holds one inner policy per configuration it has used (made on first use by make_policy of
// StreamConfig::apply(options.base), then kept and reused) and routes each new query to the
// current configuration's policy. Over a sliding window of options.window_s it keeps the load
// features z of recstream.h: queries in flight at each arrival (the clients of a closed loop),
// the arrival rate (only with options.open_loop), and the mean and p95 query rows. Every
// options.period_s (checked at each submit, on the executor's clock) it decides:
//   weights   when a weight file fits the executor (same executor kind, and on a simulated device
//             the same device class): if z moved more than options.z_threshold (largest change of
//             one feature) since the last prediction, recstream_predict on the window's z; switch
//             to the argmin when the predicted gain p99(current) / p99(best) - 1 >
//             options.min_gain;
//   hill      otherwise (no file, or one for another executor): hill climbing over K on the
//             measured p99 of successive windows, the current scheduler kept: probe K x 2 while
//             p99 drops by more than min_gain, then K / 2 if the first step up did not help,
//             then settle on the best probed K; a z move beyond the threshold starts a new climb.
// A switch is a quiescent point between two submits: queries submitted after it go to the new
// configuration, the old one's in-flight queries finish there (counted through
// RequestMeta::on_done, which every policy calls once per query). While the previous old
// configuration still has queries in flight, no further switch happens: a forced switch waits and
// is applied the moment the drain ends (the latest request wins), and no decision is made. Each
// query is answered exactly once, with an id in this policy's submit order.
//
//   RecStreamOnlineOptions o{.weights = "configs/recsys/recstream/sim-h100.json"};
//   auto online = make_recstream_online(model, executor, o);
//   run_sim_load(*online, executor, pool, {.clients = 32, .duration_s = 2});
//   online->stats()["switches"];   // [{"t_s", "from", "to", "reason", "predicted_gain", ...}]
//
// Thread-safety: submit, force_switch and stats from any thread (on SimExecutor from the thread
// that drives it, as for every policy there).
#pragma once

#include <memory>
#include <string>

#include "tandem/export.h"
#include "tandem/recsys/recstream.h"
#include "tandem/recsys/serving.h"

namespace tandem::rec {

struct RecStreamOnlineOptions {
  PolicyOptions base{};                   // every configuration's knobs (policy, streams: set)
  std::string initial = "stream-pool:1";  // the configuration it starts with
  std::string weights;                    // a RecStream weight file; empty: hill climbing
  double window_s = 1;                    // sliding window of z and of the measured p99
  double period_s = 1;                    // between two decisions
  double min_gain = 0.05;                 // switch only for a larger (predicted or measured) gain
  double z_threshold = 0.25;              // largest change of one z feature that counts as a move
  int64_t min_window_queries = 16;        // answered queries a window needs for a decision
  bool open_loop = false;                 // z's rate: the window's arrival rate (else 0)
};

class TANDEM_API RecStreamOnlinePolicy : public ServingPolicy {
 public:
  using ServingPolicy::submit;
  // Switches to `config` ("recos:8") at the next quiescent point: at once, or when the previous
  // old configuration has drained. InvalidArgument for an unknown configuration name (nothing
  // changes then).
  virtual void force_switch(const std::string& config) = 0;
  // Reads another weight file and decides with it from now on (hill climbing when it does not
  // fit this executor). ParseError / IoError for a bad file: the policy keeps what it had.
  virtual void load_weights(const std::string& path) = 0;
  virtual std::string current_config() const = 0;
};

// InvalidArgument for a bad option (window_s, period_s <= 0, min_gain < 0, an unknown initial
// configuration); ParseError / IoError for a bad weight file.
TANDEM_API std::unique_ptr<RecStreamOnlinePolicy> make_recstream_online(
    const RecModel& model, Executor& executor, const RecStreamOnlineOptions& options);

}  // namespace tandem::rec
