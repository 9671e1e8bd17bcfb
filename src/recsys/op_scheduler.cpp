// SPDX-License-Identifier: Apache-2.0
// The op-level scheduler of the recsys spec: RecOS (§2.3), RACE (§2.6), their combination and the
// B4 lookup-ahead baseline (§3) as configurations of one class, OpScheduler, which talks only to
// the Executor interface (so the same code runs on CpuExecutor and SimExecutor).
//
// Every in-flight query's op instances (one graph node of one query) go through a ready heap. An
// op is ready when all its predecessors have been issued; stream order and event waits enforce
// completion order. Issuing pops the best op, picks a stream, makes that stream wait for the
// events of unfinished parents on other streams, launches the op, records its event and queues a
// host callback behind it that accounts its completion (the monitor: exact on both executors).
// Issue stops while every stream holds more than the horizon H of predicted unfinished work, so a
// late query with little slack can still overtake (default 0.4 x the median op: the spec proposes
// 2x; the SimGPU sweep preferred issuing just in time).
//
// Configurations (Mode):
//   recos       ready queue (ready_queue.h): least slack d_j - now - CP_j(i) for ops whose slack
//               is below PolicyOptions::urgent_slack_ms, earliest query deadline for the rest
//               (then business priority, arrival, critical path); stream score
//               max(backlog_s, t_dep) + c (1 + alpha contention) + beta n_x t_event.
//   race        lanes: lookups (EmbLookupPool / Gather / wide lookups: phase E) on lane E
//               (lookup_streams streams), the rest (phase D) on lane D; lookups launched with at
//               most ceil(rho x parallel units) units; the software pipeline (query j+1 is
//               admitted, so its E phase issues, once query j's D phase is fully issued; admission
//               in RecOS key order); the pairing rule (an op is not placed beside running
//               same-class ops when their shares sum over 1); phase fusion (the lookups at the
//               top of the ready heap, of one query or several, go out as one launch_group, up to
//               kMaxFusedOps). Within a lane the least backlog wins.
//   recos+race  recos with race's lanes, lookup budget, pairing rule and phase fusion (no
//               pipeline gate).
//   b4          TorchRec lookup-ahead: two streams (lookup, compute), queries FIFO, the pipeline
//               gate; no budget, no pairing, no fusion: RACE's ablation anchor.
// Tensor lifetimes (§2.4, tensor_lifetimes.h): with PolicyOptions::tensor_pool and a model on the
// CPU, every intermediate output lives in a block of the executor's stream-ordered pool, taken
// when its producer is issued and freed behind its consumers' events when the last is issued.
// Horizontal fusion (recos, recos+race; fuse_across): see fuse_across() below.
// Reconstruction, not the papers' code (their texts are not public).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <queue>
#include <set>

#include "recsys/policy_base.h"
#include "recsys/ready_queue.h"
#include "recsys/tensor_lifetimes.h"
#include "tandem/core/error.h"
#include "tandem/recsys/serving.h"

namespace tandem::rec {
namespace {

enum class Mode { kRecos, kRace, kRecosRace, kB4 };

struct ModeTraits {
  bool slack_order;  // RecOS key; else FIFO
  bool score;        // RecOS stream score; else least backlog
  bool lanes;        // E/D lanes
  bool gate;         // cross-query software pipeline (one query ahead in its E phase)
  bool budget;       // lookup launch cap rho
  bool pairing;      // RACE pairing rule
  bool fuse;         // RACE phase fusion of ready lookups into one launch
  bool hfuse;        // RecOS horizontal fusion of one node across queries (fuse_across > 1)
};

constexpr size_t kMaxFusedOps = 256;

ModeTraits traits(Mode m) {
  switch (m) {
    case Mode::kRecos:
      return {true, true, false, false, false, false, false, true};
    case Mode::kRace:
      return {true, false, true, true, true, true, true, false};
    case Mode::kRecosRace:
      return {true, true, true, false, true, true, true, true};
    case Mode::kB4:
      return {false, false, true, true, false, false, false, false};
  }
  return {};
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kRecos:
      return "recos";
    case Mode::kRace:
      return "race";
    case Mode::kRecosRace:
      return "recos+race";
    case Mode::kB4:
      return "b4";
  }
  return "?";
}

class OpScheduler final : public PolicyBase {
 public:
  OpScheduler(const RecModel& model, Executor& ex, const PolicyOptions& o, Mode mode)
      : PolicyBase(model, ex),
        mode_(mode),
        t_(traits(mode)),
        opt_(o),
        fuse_across_(t_.hfuse ? fuse_limit(o, ex) : 1),
        ready_(t_.slack_order && o.urgent_slack_ms<std::numeric_limits<double>::infinity(),
                                                   1e3 * o.urgent_slack_ms, fuse_across_> 1) {
    const int k = mode == Mode::kB4 ? 2 : o.streams;
    if (t_.lanes && k < 2)
      throw InvalidArgument(cat(mode_name(mode), ": needs streams >= 2 (lane E and lane D)"));
    if (!(o.alpha >= 0) || !(o.beta >= 0) || !(o.horizon_us >= 0) || !(o.event_us >= 0) ||
        !(o.sla_ms > 0) || std::isnan(o.urgent_slack_ms))
      throw InvalidArgument(cat(mode_name(mode),
                                ": alpha, beta, horizon_us, event_us >= 0, sla_ms > 0 and a "
                                "numeric urgent_slack_ms needed"));
    if (o.fuse_across < 0)
      throw InvalidArgument(cat(mode_name(mode), ": fuse_across ", o.fuse_across, " < 0"));
    if (t_.budget && !(o.rho > 0 && o.rho <= 1))
      throw InvalidArgument(cat(mode_name(mode), ": rho ", o.rho, " outside (0, 1]"));
    lookup_streams_ = mode == Mode::kB4 ? 1 : o.lookup_streams;
    if (t_.lanes && (lookup_streams_ < 1 || lookup_streams_ >= k))
      throw InvalidArgument(cat(mode_name(mode), ": lookup_streams ", lookup_streams_,
                                " must be in [1, streams - 1 = ", k - 1, "]"));
    for (int i = 0; i < k; ++i) streams_.push_back({ex.create_stream()});
    pooled_ = o.tensor_pool && model.device().is_cpu();
    const Graph g = model.graph(model.config().query_size, device_);
    const int n = g.size();
    succ_.resize(n);
    preds_.resize(n);
    lookup_.resize(n);
    for (const auto& node : g.nodes()) {
      preds_[node.id] = node.inputs;
      for (int u : node.inputs) succ_[u].push_back(node.id);
      lookup_[node.id] = is_lookup_kind(node.kind);
    }
    const ExecutorInfo info = ex.info();
    if (t_.budget)
      lookup_limits_.max_units =
          std::max(1, static_cast<int>(std::ceil(o.rho * info.parallel_units)));
    horizon_us_ = o.horizon_us;
    if (horizon_us_ == 0) {  // 0.4 x the median op duration at the model's query size (sweep)
      std::vector<double> c;
      for (const auto& oc : ex.predict_nodes(model, model.config().query_size))
        if (oc.us > 0) c.push_back(oc.us);
      std::sort(c.begin(), c.end());
      horizon_us_ = c.empty() ? 2.0 : 0.4 * c[c.size() / 2];
    }
  }

  // PolicyOptions::fuse_across, 0 resolved by the executor.
  static int fuse_limit(const PolicyOptions& o, const Executor& ex) {
    if (o.fuse_across > 0) return o.fuse_across;
    return ex.info().grouped_launch ? 4 : 1;
  }

  ~OpScheduler() override {
    for (;;) {  // drives a simulated executor; waits on the CPU
      {
        std::lock_guard lk(mu_);
        if (owned_.empty()) return;
      }
      for (const auto& s : streams_) {
        auto e = ex_.create_event();
        ex_.record(*e, s.id);
        e->synchronize();
      }
    }
  }

  std::string name() const override { return mode_name(mode_); }

  nlohmann::json stats() const override {
    std::lock_guard lk(mu_);
    nlohmann::json j = {{"issued_ops", issued_},
                        {"sched_us_per_op", issued_ ? 1e6 * sched_s_ / double(issued_) : 0.0},
                        {"horizon_us", horizon_us_},
                        {"cross_stream_waits", waits_},
                        {"fuse_across", fuse_across_},
                        {"horizontally_fused_ops", fused_}};
    if (pooled_) {
      const StreamPoolStats p = ex_.pool_stats();
      j["tensor_pool"] = {{"peak_in_use_bytes", p.peak_in_use_bytes},
                          {"peak_reserved_bytes", p.peak_reserved_bytes},
                          {"allocations", p.allocations},
                          {"reuses", p.reuses},
                          {"violations", p.violations}};
    }
    return j;
  }

  std::future<Response> submit(std::shared_ptr<const QueryInputs> q,
                               const RequestMeta& meta) override {
    auto r = make_request(std::move(q), meta);
    auto fut = r->promise.get_future();
    std::lock_guard lk(mu_);
    const auto t0 = Clock::now();
    admit_or_wait(make_query(std::move(r)));
    pump();
    sched_s_ += seconds(Clock::now() - t0);
    return fut;
  }

 private:
  struct Query {
    std::shared_ptr<Job> job;
    int64_t seq = 0;
    double deadline_us = 0;  // on the executor clock, relative to its epoch_
    std::vector<OpCost> cost;
    std::vector<double> cp;  // remaining critical path, µs
    std::vector<int> unissued_preds, stream;
    std::vector<std::shared_ptr<Event>> event;
    std::vector<char> finished;
    std::vector<double> finish_us;          // predicted finish (executor clock, µs)
    std::unique_ptr<QueryTensors> tensors;  // pooled intermediate outputs, or null
    int unfinished = 0, d_unissued = 0;
    bool started = false;
  };
  struct Stream {
    int id = 0;             // the executor's stream
    double backlog_us = 0;  // predicted µs of issued, unfinished work
    int mem = 0, comp = 0, outstanding = 0;
    double share_mem = 0, share_comp = 0;  // largest share among its outstanding MEM / COMP ops
  };
  double now_us() const {
    return std::chrono::duration<double, std::micro>(ex_.now() - epoch_).count();
  }

  std::unique_ptr<Query> make_query(std::unique_ptr<Request> r) {
    auto q = std::make_unique<Query>();
    q->job = std::make_shared<Job>();
    q->job->inputs = r->inputs;
    const double sla = r->meta.sla_ms > 0 ? r->meta.sla_ms : opt_.sla_ms;
    q->seq = r->id;
    q->deadline_us =
        std::chrono::duration<double, std::micro>(r->arrival - epoch_).count() + 1e3 * sla;
    q->job->requests.push_back(std::move(r));
    q->job->state = model_.make_state(*q->job->inputs);
    const int n = model_.num_nodes();
    const int64_t rows = q->job->inputs->rows;
    q->cost = cost_table(rows, LaunchLimits{});
    if (t_.budget) {
      const auto& capped = cost_table(rows, lookup_limits_);
      for (int i = 0; i < n; ++i)
        if (lookup_[i]) q->cost[i] = capped[i];
    }
    q->cp.assign(n, 0.0);
    const auto& order = model_.topological_order();
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      double tail = 0;
      for (int w : succ_[*it]) tail = std::max(tail, q->cp[w]);
      q->cp[*it] = q->cost[*it].us + tail;
    }
    q->unissued_preds.resize(n);
    for (int i = 0; i < n; ++i) q->unissued_preds[i] = static_cast<int>(preds_[i].size());
    q->stream.assign(n, -1);
    q->event.resize(n);
    q->finished.assign(n, 0);
    q->finish_us.assign(n, 0.0);
    q->unfinished = n;
    for (int i = 0; i < n; ++i) q->d_unissued += lookup_[i] ? 0 : 1;
    if (pooled_)
      q->tensors = std::make_unique<QueryTensors>(ex_, succ_, output_bytes(rows), q->job->state);
    return q;
  }

  // Output bytes of every node for a query of `rows` rows (from the graph), cached per size.
  const std::vector<size_t>& output_bytes(int64_t rows) {
    auto& slot = out_bytes_[rows];
    if (!slot.empty()) return slot;
    const Graph g = model_.graph(rows, device_);
    for (const auto& node : g.nodes())
      slot.push_back(node.output_shapes.empty()
                         ? 0
                         : sizeof(float) * static_cast<size_t>(node.output_shapes[0].numel()));
    return slot;
  }

  const std::vector<OpCost>& cost_table(int64_t rows, LaunchLimits limits) {
    auto& slot = costs_[{rows, limits.max_units}];
    if (slot.empty()) slot = ex_.predict_nodes(model_, rows, limits);
    return slot;
  }

  // The pipeline gate: a query waits until at most `depth` admitted queries still have D ops to
  // issue (B4 / RACE: the query ahead is in its D phase while this one looks up).
  void admit_or_wait(std::unique_ptr<Query> q) {
    waiting_.insert(WaitKey{t_.slack_order ? q->deadline_us : 0.0, priority(*q), q->seq, q.get()});
    owned_.push_back(std::move(q));
    admit();
  }
  void admit() {
    while (!waiting_.empty() && (!t_.gate || in_d_phase_ == 0)) {
      Query* q = waiting_.begin()->q;
      waiting_.erase(waiting_.begin());
      ++in_d_phase_;
      for (int i = 0; i < model_.num_nodes(); ++i)
        if (q->unissued_preds[i] == 0) push(q, i);
    }
  }
  struct WaitKey {
    double key;
    int64_t priority, seq;
    Query* q;
    bool operator<(const WaitKey& o) const {
      if (key != o.key) return key < o.key;
      if (priority != o.priority) return priority < o.priority;
      return seq < o.seq;
    }
  };

  void push(Query* q, int i) {
    const double d = t_.slack_order ? q->deadline_us : 0.0;
    const double cp = t_.slack_order ? q->cp[i] : 0.0;
    ready_.push({.slack_key = d - cp,
                 .deadline = d,
                 .cp = cp,
                 .priority = priority(*q),
                 .seq = q->seq,
                 .node = i,
                 .item = q});
  }
  int64_t priority(const Query& q) const {
    return t_.slack_order ? q.job->requests[0]->meta.priority : 0;  // FIFO ignores it
  }

  // Issues ready ops while some stream is within the horizon. Holds mu_.
  void pump() {
    while (!ready_.empty()) {
      double min_backlog = std::numeric_limits<double>::infinity();
      for (const auto& s : streams_) min_backlog = std::min(min_backlog, s.backlog_us);
      if (min_backlog > horizon_us_) return;
      const double now = t_.slack_order ? now_us() : 0.0;
      const auto head = ready_.pop(now);
      std::vector<std::pair<Query*, int>> group{{head.item, head.node}};
      if (t_.fuse && lookup_[head.node]) {
        // Phase fusion: the lookups at the top of the queue go out as one launch.
        while (!ready_.empty() && lookup_[ready_.peek(now).node] && group.size() < kMaxFusedOps) {
          const auto e = ready_.pop(now);
          group.emplace_back(e.item, e.node);
        }
      } else if (fuse_across_ > 1) {
        fuse_across(head, now, min_backlog, group);
      }
      issue(group);
    }
  }

  // RecOS's horizontal fusion (spec §2.3 step 3.2): ready instances of the head's graph node in
  // other queries of the same shape bucket join its launch while the fused op's predicted finish
  // stays within every member's slack (now + the emptiest stream's backlog + the group's work <=
  // d - CP). The bucket is the row count rounded up to a power of two: with exact sizes, MLPerf's
  // 20 sizes (100-700) left fusion almost nothing to merge. The executors price a group as its
  // members' summed work (one launch), so members of one bucket need not have equal rows.
  static int64_t shape_bucket(int64_t rows) { return std::bit_ceil(static_cast<uint64_t>(rows)); }

  void fuse_across(const ReadyQueue<Query*>::Entry& head, double now, double backlog,
                   std::vector<std::pair<Query*, int>>& group) {
    const int64_t bucket = shape_bucket(head.item->job->inputs->rows);
    double work = head.item->cost[head.node].us;
    double min_slack = head.slack_key - now - backlog;
    const size_t room = static_cast<size_t>(fuse_across_) - 1;
    for (const auto& e : ready_.take_same_node(head.node, room, [&](const auto& c) {
           const double w = c.item->cost[c.node].us;
           const double slack = std::min(min_slack, c.slack_key - now - backlog);
           if (shape_bucket(c.item->job->inputs->rows) != bucket || work + w > slack) return false;
           work += w;
           min_slack = slack;
           return true;
         }))
      group.emplace_back(e.item, e.node);
    fused_ += group.size() > 1 ? group.size() : 0;
  }

  // Lane of node i: [lo, hi) stream indices.
  std::pair<int, int> lane(int i) const {
    const int k = static_cast<int>(streams_.size());
    if (!t_.lanes) return {0, k};
    return lookup_[i] ? std::pair{0, lookup_streams_} : std::pair{lookup_streams_, k};
  }

  double contention(const OpCost& c, int s) const {
    if (c.cls == CostClass::kTiny) return 0;
    int same = 0, all = 0;
    for (int t = 0; t < static_cast<int>(streams_.size()); ++t) {
      if (t == s) continue;
      same += c.cls == CostClass::kMem ? streams_[t].mem : streams_[t].comp;
      all += streams_[t].outstanding;
    }
    return double(same) / double(std::max(1, all));
  }

  // RACE's pairing rule: placing op i on s lets it run beside the same-class ops outstanding on
  // the other streams; refuse when their shares (each outstanding op at most the op's own share,
  // an upper bound kept per stream) sum over 1.
  bool pairing_violated(const OpCost& c, int s) const {
    if (c.cls == CostClass::kTiny) return false;
    double sum = c.share;
    for (int t = 0; t < static_cast<int>(streams_.size()); ++t)
      if (t != s) sum += c.cls == CostClass::kMem ? streams_[t].share_mem : streams_[t].share_comp;
    return sum > 1.0 + 1e-9;
  }

  int choose_stream(Query& q, int i, double now) {
    const auto [lo, hi] = lane(i);
    const OpCost& c = q.cost[i];
    int best = lo;
    double best_score = std::numeric_limits<double>::infinity();
    bool best_parent = false;
    for (int s = lo; s < hi; ++s) {
      double score;
      if (t_.score) {
        double t_dep = 0;
        int n_x = 0;
        for (int u : preds_[i])
          if (!q.finished[u] && q.stream[u] != s && q.stream[u] >= 0) {
            t_dep = std::max(t_dep, q.finish_us[u] - now);
            ++n_x;
          }
        score = std::max(streams_[s].backlog_us, t_dep) +
                c.us * (1 + opt_.alpha * contention(c, s)) + opt_.beta * n_x * opt_.event_us;
      } else {
        score = streams_[s].backlog_us;
      }
      if (t_.pairing && pairing_violated(c, s)) score += 1e12;  // alpha = infinity
      bool parent = false;
      for (int u : preds_[i]) parent = parent || q.stream[u] == s;
      // Ties: a parent's stream (no event), then the lowest index.
      if (score < best_score || (score == best_score && parent && !best_parent)) {
        best = s;
        best_score = score;
        best_parent = parent;
      }
    }
    return best;
  }

  // Issues one op, or a fused group of lookups (phase fusion) as one launch on the stream chosen
  // for the first member.
  void issue(const std::vector<std::pair<Query*, int>>& group) {
    const double now = now_us();
    Query& q0 = *group.front().first;
    const int i0 = group.front().second;
    const int s = choose_stream(q0, i0, now);
    Stream& st = streams_[s];
    std::vector<OpInstance> ops;
    std::vector<double> preds;
    for (const auto& [q, i] : group) {
      ++issued_;
      if (!q->started && q->cost[i].us > 0) {  // inputs (no work) do not start service
        q->started = true;
        Job* j = q->job.get();
        // Service starts when the first op's stream reaches it (queue time ends).
        ex_.host(st.id, [this, j] { j->start = ex_.now(); });
      }
      for (int u : preds_[i])
        if (!q->finished[u] && q->stream[u] != s) {
          ex_.wait(st.id, *q->event[u]);
          ++waits_;
        }
      if (q->tensors) q->tensors->produce(i, st.id);
      const OpCost& c = q->cost[i];
      preds.push_back(c.us * (1 + (t_.score ? opt_.alpha * contention(c, s) : 0.0)));
      ops.push_back({&model_, i, &q->job->state, q->seq, to_string(c.cls)});
    }
    const LaunchLimits limits = lookup_[i0] ? lookup_limits_ : LaunchLimits{};
    if (ops.size() == 1)
      ex_.launch(st.id, ops.front(), limits);
    else
      ex_.launch_group(st.id, ops, limits);
    auto event = ex_.create_event();
    ex_.record(*event, st.id);
    for (size_t k = 0; k < group.size(); ++k) {
      Query* const q = group[k].first;  // not a structured binding: clang 14 cannot capture one
      const int i = group[k].second;
      const OpCost& c = q->cost[i];
      const double pred = preds[k];
      q->event[i] = event;
      q->stream[i] = s;
      if (q->tensors)
        for (int u : preds_[i]) q->tensors->consumed(u, st.id, event);
      st.backlog_us += pred;
      q->finish_us[i] = now + st.backlog_us;
      ++st.outstanding;
      if (c.cls == CostClass::kMem) ++st.mem, st.share_mem = std::max(st.share_mem, c.share);
      if (c.cls == CostClass::kComp) ++st.comp, st.share_comp = std::max(st.share_comp, c.share);
      ex_.host(st.id, [this, q, i, s, pred] { on_finished(*q, i, s, pred); });
      if (!lookup_[i] && --q->d_unissued == 0) {
        --in_d_phase_;
        admit();
      }
      for (int w : succ_[i])
        if (--q->unissued_preds[w] == 0) push(q, w);
    }
  }

  // The monitor: runs behind op i on its stream when it has finished.
  void on_finished(Query& q, int i, int s, double pred) {
    std::unique_lock lk(mu_);
    const auto t0 = Clock::now();
    Stream& st = streams_[s];
    st.backlog_us = std::max(0.0, st.backlog_us - pred);
    --st.outstanding;
    const CostClass cls = q.cost[i].cls;
    if (cls == CostClass::kMem && --st.mem == 0) st.share_mem = 0;
    if (cls == CostClass::kComp && --st.comp == 0) st.share_comp = 0;
    q.finished[i] = 1;
    std::shared_ptr<Job> done;
    if (--q.unfinished == 0) {
      done = q.job;
      owned_.erase(
          std::find_if(owned_.begin(), owned_.end(), [&](const auto& p) { return p.get() == &q; }));
    }
    pump();
    sched_s_ += seconds(Clock::now() - t0);
    lk.unlock();
    if (done) complete(*done);
  }

  const Mode mode_;
  const ModeTraits t_;
  const PolicyOptions opt_;
  const int fuse_across_;  // horizontal fusion limit (1: off); before ready_, which sizes on it
  const Clock::time_point epoch_ = ex_.now();
  int lookup_streams_ = 1;
  LaunchLimits lookup_limits_;
  double horizon_us_ = 0;
  std::vector<std::vector<int>> succ_, preds_;
  std::vector<char> lookup_;
  mutable std::mutex mu_;
  std::vector<Stream> streams_;
  std::map<std::pair<int64_t, int>, std::vector<OpCost>> costs_;
  std::map<int64_t, std::vector<size_t>> out_bytes_;
  bool pooled_ = false;
  ReadyQueue<Query*> ready_;
  std::set<WaitKey> waiting_;
  std::vector<std::unique_ptr<Query>> owned_;
  int in_d_phase_ = 0;
  int64_t issued_ = 0, waits_ = 0, fused_ = 0;
  double sched_s_ = 0;
};

template <Mode M>
std::unique_ptr<ServingPolicy> make(const RecModel& model, Executor& ex, const PolicyOptions& o) {
  return std::make_unique<OpScheduler>(model, ex, o, M);
}

const Registration kRecos(serving_policies(), "recos", make<Mode::kRecos>);
const Registration kRace(serving_policies(), "race", make<Mode::kRace>);
const Registration kRecosRace(serving_policies(), "recos+race", make<Mode::kRecosRace>);
const Registration kB4(serving_policies(), "b4", make<Mode::kB4>);

}  // namespace
}  // namespace tandem::rec
