// SPDX-License-Identifier: Apache-2.0
// What every serving policy shares (policies.cpp, op_scheduler.cpp): requests, jobs (one launch of
// one or several merged requests) and PolicyBase, which validates and times requests on the
// executor's clock, predicts a query's cost, issues a whole job on one stream and completes it.
#pragma once

#include <atomic>
#include <map>
#include <mutex>

#include "tandem/core/error.h"
#include "tandem/recsys/serving.h"

namespace tandem::rec {

inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Request {
  int64_t id = 0;
  RequestMeta meta;
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
  using ServingPolicy::submit;
  PolicyBase(const RecModel& model, Executor& ex)
      : model_(model), ex_(ex), device_(ex.info().device) {
    const Graph g = model.graph(model.config().query_size, device_);
    for (const auto& n : g.nodes())
      category_.push_back(n.attrs.at("cost_class").get<std::string>());
  }

 protected:
  std::unique_ptr<Request> make_request(std::shared_ptr<const QueryInputs> q,
                                        const RequestMeta& meta) {
    if (meta.priority < 1 || !(meta.sla_ms >= 0))
      throw InvalidArgument(
          cat("submit: priority ", meta.priority, " < 1 or sla_ms ", meta.sla_ms, " < 0"));
    if (!q) throw InvalidArgument("submit: null query");
    model_.validate(*q);
    auto r = std::make_unique<Request>();
    r->id = next_id_.fetch_add(1);
    r->meta = meta;
    r->inputs = std::move(q);
    r->arrival = ex_.now();
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
    ex_.host(stream, [this, j] { j->start = ex_.now(); });
    const int64_t qid = job->requests.front()->id;
    for (int id : model_.topological_order())
      ex_.launch(stream, {&model_, id, &j->state, qid, category_[id].c_str()});
    ex_.host(stream, [this, job, done = std::move(done)] {
      complete(*job);
      if (done) done(*job);
    });
  }

  void complete(Job& job) {
    const auto end = ex_.now();
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
        if (r->meta.on_complete) {
          Response failed;
          failed.id = r->id;
          r->meta.on_complete(failed, err);
        }
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
      if (r->meta.on_complete) r->meta.on_complete(resp, nullptr);
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

}  // namespace tandem::rec
