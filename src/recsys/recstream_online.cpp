// SPDX-License-Identifier: Apache-2.0
// RecStream online (recstream_online.h): one inner policy per stream configuration, a sliding
// window of the load, decisions by the RecStream predictor or by hill climbing over K, and
// switches at a quiescent point with the old configuration drained through on_done.
#include "tandem/recsys/recstream_online.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>

#include "recsys/policy_base.h"
#include "tandem/core/error.h"
#include "tandem/recsys/sim_executor.h"

namespace tandem::rec {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kNone = size_t(-1);
constexpr int kMaxK = 16;  // the largest K of stream_config_space()

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nullptr; }

// The executor kind and device class a weight file must name to fit `ex` ("sim" and the simulated
// device's name, "cpu" (any class: this tree names no CPU classes), or "device").
std::pair<std::string, std::string> executor_class(const Executor& ex) {
  if (const auto* sim = dynamic_cast<const SimExecutor*>(&ex)) return {"sim", sim->device().name};
  if (dynamic_cast<const CpuExecutor*>(&ex)) return {"cpu", ""};
  return {"device", ""};
}

struct Slot {
  StreamConfig config;
  std::unique_ptr<ServingPolicy> policy;
  int64_t in_flight = 0, submitted = 0, completed = 0;
};

struct SwitchRecord {
  double t_s = 0;
  std::string from, to, reason;  // reason: forced, recstream, hill-probe, hill-settle
  double predicted_gain = kNaN, predicted_from_ms = kNaN, predicted_to_ms = kNaN;
  double measured_from_ms = kNaN;  // window p99 of `from` before the switch
  double measured_to_ms = kNaN;    // window p99 of `to` at the next decision
  int64_t drained = 0;             // queries of `from` in flight at the switch, drained there
  double drain_s = kNaN;           // until the last of them finished
  nlohmann::json to_json() const {
    nlohmann::json j = {{"t_s", t_s},
                        {"from", from},
                        {"to", to},
                        {"reason", reason},
                        {"predicted_gain", number_or_null(predicted_gain)},
                        {"predicted_from_p99_ms", number_or_null(predicted_from_ms)},
                        {"predicted_to_p99_ms", number_or_null(predicted_to_ms)},
                        {"measured_from_p99_ms", number_or_null(measured_from_ms)},
                        {"measured_to_p99_ms", number_or_null(measured_to_ms)},
                        {"drained", drained},
                        {"drain_s", number_or_null(drain_s)}};
    if (std::isfinite(predicted_to_ms) && std::isfinite(measured_to_ms))
      j["predicted_to_error"] = predicted_to_ms / measured_to_ms - 1;
    return j;
  }
};

// What a decision sees of the window.
struct Snapshot {
  LoadShape load;
  size_t current = 0;
  int64_t epoch = 0;
  double p99_ms = kNaN;  // the current configuration since the last switch, in the window
};

struct Decision {
  size_t to = kNone;
  SwitchRecord record;
};

// Hill climbing over K (B5 b) with the scheduler kept.
struct HillState {
  bool climbing = false, tried_down = false;
  int dir = 1;
  size_t base = kNone, best = kNone, probe = kNone;
  double best_p99 = kNaN;
  std::vector<double> z;  // the load the climb started at
};

bool moved(const std::vector<double>& from, const std::vector<double>& to, double threshold) {
  if (from.size() != to.size()) return true;
  for (size_t i = 0; i < to.size(); ++i)
    if (std::abs(to[i] - from[i]) > threshold) return true;
  return false;
}

class OnlinePolicy final : public RecStreamOnlinePolicy {
 public:
  OnlinePolicy(const RecModel& model, Executor& ex, const RecStreamOnlineOptions& o)
      : model_(model), ex_(ex), o_(o), t0_(ex.now()), last_decision_(t0_) {
    o_.base.admission = {};  // an admission layer goes in front of this policy, not per config
    current_ = slot_of(parse_stream_config(o_.initial));
    if (!o_.weights.empty()) load_weights(o_.weights);
  }

  ~OnlinePolicy() override {
    // Each inner policy waits for its queries, whose on_done still counts them here.
    for (auto& s : slots_) s->policy.reset();
  }

  std::string name() const override { return "recstream-online"; }

  std::string current_config() const override {
    std::lock_guard lk(mu_);
    return slots_[current_]->config.name();
  }

  std::future<Response> submit(std::shared_ptr<const QueryInputs> q,
                               const RequestMeta& meta) override {
    if (!q) throw InvalidArgument("submit: null query");
    model_.validate(*q);
    maybe_decide();
    auto e = std::make_shared<Entry>();
    e->caller_done = meta.on_done;
    auto fut = e->promise.get_future();
    Slot* slot = nullptr;
    const Clock::time_point now = ex_.now();  // not under mu_: SimExecutor's lock comes first
    {
      std::lock_guard lk(mu_);
      slot = slots_[current_].get();
      e->slot = current_;
      e->epoch = epoch_;
      e->seq = next_seq_++;
      ++slot->in_flight, ++slot->submitted, ++in_flight_;
      arrivals_.push_back({now, q->rows, in_flight_});
      prune(now);
    }
    RequestMeta m = meta;
    m.on_done = [this, e](const Response* r, std::exception_ptr err) { on_done(*e, r, err); };
    try {
      slot->policy->submit(std::move(q), m);
    } catch (...) {  // refused at once: never counted as answered
      const Clock::time_point then = ex_.now();
      std::lock_guard lk(mu_);
      --slot->in_flight, --in_flight_;
      end_drain_if_done(e->slot, then);
      throw;
    }
    return fut;
  }

  void force_switch(const std::string& config) override {
    const size_t to = slot_of(parse_stream_config(config));
    const Clock::time_point now = ex_.now();
    std::lock_guard lk(mu_);
    pending_ = to;
    apply_pending(now);
  }

  void load_weights(const std::string& path) override {
    auto w = std::make_shared<const RecStreamWeights>(load_recstream_weights(path));
    const auto [kind, cls] = executor_class(ex_);
    const bool fits = w->executor == kind && (kind != "sim" || w->device_class == cls);
    std::lock_guard dk(decide_mu_);
    std::lock_guard lk(mu_);
    weights_ = fits ? w : nullptr;
    weights_path_ = path;
    mode_reason_ =
        fits ? cat("weights for ", w->executor, "/", w->device_class)
             : cat("weights for ", w->executor, "/", w->device_class, " do not fit this executor (",
                   kind, cls.empty() ? "" : "/", cls, "): hill climbing");
    last_z_.clear();
    hill_ = {};
  }

  nlohmann::json stats() const override {
    nlohmann::json per = nlohmann::json::object(), configs = nlohmann::json::array(),
                   switches = nlohmann::json::array();
    std::lock_guard lk(mu_);
    for (const auto& s : slots_) {
      configs.push_back({{"config", s->config.name()},
                         {"submitted", s->submitted},
                         {"completed", s->completed},
                         {"in_flight", s->in_flight}});
      per[s->config.name()] = s->policy ? s->policy->stats() : nlohmann::json::object();
    }
    for (const auto& r : switches_) switches.push_back(r.to_json());
    auto name_of = [&](size_t i) -> nlohmann::json {
      return i == kNone ? nlohmann::json(nullptr) : nlohmann::json(slots_[i]->config.name());
    };
    return {{"online",
             {{"mode", weights_ ? "recstream" : "hill"},
              {"mode_reason", mode_reason_},
              {"weights", weights_path_},
              {"current", slots_[current_]->config.name()},
              {"draining", name_of(draining_)},
              {"pending", name_of(pending_.value_or(kNone))},
              {"window_s", o_.window_s},
              {"period_s", o_.period_s},
              {"min_gain", o_.min_gain},
              {"predictions", predictions_},
              {"last_prediction", last_prediction_},
              {"decision_errors", decision_errors_},
              {"configs", configs},
              {"switches", switches}}},
            {"per_config", per}};
  }

 private:
  struct Entry {
    size_t slot = 0;
    int64_t epoch = 0, seq = 0;
    Completion caller_done;
    std::promise<Response> promise;
  };
  struct Arrival {
    Clock::time_point t;
    int64_t rows, in_flight;
  };
  struct Answer {
    Clock::time_point t;
    double latency_s;
    size_t slot;
    int64_t epoch;
  };

  double since_start_s(Clock::time_point t) const { return seconds(t - t0_); }

  // The slot of `c`, its policy made on first use (outside mu_: it may create streams).
  size_t slot_of(const StreamConfig& c) {
    std::lock_guard ck(create_mu_);
    {
      std::lock_guard lk(mu_);
      for (size_t i = 0; i < slots_.size(); ++i)
        if (slots_[i]->config.name() == c.name()) return i;
    }
    auto slot = std::make_unique<Slot>();
    slot->config = c;
    slot->policy = make_policy(model_, ex_, c.apply(o_.base));
    std::lock_guard lk(mu_);
    slots_.push_back(std::move(slot));
    return slots_.size() - 1;
  }

  void on_done(Entry& e, const Response* r, std::exception_ptr err) {
    Response resp;
    if (r) {
      resp = *r;
      resp.id = e.seq;  // each inner policy numbers its own requests
    }
    const Clock::time_point now = ex_.now();
    {
      std::lock_guard lk(mu_);
      Slot& s = *slots_[e.slot];
      --s.in_flight, ++s.completed, --in_flight_;
      if (r) answers_.push_back({now, r->latency_s, e.slot, e.epoch});
      end_drain_if_done(e.slot, now);
      prune(now);
    }
    if (e.caller_done) e.caller_done(r ? &resp : nullptr, err);
    if (err)
      e.promise.set_exception(err);
    else
      e.promise.set_value(std::move(resp));
  }

  // Holds mu_.
  void prune(Clock::time_point now) {
    const auto from = now - std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(o_.window_s));
    while (!arrivals_.empty() && arrivals_.front().t < from) arrivals_.pop_front();
    while (!answers_.empty() && answers_.front().t < from) answers_.pop_front();
  }

  // Switches now: later submits go to `to`; the old configuration drains. Holds mu_.
  void switch_locked(size_t to, SwitchRecord rec, Clock::time_point now) {
    rec.t_s = since_start_s(now);
    rec.from = slots_[current_]->config.name();
    rec.to = slots_[to]->config.name();
    rec.drained = slots_[current_]->in_flight;
    if (rec.drained > 0) {
      draining_ = current_;
      drain_record_ = switches_.size();
    } else {
      rec.drain_s = 0;
    }
    switches_.push_back(std::move(rec));
    current_ = to;
    ++epoch_;
  }

  // A forced switch, when no old configuration is draining. Holds mu_.
  void apply_pending(Clock::time_point now) {
    if (!pending_ || draining_ != kNone) return;
    const size_t to = *pending_;
    pending_.reset();
    if (to == current_) return;
    SwitchRecord rec;
    rec.reason = "forced";
    switch_locked(to, std::move(rec), now);
  }

  // Holds mu_.
  void end_drain_if_done(size_t slot, Clock::time_point now) {
    if (slot != draining_ || slots_[slot]->in_flight > 0) return;
    SwitchRecord& rec = switches_[drain_record_];
    rec.drain_s = since_start_s(now) - rec.t_s;
    draining_ = kNone;
    apply_pending(now);
  }

  // The window's load shape and the current configuration's p99; fills the last switch's
  // measurement of its new configuration. Holds mu_.
  Snapshot snapshot(Clock::time_point now) {
    Snapshot s;
    s.current = current_;
    s.epoch = epoch_;
    std::vector<double> lat, rows;
    double in_flight = 0;
    for (const Arrival& a : arrivals_) {
      rows.push_back(double(a.rows));
      in_flight += double(a.in_flight);
    }
    for (const Answer& a : answers_)
      if (a.slot == current_ && a.epoch == epoch_) lat.push_back(a.latency_s);
    if (int64_t(lat.size()) >= o_.min_window_queries) s.p99_ms = percentiles_ms(lat).p99;
    const double n = double(std::max<size_t>(1, rows.size()));
    s.load.clients = std::max(1.0, in_flight / n);
    if (o_.open_loop)
      s.load.rate_qps =
          double(arrivals_.size()) / std::max(1e-6, std::min(o_.window_s, since_start_s(now)));
    set_row_stats(s.load, std::move(rows));
    if (!switches_.empty() && switches_.back().to == slots_[current_]->config.name() &&
        !std::isfinite(switches_.back().measured_to_ms))
      switches_.back().measured_to_ms = s.p99_ms;
    return s;
  }

  // Every period, one thread at a time, never while a switch is draining or waiting.
  void maybe_decide() {
    std::unique_lock dk(decide_mu_, std::try_to_lock);
    if (!dk.owns_lock()) return;
    Snapshot snap;
    const Clock::time_point now = ex_.now();
    {
      std::lock_guard lk(mu_);
      if (draining_ != kNone || pending_ || seconds(now - last_decision_) < o_.period_s) return;
      prune(now);
      if (int64_t(arrivals_.size()) < o_.min_window_queries) return;
      last_decision_ = now;
      snap = snapshot(now);
    }
    Decision d;
    try {
      d = weights_ ? decide_by_weights(snap) : decide_by_hill(snap);
    } catch (const std::exception& e) {  // the server keeps serving in its configuration
      std::lock_guard lk(mu_);
      decision_errors_.push_back(e.what());
      return;
    }
    const Clock::time_point then = ex_.now();
    std::lock_guard lk(mu_);
    if (d.to == kNone || d.to == current_ || draining_ != kNone || pending_ || epoch_ != snap.epoch)
      return;
    switch_locked(d.to, std::move(d.record), then);
  }

  // Holds decide_mu_.
  Decision decide_by_weights(const Snapshot& snap) {
    const std::vector<double> z = load_features(model_.config(), snap.load);
    if (!last_z_.empty() && !moved(last_z_, z, o_.z_threshold)) return {};
    last_z_ = z;
    const RecStreamWeights& w = *weights_;
    const RecStreamPrediction p = recstream_predict(w, recstream_inputs(model_, ex_, snap.load));
    const std::string current = [&] {
      std::lock_guard lk(mu_);
      return slots_[snap.current]->config.name();
    }();
    int cur = -1;
    nlohmann::json per = nlohmann::json::object();
    for (size_t c = 0; c < w.configs.size(); ++c) {
      per[w.configs[c].name()] = p.p99_ms(int(c));
      if (w.configs[c].name() == current) cur = int(c);
    }
    {
      std::lock_guard lk(mu_);
      ++predictions_;
      last_prediction_ = {
          {"z", z},
          {"current", current},
          {"best", w.configs[size_t(p.best)].name()},
          {"predicted_current_p99_ms", number_or_null(cur >= 0 ? p.p99_ms(cur) : kNaN)},
          {"measured_current_p99_ms", number_or_null(snap.p99_ms)},
          {"predicted_p99_ms_per_config", per}};
      if (cur >= 0 && std::isfinite(snap.p99_ms))
        last_prediction_["current_error"] = p.p99_ms(cur) / snap.p99_ms - 1;
    }
    // Unpredicted current configuration (forced outside the weights' list): any best is a gain.
    const double gain =
        cur >= 0 ? std::exp(p.log_p99_ms[size_t(cur)] - p.log_p99_ms[size_t(p.best)]) - 1 : kNaN;
    if (cur >= 0 && !(gain > o_.min_gain)) return {};
    Decision d;
    d.to = slot_of(w.configs[size_t(p.best)]);
    d.record.reason = "recstream";
    d.record.predicted_gain = gain;
    d.record.predicted_from_ms = cur >= 0 ? p.p99_ms(cur) : kNaN;
    d.record.predicted_to_ms = p.p99_ms(p.best);
    d.record.measured_from_ms = snap.p99_ms;
    return d;
  }

  // The configuration of the same scheduler with K x 2^dir, or kNone outside 1..16. Holds
  // decide_mu_.
  size_t neighbour(size_t slot, int dir) {
    StreamConfig c = [&] {
      std::lock_guard lk(mu_);
      return slots_[slot]->config;
    }();
    c.streams = dir > 0 ? c.streams * 2 : c.streams / 2;
    if (c.streams < 1 || c.streams > kMaxK) return kNone;
    return slot_of(c);
  }

  Decision probe(size_t to, const char* reason, double measured_from_ms) {
    Decision d;
    d.to = to;
    d.record.reason = reason;
    d.record.measured_from_ms = measured_from_ms;
    return d;
  }

  // Holds decide_mu_.
  Decision decide_by_hill(const Snapshot& snap) {
    if (!std::isfinite(snap.p99_ms)) return {};  // too few answers since the last switch
    const std::vector<double> z = load_features(model_.config(), snap.load);
    HillState& h = hill_;
    const bool restart =
        h.z.empty() || moved(h.z, z, o_.z_threshold) || (h.climbing && snap.current != h.probe);
    if (restart) {
      h = {};
      h.climbing = true;
      h.z = z;
      h.base = h.best = snap.current;
      h.best_p99 = snap.p99_ms;
      h.probe = neighbour(snap.current, 1);
      if (h.probe == kNone) h.dir = -1, h.tried_down = true, h.probe = neighbour(snap.current, -1);
      if (h.probe != kNone) return probe(h.probe, "hill-probe", snap.p99_ms);
      h.climbing = false;  // a scheduler with one K only
      return {};
    }
    if (!h.climbing) return {};
    if (snap.p99_ms < h.best_p99 * (1 - o_.min_gain)) {
      h.best = snap.current;
      h.best_p99 = snap.p99_ms;
      h.probe = neighbour(snap.current, h.dir);
      if (h.probe != kNone) return probe(h.probe, "hill-probe", snap.p99_ms);
    } else if (h.dir > 0 && !h.tried_down && h.best == h.base) {
      h.dir = -1;
      h.tried_down = true;
      h.probe = neighbour(h.base, -1);
      if (h.probe != kNone) return probe(h.probe, "hill-probe", snap.p99_ms);
    }
    h.climbing = false;
    return probe(h.best, "hill-settle", snap.p99_ms);
  }

  const RecModel& model_;
  Executor& ex_;
  RecStreamOnlineOptions o_;
  const Clock::time_point t0_;
  // Lock order: decide_mu_, create_mu_, mu_ (never the reverse).
  std::mutex decide_mu_;  // one decision at a time; weights_, last_z_, hill_
  std::mutex create_mu_;  // one policy made at a time
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Slot>> slots_;
  size_t current_ = 0, draining_ = kNone, drain_record_ = 0;
  std::optional<size_t> pending_;
  int64_t epoch_ = 0, next_seq_ = 0, in_flight_ = 0, predictions_ = 0;
  std::deque<Arrival> arrivals_;
  std::deque<Answer> answers_;
  std::vector<SwitchRecord> switches_;
  Clock::time_point last_decision_;
  std::shared_ptr<const RecStreamWeights> weights_;
  std::string weights_path_, mode_reason_ = "no weight file: hill climbing";
  std::vector<double> last_z_;
  HillState hill_;
  nlohmann::json last_prediction_ = nullptr;
  std::vector<std::string> decision_errors_;
};

}  // namespace

std::unique_ptr<RecStreamOnlinePolicy> make_recstream_online(const RecModel& model,
                                                             Executor& executor,
                                                             const RecStreamOnlineOptions& o) {
  auto positive = [](const char* field, double v) {
    if (!(v > 0) || !std::isfinite(v))
      throw InvalidArgument(cat("recstream-online: ", field, " ", v, " is not a number > 0"));
  };
  positive("window_s", o.window_s);
  positive("period_s", o.period_s);
  if (!(o.min_gain >= 0) || !std::isfinite(o.min_gain))
    throw InvalidArgument(cat("recstream-online: min_gain ", o.min_gain, " is not a number >= 0"));
  if (!(o.z_threshold >= 0) || !std::isfinite(o.z_threshold))
    throw InvalidArgument(
        cat("recstream-online: z_threshold ", o.z_threshold, " is not a number >= 0"));
  if (o.min_window_queries < 1)
    throw InvalidArgument(
        cat("recstream-online: min_window_queries ", o.min_window_queries, " < 1"));
  parse_stream_config(o.initial);  // InvalidArgument naming it, before any stream is made
  return std::make_unique<OnlinePolicy>(model, executor, o);
}

}  // namespace tandem::rec
