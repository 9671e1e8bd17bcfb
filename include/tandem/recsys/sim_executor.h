// SPDX-License-Identifier: Apache-2.0
// SimExecutor: a deterministic discrete-event GPU executor for recsys serving (the recsys spec,
// §2.1), so that the schedulers of serving.h run, and are tested, in the GPU setting on a machine
// without a GPU.
//
// It implements the same Executor interface as CpuExecutor. Streams are FIFO queues in a simulator
// with its own clock; an op's node is computed for real on the CPU (so queries get their true
// scores) when the op starts in simulated time (unless SimOptions::compute is false), while its
// simulated duration comes from a device description:
//   units(v)   = max(ceil(output elements / elems_per_unit), ceil(bytes moved / bytes_per_unit)),
//                capped by LaunchLimits::max_units (thread blocks of the kernel)
//   share(v)   = min(1, units / sms)       the part of the device the op can use
//   c(v)       = launch_overhead + max(flops / peak_flops, bytes / bandwidth) / share(v),
//                times (1 + jitter * u), u uniform in [-1, 1] from the seeded generator
//   class(v)   = TINY when c(v) < tiny_factor * launch_overhead, else MEM when FLOP/byte is below
//                peak_flops / bandwidth, else COMP
// A started op first spends its launch overhead (a fixed latency that overlaps freely with other
// ops), then its work progresses at rate 1 / slowdown, recomputed at every start, end of an
// overhead and end; for sharing an op is MEM or COMP by FLOP/byte (a TINY op too):
//   MEM:  max(1, sum of share over MEM ops doing work)    (they share the bandwidth)
//   COMP: max(1, sum of share over COMP ops doing work)   (they share the SMs)
//   times (1 + mem_comp_penalty) while an op of the other class does work.
// With SimOptions::embedding.host_tables the tables live in host memory behind a GPU cache: a
// lookup op also pays the host link for the rows the cache misses (SimEmbeddingOptions below).
// Nothing happens in simulated time until the simulation is driven: run_until_idle(), step(),
// synchronize(), or an event's synchronize(). Host callbacks run inside the simulation, on the
// driving thread, at the simulated time their stream reaches them, and may issue more work.
//
//   tandem::rec::SimExecutor ex(tandem::rec::sim_device("h100"), {.seed = 1});
//   auto policy = tandem::rec::make_policy(model, ex, {.policy = "recos", .streams = 4});
//   auto stats = tandem::rec::run_sim_load(*policy, ex, pool, {.clients = 16, .duration_s = 0.2});
//   for (const auto& s : ex.schedule()) ...;   // every op: stream, start, end (µs)
//
// Same device, seed and sequence of calls -> the same schedule, bit for bit. Departures from a
// GPU: copies are elided (one address space, as on the CPU executor); stream priorities order which
// runnable stream head is served first at the same instant, they do not preempt. alloc_async /
// free_async / free_after are a StreamPool (core/stream_pool.h) whose fences are simulated
// events: free_async(p, s) lets later work on s reuse the block at once and other streams once s
// reaches the free in simulated time. Thread-safety: every method takes one recursive lock, and
// host callbacks run under it; the simulation is deterministic only when one thread drives it.
// Drive it and submit to its policies from that one thread (run_sim_load does): a policy that
// calls the executor under its own lock and takes that lock in a callback (the op-level scheduler)
// would otherwise lock in both orders from two threads.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "tandem/export.h"
#include "tandem/recsys/executor.h"
#include "tandem/recsys/serving.h"

namespace tandem::rec {

// A simulated device. `profile` gives peak_flops and mem_bandwidth_bytes_per_s.
struct TANDEM_API SimDevice {
  std::string name;
  DeviceProfile profile;
  int sms = 1;                    // parallel units (GPU: SMs; CPU: worker threads)
  double elems_per_unit = 4096;   // output elements one unit (thread block) produces
  double bytes_per_unit = 16384;  // bytes one unit moves
  double launch_overhead_us = 4;  // per op, and the TINY base cost
  double tiny_factor = 1.5;       // TINY when c < tiny_factor * launch_overhead
  double mem_comp_penalty = 0.1;  // slowdown while MEM and COMP ops run together
  // Effective host-to-device bandwidth for embedding rows gathered from host memory (the PCIe
  // link: 25 GB/s is about what a Gen4 x16 link sustains; an assumption, not a measurement). Used
  // only with SimEmbeddingOptions::host_tables.
  double host_link_bytes_per_s = 25e9;
  nlohmann::json to_json() const;
  // InvalidArgument naming the field for a missing or non-positive number (host_link_bytes_per_s
  // may be missing: 25e9).
  static SimDevice from_json(const nlohmann::json& j, const std::string& where = "sim device");
};

// The built-in device descriptions (data compiled into the library): "h100", "h200", "a100".
TANDEM_API std::vector<std::string> sim_device_names();
// One of them (InvalidArgument listing the names for another).
TANDEM_API SimDevice sim_device(const std::string& name);
// A CPU described as a device: sms = its threads, units of the same size, launch overhead of a
// CPU stream item (the profile measured by measured_profile(), or a test profile).
TANDEM_API SimDevice sim_cpu_device(const DeviceProfile& cpu, double launch_overhead_us = 3);
// A device as --device names it: "sim:cpu" is this host's CPU (sim_cpu_device of its measured
// profile), "sim:NAME" a built-in description; InvalidArgument for anything else.
TANDEM_API SimDevice sim_device_from_flag(const std::string& device);

// The embedding store as the simulated device holds it (the recsys spec §2.8, ablation B7).
// Default: every table resident in device memory, lookups priced at HBM bandwidth. host_tables:
// the tables live in host memory and a lookup op's rows (its query's real keys, deduplicated per
// table: RecModel::lookup_rows) go through a GPU cache first (EmbeddingCache, one per table,
// cache_bytes split over the tables in proportion to their rows x EmbeddingCache::row_bytes; a
// table whose share is below one set gets none). Hits stay priced at HBM bandwidth; the unique
// missing rows cost a launch overhead plus (dim * 4 + 8) bytes each over the host link (ops
// bound by it share the link), and are then inserted: synchronously (a replace of launch overhead
// + row bytes at HBM bandwidth, added to the op, rows visible at once) while the cache's window
// hit rate < tau, else asynchronously (a transfer on the executor's copy stream; rows visible
// when it ends). Prefetch: prefetch() of an admitted query (with_gpu_prefetch calls it) sends
// its missing rows the same way, early.
struct SimEmbeddingOptions {
  bool host_tables = false;
  int64_t cache_bytes = 0;  // GPU cache budget per model; 0 = none (every row from the host)
  double tau = 0.9;         // EmbeddingCacheOptions::tau (1: synchronous insertion only)
  int set_associativity = 2;
  int warp_size = 32;
};

struct SimOptions {
  uint64_t seed = 1;
  double jitter = 0.05;  // relative spread of op durations, in [0, 0.5]
  // false: timing-only. An op's node is not computed; its output is a zero tensor of the node's
  // shape, and only simulated time advances. Schedule, events, pools and callbacks are unchanged
  // (an op's cost depends on its query's rows, never on values), so the schedule is the same bit
  // for bit, while scores are meaningless (all the output node's zeros). For sweeps, tuners and
  // latency-bounded throughput searches, where only simulated latencies count and computing
  // every op for real on the CPU is what makes them slow.
  bool compute = true;
  SimEmbeddingOptions embedding;
};

// One op as it ran in simulated time.
struct SimSpan {
  int64_t query = 0;
  int node = -1;
  int stream = -1;
  CostClass cls = CostClass::kTiny;
  int units = 0;
  int group = 1;  // ops in its launch (launch_group): they share start, end and units
  double start_us = 0, end_us = 0;
  bool operator==(const SimSpan&) const = default;
};

class TANDEM_API SimExecutor final : public Executor {
 public:
  SimExecutor(SimDevice device, SimOptions options = {});
  // A second device on `clock`'s simulated clock: one time line, one lock, one set of timers, so
  // driving either executor (step, run_until, synchronize, an event's synchronize) runs the ops
  // of both, and their now() agree (a CPU and an accelerator in one simulation, DeepRecSched's
  // offload). Each keeps its own device, streams, events, pool and schedule; `clock` must outlive
  // this executor.
  SimExecutor(SimDevice device, SimOptions options, SimExecutor& clock);
  ~SimExecutor() override;
  int create_stream(int priority = 0) override;
  int num_streams() const override;
  std::shared_ptr<Event> create_event() override;
  void launch(int stream, const OpInstance& op, LaunchLimits limits = {}) override;
  // One launch for the group: the members' FLOPs, bytes and outputs summed, one launch overhead;
  // schedule() lists each member with the group's start and end.
  void launch_group(int stream, const std::vector<OpInstance>& ops,
                    LaunchLimits limits = {}) override;
  void host(int stream, std::function<void()> fn) override;
  void record(Event& event, int stream) override;
  void wait(int stream, Event& event) override;
  bool done(Event& event) override;
  void* alloc_async(size_t bytes, int stream) override;
  void free_async(void* ptr, size_t bytes, int stream) override;
  void free_after(void* ptr, size_t bytes, int producer_stream,
                  const std::vector<StreamFence>& fences) override;
  StreamPoolStats pool_stats() const override { return pool_.stats(); }
  std::vector<std::string> pool_violations() const { return pool_.violation_messages(); }
  ExecutorInfo info() const override;
  // Runs the simulation until every stream is empty; re-throws the first error a host callback
  // raised. Infeasible when streams wait on events nothing will record (a deadlock).
  void synchronize() override;
  Clock::time_point now() const override;

  // Processes everything due at the current instant, then advances the clock to the next op end
  // or timer (of any executor on the clock) and processes that. Returns false when nothing is
  // left to do.
  bool step();
  // Steps until `pred()` holds (checked between steps) or nothing is left; returns pred().
  bool run_until(const std::function<bool()>& pred);
  void run_until_idle() {
    run_until([] { return false; });
  }
  // Runs fn inside the simulation at simulated time t_us (now if earlier); open-loop arrivals.
  void at(double t_us, std::function<void()> fn);
  double now_us() const;

  // Every op run so far, in start order.
  const std::vector<SimSpan>& schedule() const { return schedule_; }
  // The model above without jitter: what the schedulers' cost tables hold on this executor.
  std::vector<OpCost> predict_nodes(const RecModel& model, int64_t rows,
                                    LaunchLimits limits = {}) const override;
  // Blocks alloc_async handed out again after a free (pool_stats().reuses).
  int64_t reused_blocks() const { return pool_.stats().reuses; }
  const SimDevice& device() const { return dev_; }

  // Prefetch (with a GPU cache; nothing otherwise): the rows of q's lookups that the cache misses
  // and no transfer is bringing yet go over the host link on the copy stream, then into the
  // cache. Call it when q is admitted (with_gpu_prefetch does). Models must outlive the executor.
  void prefetch(const RecModel& model, const QueryInputs& q);
  // Per table of each model seen: hits, misses and hit rate of the lookups' unique keys,
  // cache rows, rows inserted synchronously / asynchronously / by prefetch, host-link bytes;
  // and the totals. Null without host tables.
  nlohmann::json embedding_stats() const;

 private:
  struct Item;
  struct Running;
  struct SimStream;
  class SimEvent;
  struct SimClock;
  struct EmbeddingStore;  // sim_embedding.cpp
  SimExecutor(SimDevice device, SimOptions options, std::shared_ptr<SimClock> clock);
  static std::shared_ptr<EmbeddingStore> make_embedding_store(const SimDevice& device,
                                                              const SimEmbeddingOptions& options);
  // The host-link and insertion µs the lookups of ops add to their launch (0 without host
  // tables); queues asynchronous insertions on the copy stream.
  double embedding_us(const std::vector<OpInstance>& ops, bool& link_bound, double work_us);
  // Queues `bytes` over the host link on the copy stream, then `then` (a host callback).
  void host_transfer(double bytes, std::function<void()> then);
  void start_transfer(int stream, Item& item);
  const std::vector<OpNode>& nodes_of(const RecModel& model, int64_t rows) const;
  OpCost cost(const OpNode& node, LaunchLimits limits) const;
  SimStream& stream_ref(int id);
  SimEvent& sim_event(Event& e) const;
  bool settle();                // processes runnable stream heads at now; true if anything happened
  void run_stream(int stream);  // processes one stream's head items until it runs, waits or empties
  void push(int stream, Item item);
  void refresh(int stream);        // recomputes whether the stream's head is runnable (ready_)
  void order_streams();            // order_ / pos_ after a stream is created
  int next_ready(int from) const;  // first runnable position >= from in order_, or -1
  void start_op(int stream, Item& item);
  void update_rates();
  double next_end_us() const;  // when the next of its running ops ends an overhead or finishes
  void advance(double dt);     // moves its running ops dt µs on, retiring the finished ones

  // The simulated time line, shared by the executors constructed on one clock.
  std::shared_ptr<SimClock> clock_;
  SimDevice dev_;
  SimOptions opt_;
  std::mt19937_64 rng_;
  const Clock::time_point& epoch_;
  std::recursive_mutex& mu_;
  double& now_;
  std::vector<std::unique_ptr<SimStream>> streams_;
  // The event loop's bookkeeping, so that a step costs what it changes, not the number of streams:
  // streams in service order (priority, then creation), each one's position there, and a bit per
  // position for a runnable head (not running, not empty, not parked on an unreached event).
  std::vector<int> order_, pos_;
  std::vector<uint64_t> ready_;
  std::vector<Running> running_, finished_;
  bool rates_dirty_ = false;  // running_ changed since update_rates()
  std::vector<SimSpan> schedule_;
  mutable std::map<std::pair<const RecModel*, int64_t>, std::vector<OpNode>> graphs_;
  std::exception_ptr error_;
  StreamPool pool_{Device::cpu()};
  std::shared_ptr<EmbeddingStore> emb_;  // null without host tables
  int copy_stream_ = -1;                 // created by the first host transfer
};

// Wraps a policy over `executor` so that each submitted (admitted) query's rows are prefetched
// (SimExecutor::prefetch) before it is handed to `inner`; results, order and errors are inner's.
// stats() adds {"embedding": executor.embedding_stats()}.
TANDEM_API std::unique_ptr<ServingPolicy> with_gpu_prefetch(std::unique_ptr<ServingPolicy> inner,
                                                            const RecModel& model,
                                                            SimExecutor& executor);

// Closed-loop load in simulated time: `options.clients` clients each submit a query, wait for its
// answer and submit the next, for options.duration_s simulated seconds after options.warmup_s
// (open loop when options.rate_qps > 0: Poisson arrivals at simulated times). The policy must be
// built over `executor`. Latencies and throughput are simulated; scores are real (zeros when the
// executor is timing-only).
TANDEM_API LoadStats run_sim_load(ServingPolicy& policy, SimExecutor& executor,
                                  const std::vector<std::shared_ptr<const QueryInputs>>& pool,
                                  const LoadOptions& options);

}  // namespace tandem::rec
