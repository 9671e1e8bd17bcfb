// SPDX-License-Identifier: Apache-2.0
// The baseline serving policies over an Executor: fcfs, stream-pool, instances, dynamic-batch.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "tandem/core/error.h"
#include "tandem/recsys/serving.h"

namespace tandem::rec {
namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Request {
  int64_t id = 0;
  std::shared_ptr<const QueryInputs> inputs;
  Clock::time_point arrival;
  std::promise<Response> promise;
};

// One launch: one request, or several merged row-wise.
struct Job {
  std::vector<std::unique_ptr<Request>> requests;
  std::shared_ptr<const QueryInputs> inputs;  // merged when batched
  QueryState state;
  Clock::time_point start;
  double predicted_s = 0;
  int stream = 0;
};

class PolicyBase : public ServingPolicy {
 public:
  PolicyBase(const RecModel& model, Executor& ex)
      : model_(model), ex_(ex), device_(ex.info().device) {
    const Graph g = model.graph(model.config().query_size, device_);
    for (const auto& n : g.nodes())
      category_.push_back(n.attrs.at("cost_class").get<std::string>());
  }

 protected:
  std::unique_ptr<Request> make_request(std::shared_ptr<const QueryInputs> q) {
    if (!q) throw InvalidArgument("submit: null query");
    model_.validate(*q);
    auto r = std::make_unique<Request>();
    r->id = next_id_.fetch_add(1);
    r->inputs = std::move(q);
    r->arrival = Clock::now();
    return r;
  }

  // Predicted seconds of a query of q rows on the executor's device (the roofline sum over its
  // nodes), cached per q.
  double predict_s(int64_t q) {
    std::lock_guard lk(cost_mu_);
    auto it = cost_.find(q);
    if (it != cost_.end()) return it->second;
    return cost_[q] = RooflineCostModel().predict_graph_s(model_.graph(q, device_), device_);
  }

  // Issues every op of the job on `stream`, then its completion; `done` runs after completion.
  void issue(std::shared_ptr<Job> job, int stream, std::function<void(Job&)> done) {
    job->stream = stream;
    job->state = model_.make_state(*job->inputs);
    Job* j = job.get();
    ex_.host(stream, [j] { j->start = Clock::now(); });
    const int64_t qid = job->requests.front()->id;
    for (int id : model_.topological_order())
      ex_.launch(stream, {&model_, id, &j->state, qid, category_[id].c_str()});
    ex_.host(stream, [this, job, done = std::move(done)] {
      complete(*job);
      if (done) done(*job);
    });
  }

  void complete(Job& job) {
    const auto end = Clock::now();
    std::vector<float> scores;
    std::exception_ptr err = job.state.error;
    if (!err) {
      try {
        scores = model_.scores(job.state);
      } catch (...) {
        err = std::current_exception();
      }
    }
    job.state.values.clear();  // release activations now
    int64_t row = 0;
    for (auto& r : job.requests) {
      if (err) {
        r->promise.set_exception(err);
        continue;
      }
      Response resp;
      resp.id = r->id;
      resp.scores.assign(scores.begin() + row, scores.begin() + row + r->inputs->rows);
      row += r->inputs->rows;
      resp.queue_s = seconds(job.start - r->arrival);
      resp.service_s = seconds(end - job.start);
      resp.latency_s = seconds(end - r->arrival);
      resp.batch_rows = job.inputs->rows;
      r->promise.set_value(std::move(resp));
    }
  }

  const RecModel& model_;
  Executor& ex_;
  const DeviceProfile device_;  // the executor's, prices the nodes
  std::vector<std::string> category_;
  std::atomic<int64_t> next_id_{0};
  std::mutex cost_mu_;
  std::map<int64_t, double> cost_;
};

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

  std::future<Response> submit(std::shared_ptr<const QueryInputs> q) override {
    auto r = make_request(std::move(q));
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
    batcher_ = std::thread([this] { loop(); });
  }
  ~InstancePolicy() override {
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

  std::future<Response> submit(std::shared_ptr<const QueryInputs> q) override {
    auto r = make_request(std::move(q));
    auto fut = r->promise.get_future();
    {
      std::lock_guard lk(mu_);
      pending_.push_back(std::move(r));
    }
    cv_.notify_all();
    return fut;
  }

 private:
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
        if (!full && !stop_ && Clock::now() < deadline) {
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
      issue(job, streams_[inst], [this, inst](Job&) {
        std::lock_guard lk2(mu_);  // notify under the lock: the destructor may run right after
        free_.push_back(inst);
        cv_.notify_all();
      });
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
  return serving_policies().get(o.policy)(model, executor, o);
}

}  // namespace tandem::rec
