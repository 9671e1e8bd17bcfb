// SPDX-License-Identifier: Apache-2.0
// The baseline serving policies over an Executor: fcfs, stream-pool, instances, dynamic-batch.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "recsys/policy_base.h"
#include "tandem/core/error.h"
#include "tandem/recsys/serving.h"
#include "tandem/recsys/sim_executor.h"

namespace tandem::rec {
namespace {

// B1 and B2: queries go straight to a stream.
class StreamPolicy final : public PolicyBase {
 public:
  StreamPolicy(const RecModel& model, Executor& ex, int streams, std::string name)
      : PolicyBase(model, ex), name_(std::move(name)) {
    for (int i = 0; i < streams; ++i) streams_.push_back(ex.create_stream());
    outstanding_.assign(streams_.size(), 0.0);
  }
  ~StreamPolicy() override {
    for (int s : streams_) {
      auto e = ex_.create_event();
      ex_.record(*e, s);
      e->synchronize();
    }
  }
  std::string name() const override { return name_; }

  std::future<Response> submit(std::shared_ptr<const QueryInputs> q,
                               const RequestMeta& meta) override {
    auto r = make_request(std::move(q), meta);
    auto fut = r->promise.get_future();
    auto job = std::make_shared<Job>();
    job->inputs = r->inputs;
    job->predicted_s = predict_s(r->inputs->rows);
    job->requests.push_back(std::move(r));
    std::lock_guard lk(mu_);  // FIFO: issue order = submit order
    const size_t best =
        std::min_element(outstanding_.begin(), outstanding_.end()) - outstanding_.begin();
    outstanding_[best] += job->predicted_s;
    issue(job, streams_[best], [this, best](Job& j) {
      std::lock_guard lk2(mu_);
      outstanding_[best] = std::max(0.0, outstanding_[best] - j.predicted_s);
    });
    return fut;
  }

 private:
  std::string name_;
  std::mutex mu_;
  std::vector<int> streams_;
  std::vector<double> outstanding_;
};

// B3 (instances) and B3 + dynamic batching.
class InstancePolicy final : public PolicyBase {
 public:
  InstancePolicy(const RecModel& model, Executor& ex, const PolicyOptions& o, bool batching)
      : PolicyBase(model, ex), opt_(o), batching_(batching) {
    for (int i = 0; i < o.streams; ++i) {
      streams_.push_back(ex.create_stream());
      free_.push_back(i);
    }
    if (batching_) batcher_ = std::thread([this] { loop(); });
  }
  ~InstancePolicy() override {
    for (int s : streams_) {  // drives a simulated executor; a no-op wait on a drained CPU stream
      auto e = ex_.create_event();
      ex_.record(*e, s);
      e->synchronize();
    }
    if (!batching_) return;
    {
      std::unique_lock lk(mu_);
      stop_ = true;
      cv_.notify_all();
      cv_.wait(lk, [&] { return pending_.empty() && free_.size() == streams_.size(); });
      cv_.notify_all();
    }
    batcher_.join();
  }
  std::string name() const override { return batching_ ? "dynamic-batch" : "instances"; }

  std::future<Response> submit(std::shared_ptr<const QueryInputs> q,
                               const RequestMeta& meta) override {
    auto r = make_request(std::move(q), meta);
    auto fut = r->promise.get_future();
    {
      std::lock_guard lk(mu_);
      pending_.push_back(std::move(r));
      if (!batching_) dispatch();
    }
    cv_.notify_all();
    return fut;
  }

 private:
  // Without batching, requests are issued as they arrive and as instances free up, on the
  // caller's thread (so a simulated executor sees them at once). Holds mu_.
  void dispatch() {
    while (!pending_.empty() && !free_.empty()) {
      auto job = std::make_shared<Job>();
      job->requests.push_back(std::move(pending_.front()));
      pending_.pop_front();
      job->inputs = job->requests.front()->inputs;
      const int inst = free_.front();
      free_.pop_front();
      issue(job, streams_[inst], [this, inst](Job&) { release(inst); });
    }
  }
  void release(int inst) {
    std::lock_guard lk(mu_);  // notify under the lock: the destructor may run right after
    free_.push_back(inst);
    if (!batching_) dispatch();
    cv_.notify_all();
  }

  void loop() {
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] {
        return (stop_ && pending_.empty() && free_.size() == streams_.size()) ||
               (!pending_.empty() && !free_.empty());
      });
      if (pending_.empty()) return;  // stopping, everything done
      // Batch: FIFO requests while the rows fit (at least one request).
      if (batching_) {
        int64_t rows = 0;
        size_t n = 0;
        while (n < pending_.size() &&
               (n == 0 || rows + pending_[n]->inputs->rows <= opt_.max_batch_rows))
          rows += pending_[n++]->inputs->rows;
        const auto deadline =
            pending_.front()->arrival +
            std::chrono::duration_cast<Clock::duration>(
                std::chrono::duration<double, std::micro>(opt_.max_queue_delay_us));
        const bool full = n < pending_.size() || rows >= opt_.max_batch_rows;
        if (!full && !stop_ && ex_.now() < deadline) {
          const size_t before = pending_.size();
          cv_.wait_until(lk, deadline, [&] { return stop_ || pending_.size() != before; });
          continue;  // re-evaluate with the new arrivals or after the delay
        }
      }
      auto job = std::make_shared<Job>();
      int64_t rows = 0;
      while (!pending_.empty() &&
             (job->requests.empty() ||
              (batching_ && rows + pending_.front()->inputs->rows <= opt_.max_batch_rows))) {
        rows += pending_.front()->inputs->rows;
        job->requests.push_back(std::move(pending_.front()));
        pending_.pop_front();
      }
      const int inst = free_.front();
      free_.pop_front();
      lk.unlock();
      if (job->requests.size() == 1) {
        job->inputs = job->requests.front()->inputs;
      } else {
        std::vector<const QueryInputs*> parts;
        for (auto& r : job->requests) parts.push_back(r->inputs.get());
        job->inputs = std::make_shared<QueryInputs>(concat_queries(parts));
      }
      issue(job, streams_[inst], [this, inst](Job&) { release(inst); });
      lk.lock();
    }
  }

  PolicyOptions opt_;
  bool batching_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Request>> pending_;
  std::vector<int> streams_;
  std::deque<int> free_;
  bool stop_ = false;
  std::thread batcher_;
};

std::unique_ptr<ServingPolicy> make_stream_pool(const RecModel& model, Executor& executor,
                                                const PolicyOptions& o) {
  return std::make_unique<StreamPolicy>(model, executor, o.streams, "stream-pool");
}

std::unique_ptr<ServingPolicy> make_dynamic_batch(const RecModel& model, Executor& executor,
                                                  const PolicyOptions& o) {
  if (dynamic_cast<SimExecutor*>(&executor))
    throw Unsupported(
        "dynamic-batch: its batching delay runs on a wall-clock thread, not on SimExecutor's "
        "simulated clock");
  if (o.max_batch_rows < 1 || !(o.max_queue_delay_us >= 0))
    throw InvalidArgument("dynamic-batch: max_batch_rows >= 1 and max_queue_delay_us >= 0 needed");
  return std::make_unique<InstancePolicy>(model, executor, o, true);
}

const Registration kFcfs(serving_policies(), "fcfs",
                         [](const RecModel& model, Executor& executor, const PolicyOptions&) {
                           return std::make_unique<StreamPolicy>(model, executor, 1, "fcfs");
                         });
const Registration kStreamPool(serving_policies(), "stream-pool", make_stream_pool);
const Registration kInstances(serving_policies(), "instances",
                              [](const RecModel& model, Executor& executor,
                                 const PolicyOptions& o) {
                                return std::make_unique<InstancePolicy>(model, executor, o, false);
                              });
const Registration kDynamicBatch(serving_policies(), "dynamic-batch", make_dynamic_batch);

}  // namespace

Registry<PolicyFactory>& serving_policies() {
  static Registry<PolicyFactory> registry("serving policy");
  return registry;
}

std::vector<std::string> policy_names() { return serving_policies().names(); }

std::unique_ptr<ServingPolicy> make_policy(const RecModel& model, Executor& executor,
                                           const PolicyOptions& o) {
  if (o.streams < 1)
    throw InvalidArgument(cat("policy '", o.policy, "': streams ", o.streams, " < 1"));
  o.admission.validate();  // before the policy takes any stream
  auto policy = serving_policies().get(o.policy)(model, executor, o);
  if (!o.admission.enabled()) return policy;
  return with_admission(std::move(policy), model, executor, o.admission, o.streams);
}

}  // namespace tandem::rec
