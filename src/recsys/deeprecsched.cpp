// SPDX-License-Identifier: Apache-2.0
// DeepRecSched (deeprecsched.h): the split/offload policy, the rate search of one configuration
// and the hill climbing over configurations.
#include "tandem/recsys/deeprecsched.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>

#include "recsys/policy_base.h"
#include "tandem/core/error.h"
#include "tandem/recsys/workload.h"

namespace tandem::rec {

std::string SplitOffload::name() const {
  std::string s;
  if (sub_batch > 0) s = cat("b=", sub_batch);
  if (offload_threshold > 0) s += cat(s.empty() ? "" : " ", "theta=", offload_threshold);
  return s.empty() ? "static" : s;
}

namespace {

class SplitOffloadPolicy final : public ServingPolicy {
 public:
  SplitOffloadPolicy(const RecModel& model, Executor& clock, std::unique_ptr<ServingPolicy> cpu,
                     std::unique_ptr<ServingPolicy> accel, const SplitOffload& c)
      : model_(model), clock_(clock), cpu_(std::move(cpu)), accel_(std::move(accel)), c_(c) {}

  std::string name() const override { return "split-offload " + c_.name(); }

  nlohmann::json stats() const override {
    nlohmann::json j = {{"queries", queries_.load()},
                        {"offloaded", offloaded_.load()},
                        {"cpu_queries", queries_.load() - offloaded_.load()},
                        {"sub_requests", sub_requests_.load()},
                        {"cpu", cpu_->stats()}};
    if (accel_) j["accelerator"] = accel_->stats();
    return j;
  }

  std::future<Response> submit(std::shared_ptr<const QueryInputs> q,
                               const RequestMeta& meta) override {
    if (!q) throw InvalidArgument("submit: null query");
    model_.validate(*q);
    auto st = std::make_shared<Stitch>();
    st->id = queries_.fetch_add(1);
    st->arrival = clock_.now();
    st->caller_done = meta.on_done;
    st->scores.resize(size_t(q->rows));
    auto fut = st->promise.get_future();
    const bool offload = accel_ && c_.offload_threshold > 0 && q->rows >= c_.offload_threshold;
    const int64_t b = offload || c_.sub_batch <= 0 ? q->rows : c_.sub_batch;
    st->remaining = static_cast<int>((q->rows + b - 1) / b);
    if (offload) ++offloaded_;
    sub_requests_ += st->remaining;
    ServingPolicy& to = offload ? *accel_ : *cpu_;
    for (int64_t begin = 0; begin < q->rows; begin += b) {
      const int64_t end = std::min(q->rows, begin + b);
      auto part =
          st->remaining == 1 ? q : std::make_shared<QueryInputs>(slice_query(*q, begin, end));
      RequestMeta m = meta;
      m.on_done = [this, st, begin](const Response* r, std::exception_ptr err) {
        part_done(*st, begin, r, err);
      };
      to.submit(std::move(part), m);
    }
    return fut;
  }

 private:
  // One query's parts, stitched back as they finish.
  struct Stitch {
    std::mutex mu;
    int64_t id = 0;
    Clock::time_point arrival;
    Completion caller_done;
    std::promise<Response> promise;
    std::vector<float> scores;
    int remaining = 0;
    double queue_s = 1e300;
    int64_t batch_rows = 0;
    std::exception_ptr error;
  };

  void part_done(Stitch& st, int64_t begin, const Response* r, std::exception_ptr err) {
    {
      std::lock_guard lk(st.mu);
      if (r) {
        std::copy(r->scores.begin(), r->scores.end(), st.scores.begin() + begin);
        st.queue_s = std::min(st.queue_s, r->queue_s);
        st.batch_rows = std::max(st.batch_rows, r->batch_rows);
      } else if (!st.error) {
        st.error = err;
      }
      if (--st.remaining > 0) return;
    }
    if (st.error) {
      if (st.caller_done) st.caller_done(nullptr, st.error);
      st.promise.set_exception(st.error);
      return;
    }
    Response resp;
    resp.id = st.id;
    resp.scores = std::move(st.scores);
    resp.latency_s = seconds(clock_.now() - st.arrival);
    resp.queue_s = std::min(st.queue_s, resp.latency_s);
    resp.service_s = resp.latency_s - resp.queue_s;
    resp.batch_rows = st.batch_rows;
    if (st.caller_done) st.caller_done(&resp, nullptr);
    st.promise.set_value(std::move(resp));
  }

  const RecModel& model_;
  Executor& clock_;
  std::unique_ptr<ServingPolicy> cpu_, accel_;
  const SplitOffload c_;
  std::atomic<int64_t> queries_{0}, offloaded_{0}, sub_requests_{0};
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::unique_ptr<ServingPolicy> make_split_offload(const RecModel& model, Executor& cpu,
                                                  const PolicyOptions& cpu_policy, Executor* accel,
                                                  const PolicyOptions& accel_policy,
                                                  const SplitOffload& c) {
  if (c.sub_batch < 0)
    throw InvalidArgument(cat("split/offload: sub-batch b* ", c.sub_batch, " < 1 (0: no split)"));
  if (c.offload_threshold < 0)
    throw InvalidArgument(cat("split/offload: offload threshold ", c.offload_threshold, " < 0"));
  if (c.offload_threshold > 0 && !accel)
    throw InvalidArgument(
        cat("split/offload: offload threshold ", c.offload_threshold, " without an accelerator"));
  auto on_cpu = make_policy(model, cpu, cpu_policy);
  auto on_accel = accel ? make_policy(model, *accel, accel_policy) : nullptr;
  return std::make_unique<SplitOffloadPolicy>(model, cpu, std::move(on_cpu), std::move(on_accel),
                                              c);
}

void HillClimbOptions::validate() const {
  auto positive = [](bool ok, const char* field, double v) {
    if (!ok) throw InvalidArgument(cat("deeprecsched: ", field, " ", v, " must be positive"));
  };
  positive(target_p95_ms > 0 && std::isfinite(target_p95_ms), "target_p95_ms", target_p95_ms);
  if (!(stable_region >= 0 && std::isfinite(stable_region)))
    throw InvalidArgument(cat("deeprecsched: stable_region ", stable_region, " < 0"));
  positive(req_granularity >= 1, "req_granularity", req_granularity);
  positive(sched_timeout >= 1, "sched_timeout", sched_timeout);
  positive(arr_steps >= 1, "arr_steps", arr_steps);
  positive(start_qps > 0 && start_qps <= kMaxOpenLoopRateQps, "start_qps", start_qps);
  positive(max_outstanding >= 1, "max_outstanding", double(max_outstanding));
  for (int64_t b : batch_configs)
    if (b < 1) throw InvalidArgument(cat("deeprecsched: batch config b* ", b, " < 1"));
  for (int64_t t : thresholds)
    if (t < 1) throw InvalidArgument(cat("deeprecsched: threshold ", t, " < 1"));
}

nlohmann::json AchievableQps::to_json() const {
  return {{"qps", qps},       {"responses", responses}, {"dropped", dropped},
          {"errors", errors}, {"rates", rates},         {"p95_ms", p95_ms}};
}

AchievableQps achievable_qps(ServingPolicy& policy, SimExecutor& ex,
                             const std::vector<std::shared_ptr<const QueryInputs>>& pool,
                             const HillClimbOptions& o, double start_qps) {
  o.validate();
  if (pool.empty()) throw InvalidArgument("achievable_qps: empty query pool");
  if (!(start_qps > 0)) throw InvalidArgument(cat("achievable_qps: start rate ", start_qps));
  AchievableQps out;
  int step = 0;  // the rate is start_qps * 10^(step / arr_steps), at most kMaxOpenLoopRateQps
  auto rate = [&] {
    return std::min(kMaxOpenLoopRateQps, start_qps * std::pow(10.0, double(step) / o.arr_steps));
  };
  std::vector<double> window;
  int64_t outstanding = 0;
  bool stopped = false;
  auto on_done = [&](const Response* r, std::exception_ptr) {
    --outstanding;
    if (!r) {
      ++out.errors;
      return;
    }
    ++out.responses;
    if (stopped) return;
    window.push_back(r->latency_s);
    if (static_cast<int>(window.size()) < o.req_granularity) return;
    const double p95 = percentiles_ms(std::move(window)).p95;
    window.clear();
    out.rates.push_back(rate());
    out.p95_ms.push_back(p95);
    if (p95 < o.target_p95_ms / (1 + o.stable_region) && rate() < kMaxOpenLoopRateQps)
      ++step;
    else if (p95 > o.target_p95_ms)
      --step;
    stopped = static_cast<int>(out.rates.size()) >= o.sched_timeout;
  };
  PoissonArrivals gaps(1.0, o.seed);  // unit-rate gaps, scaled by the current rate
  size_t k = 0;
  std::function<void()> arrive = [&] {
    if (stopped) return;
    if (outstanding >= o.max_outstanding) {
      ++out.dropped;
    } else {
      ++outstanding;
      RequestMeta m;
      m.on_done = on_done;
      policy.submit(pool[k++ % pool.size()], m);
    }
    ex.at(ex.now_us() + 1e6 * gaps.next_gap_s() / rate(), arrive);
  };
  ex.at(ex.now_us() + 1e6 * gaps.next_gap_s() / rate(), arrive);
  ex.run_until([&] { return stopped; });
  ex.run_until_idle();  // the queries still in flight
  const size_t n = std::min(out.rates.size(), size_t(o.arr_steps));
  if (n > 0) out.qps = median(std::vector<double>(out.rates.end() - long(n), out.rates.end()));
  return out;
}

nlohmann::json DeepRecSchedTuning::to_json() const {
  nlohmann::json j = {{"configs", nlohmann::json::array()},
                      {"static", tried.front().config.name()},
                      {"static_qps", tried.front().result.qps},
                      {"tuned", tried[best].config.name()},
                      {"tuned_qps", tried[best].result.qps},
                      {"tuned_sub_batch", tried[best].config.sub_batch},
                      {"tuned_offload_threshold", tried[best].config.offload_threshold}};
  for (const auto& t : tried) {
    nlohmann::json c = t.result.to_json();
    c["config"] = t.config.name();
    c["sub_batch"] = t.config.sub_batch;
    c["offload_threshold"] = t.config.offload_threshold;
    j["configs"].push_back(std::move(c));
  }
  return j;
}

DeepRecSchedTuning tune_deeprecsched(const ConfigRunner& run, const HillClimbOptions& o,
                                     bool with_accelerator) {
  o.validate();
  DeepRecSchedTuning t;
  auto measure = [&](const SplitOffload& c) {
    const double start = t.tried.empty() ? o.start_qps : t.tried.back().result.qps;
    t.tried.push_back({c, run(c, start > 0 ? start : o.start_qps)});
    if (t.tried.back().result.qps > t.tried[t.best].result.qps) t.best = t.tried.size() - 1;
    return t.tried.back().result.qps;
  };
  // Each sequence climbs from the best configuration so far while a configuration does at least
  // as well as its predecessor.
  auto climb = [&](const std::vector<SplitOffload>& seq) {
    double prev = t.tried[t.best].result.qps;
    for (const SplitOffload& c : seq) {
      const double q = measure(c);
      if (q < prev) break;
      prev = q;
    }
  };
  measure({});  // B6: no split, no offload
  std::vector<SplitOffload> batches;
  for (int64_t b : o.batch_configs) batches.push_back({.sub_batch = b});
  climb(batches);
  if (with_accelerator) {
    const int64_t b_star = t.tried[t.best].config.sub_batch;
    std::vector<SplitOffload> offloads;
    for (int64_t th : o.thresholds)
      offloads.push_back({.sub_batch = b_star, .offload_threshold = th});
    climb(offloads);
  }
  return t;
}

}  // namespace tandem::rec
