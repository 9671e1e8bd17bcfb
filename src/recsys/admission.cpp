// SPDX-License-Identifier: Apache-2.0
// The admission layer (admission.h): a priority queue with back-pressure and timeouts in front of
// any ServingPolicy.
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

#include "recsys/policy_base.h"
#include "tandem/recsys/admission.h"
#include "tandem/recsys/serving.h"

namespace tandem::rec {

TimeoutAction parse_timeout_action(const std::string& s) {
  if (s == "reject") return TimeoutAction::kReject;
  if (s == "delay") return TimeoutAction::kDelay;
  throw InvalidArgument(cat("timeout_action '", s, "': expected reject or delay"));
}

const char* to_string(TimeoutAction a) { return a == TimeoutAction::kReject ? "reject" : "delay"; }

void AdmissionOptions::validate() const {
  if (priority_levels < 0)
    throw InvalidArgument(cat("admission: priority_levels ", priority_levels, " < 0"));
  if (max_queue_size < 0)
    throw InvalidArgument(cat("admission: max_queue_size ", max_queue_size, " < 0"));
  if (!(default_timeout_us >= 0) || !std::isfinite(default_timeout_us))
    throw InvalidArgument(
        cat("admission: default_timeout_us ", default_timeout_us, " is not a finite number >= 0"));
  if (max_in_flight < 0)
    throw InvalidArgument(cat("admission: max_in_flight ", max_in_flight, " < 0"));
}

namespace {

class AdmissionPolicy final : public ServingPolicy {
 public:
  AdmissionPolicy(std::unique_ptr<ServingPolicy> inner, const RecModel& model, Executor& ex,
                  const AdmissionOptions& o, int streams)
      : inner_(std::move(inner)),
        model_(model),
        ex_(ex),
        o_(o),
        max_in_flight_(o.max_in_flight > 0 ? o.max_in_flight : streams),
        queue_(size_t(std::max<int64_t>(1, o.priority_levels))),
        delayed_(queue_.size()) {}

  ~AdmissionPolicy() override {
    // Drain: queued requests are dispatched by completions, which the executor's progress makes.
    for (;;) {
      {
        std::lock_guard lk(mu_);
        if (queued_ == 0 && in_flight_ == 0) break;
      }
      ex_.synchronize();  // drives a simulated executor; waits on the CPU one
      std::unique_lock lk(mu_);
      cv_.wait_for(lk, std::chrono::milliseconds(1),
                   [&] { return queued_ == 0 && in_flight_ == 0; });
    }
  }

  std::string name() const override { return inner_->name(); }

  nlohmann::json stats() const override {
    nlohmann::json j = inner_->stats();
    std::lock_guard lk(mu_);
    j["admission"] = {{"admitted", admitted_},
                      {"rejected_queue_full", rejected_full_},
                      {"rejected_timeout", rejected_timeout_},
                      {"delayed", delayed_count_},
                      {"max_queued", max_queued_}};
    return j;
  }

  std::future<Response> submit(std::shared_ptr<const QueryInputs> q,
                               const RequestMeta& meta) override {
    check(q, meta);
    auto e = std::make_shared<Entry>();
    e->query = std::move(q);
    e->meta = meta;
    e->meta.on_done = nullptr;
    e->caller_done = meta.on_done;
    e->arrival = ex_.now();
    const double timeout_us = meta.timeout_us > 0 ? meta.timeout_us : o_.default_timeout_us;
    e->deadline = timeout_us > 0
                      ? e->arrival + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double, std::micro>(timeout_us))
                      : Clock::time_point::max();
    auto fut = e->promise.get_future();
    std::vector<std::shared_ptr<Entry>> go;
    {
      std::lock_guard lk(mu_);
      expire(e->arrival);
      const bool must_wait = in_flight_ >= max_in_flight_ || queued_ > 0;
      if (must_wait && o_.max_queue_size > 0 && queued_ >= o_.max_queue_size) {
        ++rejected_full_;
        ready_.push_back({e,
                          {},
                          std::make_exception_ptr(Rejected(
                              Rejected::Reason::kQueueFull,
                              cat("model '", model_.config().name, "': queue full (max_queue_size ",
                                  o_.max_queue_size, "), request rejected")))});
      } else {
        ++admitted_;
        e->seq = next_seq_++;
        queue_[level(meta)].push_back(e);
        ++queued_;
        max_queued_ = std::max(max_queued_, queued_);
        go = take_dispatchable();
      }
    }
    answer_ready();
    dispatch(go);
    return fut;
  }

 private:
  struct Entry {
    int64_t seq = 0;
    std::shared_ptr<const QueryInputs> query;
    RequestMeta meta;
    Completion caller_done;
    Clock::time_point arrival, deadline, handed;
    std::promise<Response> promise;
  };
  // A finished request waiting for its turn under preserve_ordering.
  struct Outcome {
    std::shared_ptr<Entry> entry;
    Response response;
    std::exception_ptr error;
  };

  size_t level(const RequestMeta& m) const {
    return o_.priority_levels > 0 ? size_t(m.priority - 1) : 0;
  }

  void check(const std::shared_ptr<const QueryInputs>& q, const RequestMeta& m) const {
    if (!q) throw InvalidArgument("submit: null query");
    if (m.priority < 1 || (o_.priority_levels > 0 && m.priority > o_.priority_levels))
      throw InvalidArgument(cat("submit: priority ", m.priority, " outside [1, ",
                                std::max<int64_t>(1, o_.priority_levels), "] of model '",
                                model_.config().name, "'"));
    if (!(m.timeout_us >= 0) || !std::isfinite(m.timeout_us))
      throw InvalidArgument(cat("submit: timeout_us ", m.timeout_us, " is not a number >= 0"));
    model_.validate(*q);
  }

  // Requests whose queue time is up: REJECT answers them, DELAY moves them behind their level.
  // Holds mu_.
  void expire(Clock::time_point now) {
    for (size_t l = 0; l < queue_.size(); ++l) {
      auto& q = queue_[l];
      for (auto it = q.begin(); it != q.end();) {
        if ((*it)->deadline > now) {
          ++it;
          continue;
        }
        auto e = *it;
        it = q.erase(it);
        if (o_.timeout_action == TimeoutAction::kDelay) {
          ++delayed_count_;
          delayed_[l].push_back(std::move(e));
          continue;
        }
        --queued_;
        ++rejected_timeout_;
        const double waited_us =
            std::chrono::duration<double, std::micro>(now - e->arrival).count();
        finish({e,
                {},
                std::make_exception_ptr(Rejected(
                    Rejected::Reason::kTimeout,
                    cat("model '", model_.config().name, "': request timed out after ", waited_us,
                        " us in the queue (timeout_action reject), not run")))});
      }
    }
  }

  // The requests to hand the policy now, by level, delayed ones after their level's. Holds mu_.
  std::vector<std::shared_ptr<Entry>> take_dispatchable() {
    std::vector<std::shared_ptr<Entry>> go;
    for (size_t l = 0; l < queue_.size() && in_flight_ < max_in_flight_; ++l)
      for (auto* q : {&queue_[l], &delayed_[l]})
        while (!q->empty() && in_flight_ < max_in_flight_) {
          go.push_back(std::move(q->front()));
          q->pop_front();
          --queued_;
          ++in_flight_;
        }
    return go;
  }

  // Hands the requests to the policy, outside mu_ (the policy may complete one on this thread).
  void dispatch(const std::vector<std::shared_ptr<Entry>>& go) {
    for (const auto& e : go) {
      RequestMeta m = e->meta;
      m.on_done = [this, e](const Response* r, std::exception_ptr err) { on_done(e, r, err); };
      e->handed = ex_.now();
      try {
        inner_->submit(e->query, m);
      } catch (...) {  // the policy refused it: answer it and free its place
        on_done(e, nullptr, std::current_exception());
      }
    }
  }

  void on_done(const std::shared_ptr<Entry>& e, const Response* r, std::exception_ptr err) {
    Outcome out{e, {}, err};
    if (r) {
      out.response = *r;
      const double waited = seconds(e->handed - e->arrival);
      out.response.id = e->seq;
      out.response.queue_s += waited;
      out.response.latency_s += waited;
    }
    std::vector<std::shared_ptr<Entry>> go;
    {
      std::lock_guard lk(mu_);
      --in_flight_;
      finish(std::move(out));
      expire(ex_.now());
      go = take_dispatchable();
      cv_.notify_all();
    }
    answer_ready();
    dispatch(go);
  }

  // Makes a request ready to answer, or holds it until the earlier ones are (preserve_ordering).
  // Holds mu_.
  void finish(Outcome out) {
    if (!o_.preserve_ordering) return ready_.push_back(std::move(out));
    held_.emplace(out.entry->seq, std::move(out));
    for (auto it = held_.begin(); it != held_.end() && it->first == next_answer_;
         it = held_.erase(it), ++next_answer_)
      ready_.push_back(std::move(it->second));
  }

  // Answers the ready requests in order, outside mu_ (a caller's on_done may submit again).
  void answer_ready() {
    std::vector<Outcome> ready;
    {
      std::lock_guard lk(mu_);
      ready.swap(ready_);
    }
    for (Outcome& out : ready) {
      Entry& e = *out.entry;
      if (e.caller_done) e.caller_done(out.error ? nullptr : &out.response, out.error);
      if (out.error)
        e.promise.set_exception(out.error);
      else
        e.promise.set_value(std::move(out.response));
    }
  }

  std::unique_ptr<ServingPolicy> inner_;
  const RecModel& model_;
  Executor& ex_;
  const AdmissionOptions o_;
  const int64_t max_in_flight_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::deque<std::shared_ptr<Entry>>> queue_, delayed_;  // per priority level
  std::map<int64_t, Outcome> held_;                                  // preserve_ordering
  std::vector<Outcome> ready_;                                       // to answer
  int64_t queued_ = 0, in_flight_ = 0, next_seq_ = 0, next_answer_ = 0;
  int64_t admitted_ = 0, rejected_full_ = 0, rejected_timeout_ = 0, delayed_count_ = 0,
          max_queued_ = 0;
};

}  // namespace

std::unique_ptr<ServingPolicy> with_admission(std::unique_ptr<ServingPolicy> inner,
                                              const RecModel& model, Executor& executor,
                                              const AdmissionOptions& options, int streams) {
  if (!inner) throw InvalidArgument("with_admission: no policy");
  options.validate();
  if (streams < 1) throw InvalidArgument(cat("with_admission: streams ", streams, " < 1"));
  return std::make_unique<AdmissionPolicy>(std::move(inner), model, executor, options, streams);
}

}  // namespace tandem::rec
