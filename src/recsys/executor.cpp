// SPDX-License-Identifier: Apache-2.0
// CpuExecutor over tandem CPU streams, and the Chrome-trace tracer.
#include "tandem/recsys/executor.h"

#include <algorithm>
#include <fstream>

#include "tandem/core/allocator.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"

namespace tandem::rec {

void Tracer::add(const std::string& name, const std::string& category, int64_t query, int stream,
                 Clock::time_point begin, Clock::time_point end, int tid) {
  std::lock_guard lk(mu_);
  if (spans_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  if (tid < 0)
    tid =
        tids_.try_emplace(std::this_thread::get_id(), static_cast<int>(tids_.size())).first->second;
  using us = std::chrono::duration<double, std::micro>;
  spans_.push_back(
      {name, category, query, stream, tid, us(begin - origin_).count(), us(end - begin).count()});
}

size_t Tracer::size() const {
  std::lock_guard lk(mu_);
  return spans_.size();
}

size_t Tracer::dropped() const {
  std::lock_guard lk(mu_);
  return dropped_;
}

double Tracer::mean_overlap() const {
  std::lock_guard lk(mu_);
  if (spans_.empty()) return 0.0;
  double lo = spans_.front().ts_us, hi = lo, busy = 0;
  for (const auto& s : spans_) {
    lo = std::min(lo, s.ts_us);
    hi = std::max(hi, s.ts_us + s.dur_us);
    busy += s.dur_us;
  }
  return hi > lo ? busy / (hi - lo) : 0.0;
}

nlohmann::json Tracer::chrome_json() const {
  std::lock_guard lk(mu_);
  nlohmann::json ev = nlohmann::json::array();
  for (const auto& s : spans_)
    ev.push_back({{"name", s.name},
                  {"cat", s.category},
                  {"ph", "X"},
                  {"ts", s.ts_us},
                  {"dur", s.dur_us},
                  {"pid", 1},
                  {"tid", s.tid},
                  {"args", {{"query", s.query}, {"stream", s.stream}}}});
  for (const auto& [id, tid] : tids_)
    ev.push_back({{"name", "thread_name"},
                  {"ph", "M"},
                  {"pid", 1},
                  {"tid", tid},
                  {"args", {{"name", cat("worker ", tid)}}}});
  return {{"traceEvents", ev}, {"displayTimeUnit", "ms"}, {"dropped_events", dropped_}};
}

void Tracer::write(const std::string& path) const {
  std::ofstream f(path, std::ios::trunc);
  if (!f) throw IoError(cat("cannot create trace file '", path, "'"));
  f << chrome_json().dump() << "\n";
  if (!f) throw IoError(cat("error writing trace file '", path, "'"));
}

void Executor::free_after(void* ptr, size_t bytes, int producer_stream,
                          const std::vector<StreamFence>& fences) {
  for (const auto& f : fences)
    if (f.stream != producer_stream && f.event) wait(producer_stream, *f.event);
  free_async(ptr, bytes, producer_stream);
}

std::vector<OpCost> Executor::predict_nodes(const RecModel& model, int64_t rows,
                                            LaunchLimits limits) const {
  const ExecutorInfo in = info();
  const Graph g = model.graph(rows, in.device);
  RooflineOptions ro;
  ro.launch_overhead_s = kDefaultLaunchUs * 1e-6;
  const RooflineCostModel roofline(ro);
  const int all = std::max(1, in.parallel_units);
  const int units = limits.max_units > 0 ? std::min(all, limits.max_units) : all;
  std::vector<OpCost> out;
  for (const auto& n : g.nodes()) {
    OpCost c;
    const bool work = n.flops > 0 || n.bytes_moved() > 0;
    c.us = work ? 1e6 * roofline.predict_op_s(n, in.device) * double(all) / double(units) : 0.0;
    const std::string cls = n.attrs.at("cost_class").get<std::string>();
    c.cls = cls == "MEM" ? CostClass::kMem : cls == "COMP" ? CostClass::kComp : CostClass::kTiny;
    c.units = work ? units : 0;
    c.share = double(c.units) / double(all);
    out.push_back(c);
  }
  return out;
}

CpuExecutor::CpuExecutor(DeviceProfile device) : device_(std::move(device)) {}

CpuExecutor::~CpuExecutor() {
  try {
    synchronize();
  } catch (...) {  // errors were reported to the queries' promises
  }
}

int CpuExecutor::create_stream(int /*priority*/) {
  std::lock_guard lk(mu_);
  streams_.push_back(tandem::create_stream(Device::cpu()));
  return static_cast<int>(streams_.size()) - 1;
}

int CpuExecutor::num_streams() const {
  std::lock_guard lk(mu_);
  return static_cast<int>(streams_.size());
}

Stream& CpuExecutor::stream(int id) const {
  std::lock_guard lk(mu_);
  if (id < 0 || id >= static_cast<int>(streams_.size()))
    throw InvalidArgument(cat("CpuExecutor: no stream ", id, " (", streams_.size(), " created)"));
  return *streams_[id];
}

std::shared_ptr<Event> CpuExecutor::create_event() {
  return std::shared_ptr<Event>(tandem::create_event(Device::cpu()));
}

namespace {
// Runs one op on a CPU worker: skipped when its query failed; a throw fails the query.
void run_cpu_op(const OpInstance& op, LaunchLimits limits, Tracer* tracer, int s) {
  if (op.state->error) return;
  const auto t0 = Clock::now();
  try {
    op.model->run_node(op.node, *op.state, limits.max_units);
  } catch (...) {
    op.state->error = std::current_exception();
  }
  if (tracer)
    tracer->add(op.model->node_name(op.node), op.category, op.query_id, s, t0, Clock::now());
}
}  // namespace

void CpuExecutor::launch(int s, const OpInstance& op, LaunchLimits limits) {
  Tracer* tracer = tracer_;
  stream(s).launch([op, limits, tracer, s] { run_cpu_op(op, limits, tracer, s); });
}

void CpuExecutor::launch_group(int s, const std::vector<OpInstance>& ops, LaunchLimits limits) {
  Tracer* tracer = tracer_;
  stream(s).launch([ops, limits, tracer, s] {
    for (const auto& op : ops) run_cpu_op(op, limits, tracer, s);
  });
}

void CpuExecutor::host(int s, std::function<void()> fn) { stream(s).launch(std::move(fn)); }
void CpuExecutor::record(Event& e, int s) { stream(s).record(e); }
void CpuExecutor::wait(int s, Event& e) { stream(s).wait(e); }
bool CpuExecutor::done(Event& e) { return e.query(); }

void* CpuExecutor::alloc_async(size_t bytes, int s) {
  (void)stream(s);
  return pool_.allocate(bytes, s);
}

void CpuExecutor::free_async(void* ptr, size_t, int s) {
  std::shared_ptr<Event> done = create_event();
  record(*done, s);
  pool_.release(ptr, {{s, std::move(done)}});
}

void CpuExecutor::free_after(void* ptr, size_t, int, const std::vector<StreamFence>& fences) {
  pool_.release(ptr, fences);
}

ExecutorInfo CpuExecutor::info() const {
  ExecutorInfo i;
  i.capacity = i.parallel_units = cpu_num_threads();
  i.device = device_;
  return i;
}

void CpuExecutor::synchronize() {
  std::vector<Stream*> all;
  {
    std::lock_guard lk(mu_);
    for (auto& s : streams_) all.push_back(s.get());
  }
  for (Stream* s : all) s->synchronize();
}

}  // namespace tandem::rec
