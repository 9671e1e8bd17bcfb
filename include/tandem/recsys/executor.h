// SPDX-License-Identifier: Apache-2.0
// The Executor interface of recsys serving (the recsys spec, §2.1) and its CPU implementation over
// tandem streams, plus the per-op tracer that writes Chrome-trace JSON.
//
// Serving policies (serving.h) and the later RecOS / RACE / RecStream schedulers talk only to an
// Executor: they create streams (asynchronous in-order queues), launch op instances (one graph
// node of one query) on them, order streams with events, and run host callbacks in stream order.
// CpuExecutor maps a stream to a tandem CPU stream (core/stream.h): a queue served by the shared
// worker pool; a wait parks the queue without blocking a worker. An op keeps its intra-op
// parallelism (OpenMP inside the kernels), capped by LaunchLimits::max_units threads for the
// embedding kernels.
//
//   tandem::rec::CpuExecutor ex(tandem::rec::measured_profile(tandem::Device::cpu()));
//   int s = ex.create_stream();
//   auto st = model.make_state(q);
//   for (int id : model.topological_order()) ex.launch(s, {&model, id, &st, 0});
//   ex.host(s, [&] { done(model.scores(st)); });
//
// Departures from the spec's interface: stream priorities are recorded but the CPU worker pool
// serves runnable queues in FIFO order; on_done(event, fn) is host(stream, fn) (a callback in the
// order of the stream it was issued on); alloc_async / free_async / free_after are a StreamPool
// (core/stream_pool.h) of host blocks: free_async(p, s) lets later work on s reuse the block at
// once and other streams once s reaches the free. When a node throws, the error is kept
// in QueryState::error and the query's later nodes are skipped. Thread-safety: all methods may be
// called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tandem/core/cluster.h"
#include "tandem/core/stream.h"
#include "tandem/core/stream_pool.h"
#include "tandem/export.h"
#include "tandem/recsys/model.h"

namespace tandem::rec {

using Clock = std::chrono::steady_clock;

// One op of one query.
struct OpInstance {
  const RecModel* model = nullptr;
  int node = -1;
  QueryState* state = nullptr;
  int64_t query_id = 0;
  const char* category = "";  // cost class, for traces
};

struct LaunchLimits {
  int max_units = 0;  // 0 = uncapped; CPU: worker threads of the op
};

struct ExecutorInfo {
  int capacity = 0;        // CPU: worker threads T
  int parallel_units = 0;  // CPU: T
  // The device the executor runs on (peak FLOP/s, bandwidth), as given at construction; what
  // policies price the model's nodes with (RecModel::graph, CostModel).
  DeviceProfile device;
  // launch_group runs its ops as one kernel (one launch overhead, the summed work): SimGPU. The
  // CPU executor runs a group's ops back to back in one stream task.
  bool grouped_launch = false;
};

// This machine's profile of `device` (cpu or cuda:N): peak f32 GEMM FLOP/s and memory bandwidth
// measured by profile_device (profiler.h) without op tables, about a second, the first time a
// device is asked for; later calls return the same profile (cached for the process, thread-safe).
TANDEM_API const DeviceProfile& measured_profile(Device device);

// Collects per-op spans; writes them as Chrome trace events (chrome://tracing, Perfetto).
class TANDEM_API Tracer {
 public:
  explicit Tracer(size_t max_events = 500000) : max_events_(max_events) {}
  // `tid`: the trace row; -1 = the calling thread (the CPU executor's worker).
  void add(const std::string& name, const std::string& category, int64_t query, int stream,
           Clock::time_point begin, Clock::time_point end, int tid = -1);
  size_t size() const;
  size_t dropped() const;
  // Mean number of ops running at once over the traced span: the sum of op durations divided by
  // (last end - first start); 0 without spans. The CPU counterpart of "overlapping kernels".
  double mean_overlap() const;
  // {"traceEvents": [{"name", "cat", "ph": "X", "ts", "dur" (µs), "pid": 1, "tid" (worker),
  //   "args": {"query", "stream"}}], "displayTimeUnit": "ms"}
  nlohmann::json chrome_json() const;
  void write(const std::string& path) const;

 private:
  struct Span {
    std::string name, category;
    int64_t query;
    int stream, tid;
    double ts_us, dur_us;
  };
  size_t max_events_;
  mutable std::mutex mu_;
  std::vector<Span> spans_;
  std::unordered_map<std::thread::id, int> tids_;
  size_t dropped_ = 0;
  Clock::time_point origin_ = Clock::now();
};

// What a scheduler predicts for one node of one query (its cost table, the recsys spec §2.2).
struct OpCost {
  double us = 0;  // standalone duration, µs
  CostClass cls = CostClass::kTiny;
  double share = 0;  // part of the device's parallel units it uses, (0, 1]
  int units = 0;     // units it launches (CPU: threads; GPU: thread blocks)
};

class TANDEM_API Executor {
 public:
  virtual ~Executor() = default;
  virtual int create_stream(int priority = 0) = 0;
  virtual int num_streams() const = 0;
  virtual std::shared_ptr<Event> create_event() = 0;
  virtual void launch(int stream, const OpInstance& op, LaunchLimits limits = {}) = 0;
  // Several op instances as one launch (RACE's phase fusion: the lookups of several tables and
  // queries in one TBE-style kernel): the group is one item of the stream; its ops are independent
  // of each other. This default launches them one by one.
  virtual void launch_group(int stream, const std::vector<OpInstance>& ops,
                            LaunchLimits limits = {}) {
    for (const auto& op : ops) launch(stream, op, limits);
  }
  // Runs fn after all earlier items of the stream (the query's completion callback).
  virtual void host(int stream, std::function<void()> fn) = 0;
  virtual void record(Event& event, int stream) = 0;
  virtual void wait(int stream, Event& event) = 0;  // never blocks the caller or a worker
  virtual bool done(Event& event) = 0;
  virtual void* alloc_async(size_t bytes, int stream) = 0;
  virtual void free_async(void* ptr, size_t bytes, int stream) = 0;
  // The deferred free of a tensor whose consumers ran on several streams (the recsys spec §2.4):
  // `ptr` (from alloc_async on `producer_stream`) may be handed out again once every fence (an
  // event recorded on its stream after the tensor's last consumer there) has fired. Executors
  // with a StreamPool put it on the pool's pending list (spec option (a)); this default is option
  // (b): producer_stream waits on the other streams' fences, then free_async on it.
  virtual void free_after(void* ptr, size_t bytes, int producer_stream,
                          const std::vector<StreamFence>& fences);
  // Counters of the pool behind alloc_async (zeros where the executor has none).
  virtual StreamPoolStats pool_stats() const { return {}; }
  virtual ExecutorInfo info() const = 0;
  // Blocks until every stream is idle; re-throws the first error a host callback raised.
  virtual void synchronize() = 0;
  // The executor's clock: the wall clock, except on SimExecutor (sim_executor.h), whose clock is
  // simulated. Policies time queries with it, so latencies are simulated there.
  virtual Clock::time_point now() const { return Clock::now(); }
  // The cost of every node of `model` for a query of `rows` rows launched with `limits`. This
  // default prices the nodes on info().device with the roofline (RooflineCostModel, plus
  // kDefaultLaunchUs per op) and their cost_class; a node uses all info().parallel_units units,
  // or limits.max_units of them. SimExecutor answers with its own model.
  virtual std::vector<OpCost> predict_nodes(const RecModel& model, int64_t rows,
                                            LaunchLimits limits = {}) const;
  static constexpr double kDefaultLaunchUs = 3;
  void set_tracer(Tracer* tracer) { tracer_ = tracer; }

 protected:
  Tracer* tracer_ = nullptr;
};

class TANDEM_API CpuExecutor final : public Executor {
 public:
  // `device`: the CPU's profile (measured_profile(Device::cpu()), a `tandem profile` file, ...).
  explicit CpuExecutor(DeviceProfile device);
  ~CpuExecutor() override;
  int create_stream(int priority = 0) override;
  int num_streams() const override;
  std::shared_ptr<Event> create_event() override;
  void launch(int stream, const OpInstance& op, LaunchLimits limits = {}) override;
  // One stream item that runs the group's nodes in turn (one dispatch instead of one per op).
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
  void synchronize() override;

 private:
  Stream& stream(int id) const;
  DeviceProfile device_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Stream>> streams_;
  StreamPool pool_{Device::cpu()};
};

// DeviceExecutor: the Executor over a device's streams (cuda:0 in practice; the CPU works too and
// runs the same code with CPU streams). The model must be on that device (RecModel::to). Each
// executor stream is a pair: a host queue (a CPU stream) that issues the stream's ops in order,
// and a stream of the device (create_stream(device)) that the ops of those nodes are enqueued on,
// so the host queue does not wait for the device except where a node needs host data (index
// checks). host() callbacks and record() first wait until the device stream has
// drained, so a callback sees finished outputs and an event completes only after the device work
// before it: wait() then orders the host queues, which orders the device work they issue. With a
// tracer each op's span includes its device time (the host queue synchronizes the device stream
// after the op, which serializes issue and execution on that stream). alloc_async allocates
// device memory at once; free_async releases it once the stream has drained. On the CPU device a
// draining issue queue blocks a worker of the shared CPU stream pool (at least 4 workers), so use
// fewer executor streams than workers there.
class TANDEM_API DeviceExecutor final : public Executor {
 public:
  // `profile` describes `device` (measured_profile(device), a `tandem profile` file, ...).
  DeviceExecutor(Device device, DeviceProfile profile);
  ~DeviceExecutor() override;
  int create_stream(int priority = 0) override;
  int num_streams() const override;
  std::shared_ptr<Event> create_event() override;
  void launch(int stream, const OpInstance& op, LaunchLimits limits = {}) override;
  void host(int stream, std::function<void()> fn) override;
  void record(Event& event, int stream) override;
  void wait(int stream, Event& event) override;
  bool done(Event& event) override;
  void* alloc_async(size_t bytes, int stream) override;
  void free_async(void* ptr, size_t bytes, int stream) override;
  ExecutorInfo info() const override;
  void synchronize() override;
  Device device() const { return device_; }

 private:
  struct Lane {
    std::unique_ptr<Stream> host;    // CPU queue that issues the ops in order
    std::unique_ptr<Stream> device;  // the device's stream the ops enqueue on
  };
  Lane& lane(int id) const;
  Device device_;
  DeviceProfile profile_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Lane>> lanes_;
};

}  // namespace tandem::rec
