// SPDX-License-Identifier: Apache-2.0
// SimExecutor: the deterministic discrete-event executor, and its device descriptions.
#include "tandem/recsys/sim_executor.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

#include "tandem/core/error.h"
#include "tandem/core/json.h"
#include "tandem/recsys/executor.h"

namespace tandem::rec {

// ---- devices

nlohmann::json SimDevice::to_json() const {
  return {{"description", profile.description},
          {"sms", sms},
          {"peak_flops", profile.peak_flops},
          {"mem_bandwidth_bytes_per_s", profile.mem_bandwidth_bytes_per_s},
          {"elems_per_unit", elems_per_unit},
          {"bytes_per_unit", bytes_per_unit},
          {"launch_overhead_us", launch_overhead_us},
          {"tiny_factor", tiny_factor},
          {"mem_comp_penalty", mem_comp_penalty},
          {"host_link_bytes_per_s", host_link_bytes_per_s}};
}

SimDevice SimDevice::from_json(const nlohmann::json& j, const std::string& where) {
  auto num = [&](const char* key, bool may_be_zero = false) {
    if (!j.contains(key) || !j[key].is_number())
      throw InvalidArgument(cat(where, ": '", key, "' is missing or not a number"));
    const double v = j[key].get<double>();
    if (!std::isfinite(v) || v < 0 || (!may_be_zero && v == 0))
      throw InvalidArgument(cat(where, ": '", key, "' = ", v, " must be positive"));
    return v;
  };
  SimDevice d;
  d.name = j.value("name", where);
  d.profile.name = d.name;
  d.profile.kind = "sim";
  d.profile.description = j.value("description", "");
  d.sms = static_cast<int>(num("sms"));
  d.profile.threads = d.sms;
  d.profile.peak_flops = num("peak_flops");
  d.profile.mem_bandwidth_bytes_per_s = num("mem_bandwidth_bytes_per_s");
  d.elems_per_unit = num("elems_per_unit");
  d.bytes_per_unit = num("bytes_per_unit");
  d.launch_overhead_us = num("launch_overhead_us");
  d.tiny_factor = num("tiny_factor", true);
  d.mem_comp_penalty = num("mem_comp_penalty", true);
  if (j.contains("host_link_bytes_per_s")) d.host_link_bytes_per_s = num("host_link_bytes_per_s");
  return d;
}

namespace {
const nlohmann::json& builtin_devices() {
  static const nlohmann::json j = parse_json(
#include "recsys/sim_devices.inc"
      , "built-in sim devices");
  return j;
}
}  // namespace

std::vector<std::string> sim_device_names() {
  std::vector<std::string> out;
  for (const auto& [k, v] : builtin_devices().items()) out.push_back(k);
  return out;
}

SimDevice sim_device(const std::string& name) {
  const auto& all = builtin_devices();
  if (!all.contains(name)) {
    std::string names;
    for (const auto& n : sim_device_names()) names += (names.empty() ? "" : ", ") + n;
    throw InvalidArgument(cat("no simulated device '", name, "' (known: ", names, ")"));
  }
  nlohmann::json j = all[name];
  j["name"] = name;
  return SimDevice::from_json(j, "sim device " + name);
}

SimDevice sim_device_from_flag(const std::string& device) {
  if (device.rfind("sim:", 0) != 0)
    throw InvalidArgument(cat("'", device, "' names no simulated device (sim:NAME)"));
  const std::string name = device.substr(4);
  return name == "cpu" ? sim_cpu_device(measured_profile(Device::cpu())) : sim_device(name);
}

SimDevice sim_cpu_device(const DeviceProfile& cpu, double launch_overhead_us) {
  if (!(cpu.peak_flops > 0) || !(cpu.mem_bandwidth_bytes_per_s > 0) || cpu.threads < 1)
    throw InvalidArgument(cat("sim_cpu_device: profile '", cpu.name,
                              "' needs peak_flops, mem_bandwidth_bytes_per_s and threads >= 1"));
  SimDevice d;
  d.name = "cpu:" + cpu.name;
  d.profile = cpu;
  d.sms = cpu.threads;
  d.launch_overhead_us = launch_overhead_us;
  // A CPU thread streams far more than a GPU block: one unit per 256 KiB / 64K outputs.
  d.bytes_per_unit = 262144;
  d.elems_per_unit = 65536;
  return d;
}

// ---- simulator state

namespace {
struct EventState {
  int64_t recorded = 0;      // generation of the last record() call
  int64_t completed = 0;     // generation whose record was reached
  std::vector<int> waiters;  // streams parked on a wait for a later generation than `completed`
};
}  // namespace

class SimExecutor::SimEvent final : public Event {
 public:
  explicit SimEvent(SimExecutor* owner) : owner_(owner), st_(std::make_shared<EventState>()) {}
  Device device() const override { return Device::cpu(); }
  bool query() const override {
    std::lock_guard lk(owner_->mu_);
    return st_->completed >= st_->recorded;
  }
  void synchronize() override {
    if (!owner_->run_until([&] { return query(); }))
      throw Infeasible("SimExecutor: an event was synchronized that no stream will reach");
  }
  SimExecutor* owner_;
  std::shared_ptr<EventState> st_;
};

struct SimExecutor::Item {
  enum Kind { kOp, kHost, kRecord, kWait, kTransfer } kind = kOp;
  std::vector<OpInstance> ops;  // kOp: one op, or a fused group (launch_group)
  LaunchLimits limits;
  std::function<void()> fn;
  std::shared_ptr<EventState> event;
  int64_t generation = 0;
  double bytes = 0;  // kTransfer: over the host link
};

struct SimExecutor::Running {
  int stream = 0;
  double overhead_us = 0;   // launch overhead left: a fixed latency, uses no resources
  double remaining_us = 0;  // standalone µs of work left, after the overhead
  bool mem = false;         // shares bandwidth (else SMs): by FLOP/byte, TINY ops included
  bool link = false;        // bound by the host link (embedding misses, transfers): shares it
  double rate = 1;
  OpCost cost;
  size_t span = 0, spans = 1;  // its entries in schedule_ (one per member op)
};

struct SimExecutor::SimStream {
  int priority = 0;
  std::deque<Item> items;
  bool running = false;  // its head op is in running_
  bool ready = false;    // its bit in ready_: the head can be processed now
  bool parked = false;   // in its head wait's event's waiters
};

struct SimExecutor::SimClock {
  Clock::time_point epoch = Clock::now();
  std::recursive_mutex mu;
  double now = 0;
  std::multimap<std::pair<double, int64_t>, std::function<void()>> timers;
  int64_t timer_seq = 0;
  // In construction order: the order they are processed. Replaced, never changed in place, so
  // that step() holds a snapshot without copying it (a host callback may construct or destroy one).
  std::shared_ptr<const std::vector<SimExecutor*>> members =
      std::make_shared<std::vector<SimExecutor*>>();
};

SimExecutor::SimExecutor(SimDevice device, SimOptions options)
    : SimExecutor(std::move(device), options, std::make_shared<SimClock>()) {}

SimExecutor::SimExecutor(SimDevice device, SimOptions options, SimExecutor& clock)
    : SimExecutor(std::move(device), options, clock.clock_) {}

SimExecutor::SimExecutor(SimDevice device, SimOptions options, std::shared_ptr<SimClock> clock)
    : clock_(std::move(clock)),
      dev_(std::move(device)),
      opt_(options),
      rng_(options.seed),
      epoch_(clock_->epoch),
      mu_(clock_->mu),
      now_(clock_->now) {
  if (!(opt_.jitter >= 0 && opt_.jitter <= 0.5))
    throw InvalidArgument(cat("SimExecutor: jitter ", opt_.jitter, " outside [0, 0.5]"));
  if (dev_.sms < 1 || !(dev_.profile.peak_flops > 0) ||
      !(dev_.profile.mem_bandwidth_bytes_per_s > 0))
    throw InvalidArgument(cat("SimExecutor: device '", dev_.name,
                              "' needs sms >= 1, peak_flops and mem_bandwidth_bytes_per_s"));
  if (opt_.embedding.host_tables) emb_ = make_embedding_store(dev_, opt_.embedding);
  std::lock_guard lk(mu_);
  auto m = std::make_shared<std::vector<SimExecutor*>>(*clock_->members);
  m->push_back(this);
  clock_->members = std::move(m);
}

SimExecutor::~SimExecutor() {
  try {
    synchronize();
  } catch (...) {  // errors went to the queries' promises
  }
  std::lock_guard lk(mu_);
  auto m = std::make_shared<std::vector<SimExecutor*>>(*clock_->members);
  m->erase(std::find(m->begin(), m->end(), this));
  clock_->members = std::move(m);
}

int SimExecutor::create_stream(int priority) {
  std::lock_guard lk(mu_);
  streams_.push_back(std::make_unique<SimStream>());
  streams_.back()->priority = priority;
  order_streams();
  return static_cast<int>(streams_.size()) - 1;
}

int SimExecutor::num_streams() const {
  std::lock_guard lk(mu_);
  return static_cast<int>(streams_.size());
}

SimExecutor::SimStream& SimExecutor::stream_ref(int id) {
  if (id < 0 || id >= static_cast<int>(streams_.size()))
    throw InvalidArgument(cat("SimExecutor: no stream ", id, " (", streams_.size(), " created)"));
  return *streams_[id];
}

SimExecutor::SimEvent& SimExecutor::sim_event(Event& e) const {
  auto* se = dynamic_cast<SimEvent*>(&e);
  if (!se || se->owner_ != this)
    throw InvalidArgument("SimExecutor: the event was not created by this executor");
  return *se;
}

std::shared_ptr<Event> SimExecutor::create_event() { return std::make_shared<SimEvent>(this); }

void SimExecutor::launch(int s, const OpInstance& op, LaunchLimits limits) {
  launch_group(s, {op}, limits);
}

void SimExecutor::launch_group(int s, const std::vector<OpInstance>& ops, LaunchLimits limits) {
  if (ops.empty()) throw InvalidArgument("SimExecutor::launch_group: no ops");
  for (const auto& op : ops)
    if (!op.model || !op.state)
      throw InvalidArgument("SimExecutor::launch: op without model/state");
  std::lock_guard lk(mu_);
  Item it;
  it.kind = Item::kOp;
  it.ops = ops;
  it.limits = limits;
  push(s, std::move(it));
}

void SimExecutor::host(int s, std::function<void()> fn) {
  std::lock_guard lk(mu_);
  Item it;
  it.kind = Item::kHost;
  it.fn = std::move(fn);
  push(s, std::move(it));
}

void SimExecutor::record(Event& e, int s) {
  std::lock_guard lk(mu_);
  SimEvent& se = sim_event(e);
  (void)stream_ref(s);
  Item it;
  it.kind = Item::kRecord;
  it.event = se.st_;
  it.generation = ++se.st_->recorded;
  push(s, std::move(it));
}

void SimExecutor::wait(int s, Event& e) {
  std::lock_guard lk(mu_);
  SimEvent& se = sim_event(e);
  (void)stream_ref(s);
  if (se.st_->completed >= se.st_->recorded) return;  // already fired: nothing to wait for
  Item it;
  it.kind = Item::kWait;
  it.event = se.st_;
  it.generation = se.st_->recorded;
  push(s, std::move(it));
}

bool SimExecutor::done(Event& e) { return sim_event(e).query(); }

void* SimExecutor::alloc_async(size_t bytes, int s) {
  std::lock_guard lk(mu_);
  (void)stream_ref(s);
  return pool_.allocate(bytes, s);
}

void SimExecutor::free_async(void* ptr, size_t, int s) {
  std::lock_guard lk(mu_);
  std::shared_ptr<Event> done = create_event();
  record(*done, s);
  pool_.release(ptr, {{s, std::move(done)}});
}

void SimExecutor::free_after(void* ptr, size_t, int, const std::vector<StreamFence>& fences) {
  std::lock_guard lk(mu_);
  pool_.release(ptr, fences);
}

ExecutorInfo SimExecutor::info() const {
  ExecutorInfo i;
  i.capacity = i.parallel_units = dev_.sms;
  i.device = dev_.profile;
  i.grouped_launch = true;
  return i;
}

Clock::time_point SimExecutor::now() const {
  std::lock_guard lk(mu_);
  return epoch_ + std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double, std::micro>(now_));
}

double SimExecutor::now_us() const {
  std::lock_guard lk(mu_);
  return now_;
}

// ---- cost model

const std::vector<OpNode>& SimExecutor::nodes_of(const RecModel& model, int64_t rows) const {
  std::lock_guard lk(mu_);
  auto key = std::make_pair(&model, rows);
  auto it = graphs_.find(key);
  if (it == graphs_.end()) it = graphs_.emplace(key, model.graph(rows, dev_.profile).nodes()).first;
  return it->second;
}

OpCost SimExecutor::cost(const OpNode& n, LaunchLimits limits) const {
  OpCost c;
  const double bytes = n.bytes_moved();
  if (n.flops <= 0 && bytes <= 0) return c;  // inputs: no work
  double elems = 0;
  for (const auto& s : n.output_shapes) elems += double(s.numel());
  double units = std::max(
      {1.0, std::ceil(elems / dev_.elems_per_unit), std::ceil(bytes / dev_.bytes_per_unit)});
  if (limits.max_units > 0) units = std::min(units, double(limits.max_units));
  c.units = static_cast<int>(std::min(units, 1e9));
  c.share = std::min(1.0, units / double(dev_.sms));
  const DeviceProfile& p = dev_.profile;
  const double roof_us =
      1e6 * std::max(n.flops / p.peak_flops, bytes / p.mem_bandwidth_bytes_per_s);
  c.us = dev_.launch_overhead_us + roof_us / c.share;
  if (c.us < dev_.tiny_factor * dev_.launch_overhead_us)
    c.cls = CostClass::kTiny;
  else
    c.cls = (bytes > 0 && n.flops / bytes < p.peak_flops / p.mem_bandwidth_bytes_per_s)
                ? CostClass::kMem
                : CostClass::kComp;
  return c;
}

std::vector<OpCost> SimExecutor::predict_nodes(const RecModel& model, int64_t rows,
                                               LaunchLimits limits) const {
  std::vector<OpCost> out;
  for (const auto& n : nodes_of(model, rows)) out.push_back(cost(n, limits));
  return out;
}

// ---- simulation

void SimExecutor::start_op(int s, Item& item) {
  // A group is one launch: its members' work summed, one launch overhead.
  OpNode node;
  for (const OpInstance& op : item.ops) {
    if (op.state->error) continue;  // that query failed earlier: its op is skipped
    const OpNode& n = nodes_of(*op.model, op.state->inputs->rows).at(op.node);
    node.flops += n.flops;
    node.bytes_read += n.bytes_read;
    node.bytes_written += n.bytes_written;
    node.output_shapes.insert(node.output_shapes.end(), n.output_shapes.begin(),
                              n.output_shapes.end());
    try {  // the real computation, at the op's simulated start (its inputs have finished)
      if (opt_.compute)
        op.model->run_node(op.node, *op.state, item.limits.max_units);
      else if (!n.output_shapes.empty())  // zeros, not garbage: readers (top-k) stay defined
        op.state->values.at(size_t(op.node)) = Tensor::zeros(n.output_shapes[0], DType::kF32);
    } catch (...) {
      op.state->error = std::current_exception();
    }
  }
  const OpCost c = cost(node, item.limits);
  const double u = std::uniform_real_distribution<double>(-1.0, 1.0)(rng_);
  Running r;
  r.stream = s;
  r.cost = c;
  const double f = 1.0 + opt_.jitter * u;
  r.overhead_us = c.us > 0 ? dev_.launch_overhead_us * f : 0.0;
  r.remaining_us = std::max(0.0, c.us - dev_.launch_overhead_us) * f;
  r.mem = node.bytes_moved() > 0 &&
          node.flops / node.bytes_moved() <
              dev_.profile.peak_flops / dev_.profile.mem_bandwidth_bytes_per_s;
  if (emb_) r.remaining_us += embedding_us(item.ops, r.link, r.remaining_us);
  r.span = schedule_.size();
  r.spans = item.ops.size();
  for (const OpInstance& op : item.ops)
    schedule_.push_back(
        {op.query_id, op.node, s, c.cls, c.units, static_cast<int>(item.ops.size()), now_, now_});
  running_.push_back(r);
  streams_[s]->running = true;
}

void SimExecutor::host_transfer(double bytes, std::function<void()> then) {
  if (copy_stream_ < 0) copy_stream_ = create_stream();
  Item it;
  it.kind = Item::kTransfer;
  it.bytes = bytes;
  push(copy_stream_, std::move(it));
  host(copy_stream_, std::move(then));
}

void SimExecutor::start_transfer(int s, Item& item) {
  Running r;
  r.stream = s;
  r.overhead_us = dev_.launch_overhead_us;
  r.remaining_us = 1e6 * item.bytes / dev_.host_link_bytes_per_s;
  r.link = true;
  r.spans = 0;  // not an op of the schedule
  running_.push_back(r);
  streams_[s]->running = true;
}

// ---- stream bookkeeping: which heads can be processed, in service order

void SimExecutor::order_streams() {
  const int n = static_cast<int>(streams_.size());
  order_.resize(size_t(n));
  std::iota(order_.begin(), order_.end(), 0);
  std::stable_sort(order_.begin(), order_.end(),
                   [&](int a, int b) { return streams_[a]->priority > streams_[b]->priority; });
  pos_.resize(size_t(n));
  ready_.assign(size_t(n + 63) / 64, 0);
  for (int p = 0; p < n; ++p) {
    pos_[size_t(order_[p])] = p;
    if (streams_[order_[p]]->ready) ready_[size_t(p) / 64] |= uint64_t(1) << (p % 64);
  }
}

void SimExecutor::push(int s, Item item) {
  SimStream& st = *streams_[s];
  st.items.push_back(std::move(item));
  if (st.items.size() == 1) refresh(s);  // a new head; otherwise the head is unchanged
}

void SimExecutor::refresh(int s) {
  SimStream& st = *streams_[s];
  st.ready = !st.running && !st.items.empty();
  if (st.ready) {
    const Item& head = st.items.front();
    if (head.kind == Item::kWait && head.event->completed < head.generation) {
      st.ready = false;  // parked until a record of its event is reached
      if (!st.parked) head.event->waiters.push_back(s);
      st.parked = true;
    }
  }
  const int p = pos_[size_t(s)];
  const uint64_t bit = uint64_t(1) << (p % 64);
  ready_[size_t(p) / 64] = st.ready ? ready_[size_t(p) / 64] | bit : ready_[size_t(p) / 64] & ~bit;
}

int SimExecutor::next_ready(int from) const {
  for (size_t w = size_t(from) / 64; w < ready_.size(); ++w) {
    uint64_t bits = ready_[w];
    if (w == size_t(from) / 64) bits &= ~uint64_t(0) << (from % 64);
    if (bits) return static_cast<int>(w * 64) + std::countr_zero(bits);
  }
  return -1;
}

// Processes the stream's head items until its head op runs, it waits on an unreached event, or
// it is empty. A record reached wakes the streams parked on its event.
void SimExecutor::run_stream(int s) {
  SimStream& st = *streams_[s];
  while (!st.items.empty() && !st.running) {
    Item& it = st.items.front();
    if (it.kind == Item::kOp) {
      bool live = false;
      for (const auto& op : it.ops) live = live || !op.state->error;
      if (!live) {  // a failed query skips its later ops
        st.items.pop_front();
        continue;
      }
      start_op(s, it);
      rates_dirty_ = true;
      break;
    }
    if (it.kind == Item::kTransfer) {
      start_transfer(s, it);
      rates_dirty_ = true;
      break;
    }
    if (it.kind == Item::kWait) {
      if (it.event->completed < it.generation) break;  // parked; no thread blocks
    } else if (it.kind == Item::kRecord) {
      EventState& ev = *it.event;
      ev.completed = std::max(ev.completed, it.generation);
      std::erase_if(ev.waiters, [&](int w) {
        if (streams_[w]->items.front().generation > ev.completed) return false;
        streams_[w]->parked = false;
        refresh(w);
        return true;
      });
    } else {
      auto fn = std::move(it.fn);
      st.items.pop_front();
      try {
        fn();
      } catch (...) {
        if (!error_) error_ = std::current_exception();
      }
      continue;
    }
    st.items.pop_front();
  }
  refresh(s);
}

// Passes over the runnable streams in service order until none is left. Within a pass, a stream
// made runnable behind the current one is served in the same pass, one ahead of it (or created
// during the pass) in the next: the order of the passes over every stream this replaces.
bool SimExecutor::settle() {
  bool any = false;
  for (int p = next_ready(0); p >= 0; p = next_ready(0)) {
    const int created = static_cast<int>(streams_.size());  // streams of this pass
    bool progress = false;
    for (; p >= 0;) {
      const int s = order_[size_t(p)];
      if (s >= created) {
        p = next_ready(p + 1);
        continue;
      }
      run_stream(s);
      progress = true;
      p = next_ready(pos_[size_t(s)] + 1);
    }
    any = true;
    if (!progress) break;
  }
  if (rates_dirty_) update_rates();
  return any;
}

void SimExecutor::update_rates() {
  rates_dirty_ = false;
  double mem = 0, comp = 0, link = 0;
  for (const auto& r : running_)
    if (r.overhead_us > 0)
      continue;
    else if (r.link)
      link += 1;
    else
      (r.mem ? mem : comp) += r.cost.share;
  for (auto& r : running_) {
    if (r.link) {  // transfers over the host link share it equally
      r.rate = 1.0 / std::max(1.0, link);
      continue;
    }
    const double same = r.mem ? mem : comp, other = r.mem ? comp : mem;
    r.rate = 1.0 / (std::max(1.0, same) * (other > 0 ? 1 + dev_.mem_comp_penalty : 1.0));
  }
}

double SimExecutor::next_end_us() const {
  double next = std::numeric_limits<double>::infinity();
  for (const auto& r : running_)
    next = std::min(next, now_ + (r.overhead_us > 0 ? r.overhead_us : r.remaining_us / r.rate));
  return next;
}

// An op's overhead ends, or its work finishes, when what is left of it is within rounding of zero,
// or too small for the clock: from 2^24 µs (16.8 s) on, a double's spacing at now exceeds 2e-9 µs,
// so a leftover of a few 1e-9 µs would give now + leftover == now: the next event at now again,
// dt = 0, and the simulation stepping in place forever (as DeepRecSched's RM2 search did).
void SimExecutor::advance(double dt) {
  auto spent = [&](double left, double tolerance, double rate) {
    return left <= tolerance || now_ + left / rate == now_;
  };
  finished_.clear();
  size_t kept = 0;
  for (Running& r : running_) {
    if (r.overhead_us > 0) {  // dt never passes the end of an overhead (it is an event)
      r.overhead_us = spent(r.overhead_us - dt, 1e-9, 1.0) ? 0.0 : r.overhead_us - dt;
      rates_dirty_ = rates_dirty_ || r.overhead_us <= 0;  // it starts using its resource
    } else {
      r.remaining_us -= r.rate * dt;
    }
    // Finished: the op that defined `next`, or any within rounding of it.
    if (r.overhead_us <= 0 && spent(r.remaining_us, 1e-6, r.rate))
      finished_.push_back(r);
    else
      running_[kept++] = r;
  }
  running_.resize(kept);
  rates_dirty_ = rates_dirty_ || !finished_.empty();
  if (rates_dirty_) update_rates();
  for (const auto& r : finished_) {
    SimStream& st = *streams_[r.stream];
    const std::vector<OpInstance> ops = std::move(st.items.front().ops);
    st.items.pop_front();
    st.running = false;
    refresh(r.stream);
    for (size_t k = 0; k < r.spans; ++k) {
      SimSpan& sp = schedule_[r.span + k];
      sp.end_us = now_;
      if (!tracer_) continue;
      auto tp = [&](double us) {
        return epoch_ + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double, std::micro>(us));
      };
      const OpInstance& op = ops[k];
      tracer_->add(op.model->node_name(op.node), op.category, op.query_id, r.stream,
                   tp(sp.start_us), tp(sp.end_us), r.stream);
    }
  }
}

bool SimExecutor::step() {
  std::lock_guard lk(mu_);
  const auto members_now = clock_->members;  // a host callback may construct or destroy one
  const auto& members = *members_now;
  bool did = false;
  for (SimExecutor* m : members) did = m->settle() || did;
  auto& timers = clock_->timers;
  double next = std::numeric_limits<double>::infinity();
  for (SimExecutor* m : members) next = std::min(next, m->next_end_us());
  if (!timers.empty()) next = std::min(next, std::max(now_, timers.begin()->first.first));
  if (!std::isfinite(next)) return did;
  const double dt = next - now_;
  now_ = next;
  for (SimExecutor* m : members) m->advance(dt);
  while (!timers.empty() && timers.begin()->first.first <= now_) {
    auto fn = std::move(timers.begin()->second);
    timers.erase(timers.begin());
    try {
      fn();
    } catch (...) {
      if (!error_) error_ = std::current_exception();
    }
  }
  for (SimExecutor* m : members) m->settle();
  return true;
}

bool SimExecutor::run_until(const std::function<bool()>& pred) {
  std::lock_guard lk(mu_);
  while (!pred())
    if (!step()) return pred();
  return true;
}

void SimExecutor::at(double t_us, std::function<void()> fn) {
  std::lock_guard lk(mu_);
  clock_->timers.emplace(std::make_pair(std::max(t_us, now_), clock_->timer_seq++), std::move(fn));
}

void SimExecutor::synchronize() {
  std::lock_guard lk(mu_);
  run_until_idle();
  for (size_t s = 0; s < streams_.size(); ++s)
    if (!streams_[s]->items.empty())
      throw Infeasible(cat("SimExecutor: stream ", s,
                           " waits on an event that no stream will record (deadlock)"));
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace tandem::rec
