// SPDX-License-Identifier: Apache-2.0
// Pipeline: runs a PipelinePlan over stages on emulated local devices and remote workers, with
// bounded queues, emulated links, per-stage timelines, heartbeats and re-planning on failure.
//
// Shape of a run: one thread per stage and one per emulated link, chained by BoundedQueues
// (capacity options.queue_capacity: backpressure). A stage on a device mapped to "local" runs in an
// in-process Worker reached over inproc:// (the same protocol as remote ones; direct_local skips
// ZeroMQ and calls the Stage in the stage thread); a device mapped to "tcp://host:port" runs in
// `tandem worker` there. Both emulate the ClusterSpec device (thread budget, speed factor). A link
// thread sits between two stages on different devices that the ClusterSpec links: it delays each
// packet by latency (+ jitter) + bytes / bandwidth and re-sends dropped copies after a timeout.
// Topology (options.topology): worker to worker (the default), stage i's worker sends its output
// straight to stage i+1's worker (kForward over the successor's own CURVE-secured socket) and
// answers the coordinator with the packet's header only; the last stage's output comes back to the
// coordinator. The coordinator still sends every stage its packet header, so sequence numbers,
// heartbeats, re-sends, resets and re-plans work as in hub and spoke, where every activation
// travels coordinator -> worker -> coordinator (two hops per stage). A hop stays hub and spoke
// when either stage is a group, runs without ZeroMQ (direct_local), the two workers use different
// transports (inproc vs tcp/ipc), or an emulated link sits between them.
//
// A group stage (plan.h: several devices, each with its share) runs as one node: the kind's
// registered split (stage.h GroupOps) cuts the packet into the members' parts, each member runs its
// part on its own device (worker) concurrently, its part crossing the link from the stage's first
// device (the master) and back over one shared medium per group (transfers one at a time, as on
// PICO's WLAN; with options.shared_medium one medium for every transfer of the run), and the kind's
// stitch joins the outputs. The stage's compute time is the slowest member's. A device computes one
// task at a time, whichever stages it serves (the others wait for it).
//
// Failure: a stage that hears nothing from its worker for heartbeat_timeout_s (killed, stopped,
// host gone) raises WorkerLost; the run stops every thread, asks options.replan_plan for a new plan
// over the devices still alive when it is set (a planner re-splitting the work), else
// options.replan for a device per stage (default_replan: each stage of a failed device moves to the
// surviving device that hosts the fewest stages), re-configures every stage (fresh state: KV
// caches are dropped), and re-runs every request that had not completed. A request's outputs are
// delivered (on_result, and RunReport::outputs) exactly once, when all its micro-batches came out
// of the last stage in one generation. Detection time: heartbeat_timeout_s + heartbeat_interval_s
// after the worker's last answer (defaults 1.0 + 0.1 s).
//
//   sched::Pipeline pipe(plan, cluster, {{"dev0", "local"}, {"dev1", "tcp://10.0.0.2:5555"}}, opt);
//   sched::RunReport r = pipe.run(requests);
//   r.to_json();   // per-stage utilisation, bubbles, link counters, events
//
// Thread-safety: run() from one thread at a time.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tandem/core/cluster.h"
#include "tandem/export.h"
#include "tandem/sched/client.h"
#include "tandem/sched/emulation.h"
#include "tandem/sched/plan.h"
#include "tandem/sched/stage.h"

namespace tandem::sched {

struct Request {
  uint64_t id = 0;
  std::vector<Packet> micros;  // in order; micro / n_micro / request_id are set by run()
};

// Device slots, failed devices, surviving devices -> the device of each slot. A slot is a stage's
// device (one-device stages) or one member of a group stage, stage-major in plan order.
using ReplanFn = std::function<std::vector<std::string>(
    const std::vector<std::string>& stage_devices, const std::vector<std::string>& failed,
    const std::vector<std::string>& alive)>;
TANDEM_API std::vector<std::string> default_replan(const std::vector<std::string>& stage_devices,
                                                   const std::vector<std::string>& failed,
                                                   const std::vector<std::string>& alive);
// Current plan, failed devices, surviving devices -> the plan to continue with (a planner asked
// again over the survivors: it may re-split layers or regions and change the stages). Its stages
// must use surviving devices only, and its first stage must accept the requests' packets as they
// are (same slices / inputs).
using PlanReplanFn =
    std::function<PipelinePlan(const PipelinePlan& current, const std::vector<std::string>& failed,
                               const std::vector<std::string>& alive)>;

enum class Topology { kHubAndSpoke, kWorkerToWorker };

struct PipelineOptions {
  Topology topology = Topology::kWorkerToWorker;
  size_t queue_capacity = 2;
  bool direct_local = false;  // local stages: call the Stage directly (no ZeroMQ); such stages
                              // are built per run() (worker-hosted ones live until re-configured)
  bool emulate_devices = true;
  bool emulate_links = true;
  LinkFaults faults;
  ClientOptions client;
  std::optional<ClusterKey> key;  // for tcp:// workers
  ReplanFn replan;                // empty: default_replan
  PlanReplanFn replan_plan;       // set: used instead of `replan` (a new plan, not new devices)
  // After a request's last micro-batch passes a stage, call its reset(request_id) (frees KV
  // caches). false keeps the state, e.g. for decode steps that follow a pipelined prefill.
  bool reset_finished = true;
  // Emulated links: false, each link and each group's member transfers its own medium; true, one
  // medium for every transfer of the run (a single WiFi cell, as the edge planners assume).
  bool shared_medium = false;
  int max_replans = 4;
  double run_timeout_s = 600;  // the whole run; TransportError past it
};

struct Interval {
  uint64_t request_id = 0;
  int32_t micro = 0;
  double start_s = 0, end_s = 0;  // since the run's start, as seen by the coordinator
  double compute_s = 0;           // the device's (emulated) compute time; links: the delay
};

struct TANDEM_API Timeline {
  std::string name;    // "stage 0" or "link dev0->dev1"
  std::string device;  // the device at the end of the run
  std::string kind;    // "stage" | "link"
  std::vector<Interval> intervals;
  size_t queue_max_depth = 0, queue_blocked_pushes = 0;  // the queue feeding it
  double busy_s() const;
};

struct TANDEM_API RunReport {
  std::map<uint64_t, std::vector<Packet>> outputs;  // request id -> last stage outputs by micro
  std::vector<Timeline> timelines;                  // stages and links in pipeline order
  std::vector<LinkCounters> link_counters;          // one per link timeline, same order
  std::vector<std::string> final_devices;           // device of each stage at the end
  std::vector<std::string> events;                  // failures, re-plans
  double makespan_s = 0;
  int replans = 0;
  uint64_t requests_rerun = 0;
  int direct_hops = 0;  // stage-to-stage hops that went worker to worker (last generation)
  uint64_t coordinator_bytes = 0;  // frames the coordinator's sockets sent and received
  uint64_t forwarded_bytes = 0;    // frames the workers sent each other (kForward)
  // Stages' utilisation (compute / makespan), bubbles (makespan - compute), link counters, events;
  // no tensors.
  nlohmann::json to_json() const;
};

class TANDEM_API Pipeline {
 public:
  // workers: device -> "local" | endpoint. Devices the map does not name are "local". Devices
  // missing from `cluster` run unemulated and unlinked.
  Pipeline(PipelinePlan plan, ClusterSpec cluster, std::map<std::string, std::string> workers,
           PipelineOptions options = {});
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  RunReport run(std::vector<Request> requests,
                const std::function<void(uint64_t, const std::vector<Packet>&)>& on_result = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The reference: every request's micro-batches through fresh stages built from the plan, one after
// another on the calling thread (no threads, no transport, no emulation).
TANDEM_API std::map<uint64_t, std::vector<Packet>> run_sequential(const PipelinePlan& plan,
                                                                  std::vector<Request> requests);

}  // namespace tandem::sched
