// SPDX-License-Identifier: Apache-2.0
// Concurrent serving of recommendation queries: the serving policies of the recsys spec over an
// Executor (the baselines of §3, and the op-level scheduler's RecOS / RACE / B4), and the
// closed-/open-loop load generator that measures them.
//
// Policies (submit() is thread-safe and returns a future of the query's scores and timings):
//   fcfs           B1: one stream, queries FIFO, each query's ops in topological order; no
//                  interleaving across queries (stock TF-Serving / one Triton instance).
//   stream-pool    B2 (NVIDIA Multi-Stream TF): N streams; a whole query goes to the stream with
//                  the least outstanding predicted work (roofline time of its graph on the
//                  executor's device, ExecutorInfo::device).
//   instances      B3 (Triton instance_group count N): N instances, each one stream running one
//                  request at a time; a request takes a free instance or waits FIFO for one.
//   dynamic-batch  B3 + Triton's dynamic batcher: waiting requests are merged row-wise while the
//                  batch holds <= max_batch_rows rows and the oldest has waited less than
//                  max_queue_delay_us; each request gets its own rows of the batch's scores.
//   recos, race, recos+race, b4
//                  the op-level scheduler (src/recsys/op_scheduler.cpp; docs/recsys.md): ops of
//                  all in-flight queries from one ready heap onto K streams (RecOS §2.3), E/D
//                  lanes with a lookup budget, phase fusion and a cross-query pipeline (RACE
//                  §2.6), or TorchRec-style lookup-ahead (B4); requests carry RequestMeta
//                  (business priority, SLA).
// Every response carries queue time (arrival to the start of its first op), service time and
// latency. run_load() drives a policy with N closed-loop clients (each submits, waits, repeats)
// or Poisson open-loop arrivals for a duration and reports p50/p95/p99 latency, throughput and
// queue times (run_sim_load in sim_executor.h does the same in simulated time).
//
//   tandem::rec::CpuExecutor ex(tandem::rec::measured_profile(tandem::Device::cpu()));
//   auto policy = tandem::rec::make_policy(model, ex, {.policy = "stream-pool", .streams = 4});
//   auto stats = tandem::rec::run_load(*policy, pool, {.clients = 16, .duration_s = 5});
//
// Thread-safety: submit() from any thread; destroy a policy only when no submit is in flight (the
// destructor waits for the queries it accepted).
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/core/registry.h"
#include "tandem/export.h"
#include "tandem/recsys/admission.h"
#include "tandem/recsys/executor.h"
#include "tandem/recsys/model.h"

namespace tandem::rec {

struct Response {
  int64_t id = 0;  // the submit order
  std::vector<float> scores;
  double queue_s = 0, service_s = 0, latency_s = 0;
  int64_t batch_rows = 0;  // rows of the launch this query ran in
  // The query rows the scores belong to, in score order (a pipeline's kept candidates); empty: all
  // rows in order.
  std::vector<int64_t> rows;
};

// Called once when a request is answered (`response` set) or failed (`error` set), on the thread
// that completes it, before its future becomes ready. It may submit to the same policy (the
// admission layer dispatches its next request from here) but must not wait on a future.
using Completion = std::function<void(const Response* response, std::exception_ptr error)>;

// Per request (Triton-compatible semantics, the recsys spec §2.2): business priority, 1 highest;
// the SLA sets the deadline arrival + sla_ms (0: PolicyOptions::sla_ms); the queue timeout of the
// admission layer (admission.h; 0: AdmissionOptions::default_timeout_us).
struct RequestMeta {
  int64_t priority = 1;
  double sla_ms = 0;
  double timeout_us = 0;
  Completion on_done = nullptr;  // optional
};

struct PolicyOptions {
  std::string policy = "fcfs";       // a name in serving_policies(): fcfs, stream-pool, ...
  int streams = 4;                   // N of stream-pool / instances / dynamic-batch; K of recos
  int64_t max_batch_rows = 1024;     // dynamic-batch: rows per merged launch
  double max_queue_delay_us = 1000;  // dynamic-batch: longest wait for more requests
  // The op-level scheduler (recos, race, recos+race, b4; op_scheduler.h).
  double sla_ms = 60;  // default deadline (MLPerf DLRMv2 p99 target)
  // alpha, beta and H chosen by the sweep in docs/results/recsys-recos-*.md (SimGPU H100, RM2 and
  // BST at 32 clients; bench/recsys/sweep_recos.sh).
  double alpha = 4.0;     // RecOS contention weight
  double beta = 16.0;     // RecOS cross-stream (event) weight
  double horizon_us = 0;  // issue horizon H; 0 = 0.4 x the median op duration
  double event_us = 2;    // t_event: the cost of one cross-stream wait
  // Ready-op order (src/recsys/ready_queue.h): ops of queries whose slack is below this many ms go
  // least slack first (the spec's rule); the others earliest query deadline first. +infinity: least
  // slack for every op (processor sharing among in-flight queries: a longer tail, measured).
  double urgent_slack_ms = 0;
  // recos, recos+race: horizontal fusion, at most this many queries' instances of one graph node
  // (of one shape bucket: rows rounded up to a power of two) in one launch; 1 = off; 0 = by
  // executor: 4 where a group is one kernel (ExecutorInfo::grouped_launch, SimGPU), 1 on the CPU
  // executor (its group runs the members back to back, and fused it lost to unfused there).
  // Measured: docs/results/recsys-recos-edf-*.md, recsys-recos-mlperf-sizes-*.md.
  int fuse_across = 0;
  double rho = 0.5;        // RACE lookup budget: share of the parallel units for lookups
  int lookup_streams = 1;  // RACE lane E (K_E); lane D gets streams - lookup_streams (>= 1)
  // recos, race, recos+race, b4 with a model on the CPU: intermediate outputs in blocks of the
  // executor's stream-ordered pool, freed behind their consumers (the recsys spec §2.4); false:
  // each node allocates its output, held until the query completes.
  bool tensor_pool = true;
  // Triton-compatible admission in front of the policy (admission.h); off unless enabled().
  AdmissionOptions admission{};
};

class TANDEM_API ServingPolicy {
 public:
  virtual ~ServingPolicy() = default;
  virtual std::string name() const = 0;
  // Validates the query (InvalidArgument at once) and queues it.
  virtual std::future<Response> submit(std::shared_ptr<const QueryInputs> query,
                                       const RequestMeta& meta) = 0;
  std::future<Response> submit(std::shared_ptr<const QueryInputs> query) {
    return submit(std::move(query), RequestMeta{});
  }
  // Scheduler counters (the op-level policies: issued ops, scheduler µs per issued op, ...);
  // empty for the baselines.
  virtual nlohmann::json stats() const { return nlohmann::json::object(); }
};

// Makes the policy `options.policy` names over `executor` (make_policy has checked streams >= 1;
// the factory checks its own fields and throws InvalidArgument).
using PolicyFactory = std::function<std::unique_ptr<ServingPolicy>(
    const RecModel& model, Executor& executor, const PolicyOptions& options)>;
// name -> factory. The baselines (fcfs, stream-pool, instances, dynamic-batch) register in
// policies.cpp; a new policy registers the same way, in its own file:
//   const tandem::Registration kReg(tandem::rec::serving_policies(), "mine", make_mine);
TANDEM_API Registry<PolicyFactory>& serving_policies();
// serving_policies().get(options.policy)(...), behind the admission layer when
// options.admission.enabled(): InvalidArgument for an unknown policy name (listing the registered
// ones), streams < 1 or bad admission options.
TANDEM_API std::unique_ptr<ServingPolicy> make_policy(const RecModel& model, Executor& executor,
                                                      const PolicyOptions& options);
TANDEM_API std::vector<std::string> policy_names();  // the registered names, sorted
// `inner` (serving `model` over `executor`) behind the admission layer of admission.h, handing it
// at most options.max_in_flight requests at once (0: `streams`). make_policy calls it when
// options.admission.enabled(); InvalidArgument for bad options.
TANDEM_API std::unique_ptr<ServingPolicy> with_admission(std::unique_ptr<ServingPolicy> inner,
                                                         const RecModel& model, Executor& executor,
                                                         const AdmissionOptions& options,
                                                         int streams);

inline constexpr double kMaxOpenLoopRateQps = 1e6;

struct LoadOptions {
  int clients = 1;        // closed loop: concurrent clients (1..64+)
  double duration_s = 5;  // measured time
  double warmup_s = 0.5;  // responses that arrive earlier are not counted
  double rate_qps = 0;    // > 0: open loop with Poisson arrivals at this rate (clients ignored),
                          // at most kMaxOpenLoopRateQps
  // Open loop: queries submitted and not yet answered, at most. An arrival that finds this many
  // outstanding is dropped and counted (back-pressure), so an overloaded policy cannot queue
  // without bound.
  int64_t max_outstanding = 1024;
  // Closed loop: a client whose query the admission layer rejected waits this long before its
  // next submit (a rejection is immediate, so without a pause a client would resubmit at once).
  double reject_backoff_s = 1e-3;
  // Business priorities of the queries: the query at pool[i] has priority 1 + i mod priorities
  // (1 = all the same; with the admission layer's priority_levels, higher ones leave its queue
  // first).
  int64_t priorities = 1;
  uint64_t seed = 1;
  // Called for every response with the index of its query in the pool (any thread).
  std::function<void(size_t pool_index, const Response&)> on_response;
};

inline constexpr double kLateArrivalS = 1e-3;

struct Percentiles {
  double mean = 0, p50 = 0, p95 = 0, p99 = 0, max = 0;
};
TANDEM_API Percentiles percentiles_ms(std::vector<double> seconds);

struct TANDEM_API LoadStats {
  std::string policy;
  int clients = 0;
  double rate_qps = 0;
  int64_t completed = 0, errors = 0;
  // Open loop: arrivals dropped because max_outstanding queries were outstanding, and arrivals
  // submitted more than kLateArrivalS after their scheduled time (the generator fell behind).
  int64_t dropped = 0, late = 0;
  // Requests the admission layer (admission.h) answered with Rejected: queue full, or timed out
  // in the queue (REJECT); not in completed or errors.
  int64_t rejected = 0, timed_out = 0;
  double measured_s = 0, throughput_qps = 0, rows_per_s = 0;
  Percentiles latency_ms, queue_ms, service_ms;
  double mean_batch_rows = 0;
  nlohmann::json to_json() const;
};

// Runs the load over `pool` (queries reused round-robin) and waits for every submitted query.
TANDEM_API LoadStats run_load(ServingPolicy& policy,
                              const std::vector<std::shared_ptr<const QueryInputs>>& pool,
                              const LoadOptions& options);

}  // namespace tandem::rec
