// SPDX-License-Identifier: Apache-2.0
// LoadRecorder: collects the responses of a load run (wall-clock run_load in load.cpp, simulated
// run_sim_load in sim_load.cpp) and turns them into LoadStats.
#pragma once

#include <mutex>
#include <vector>

#include "tandem/recsys/serving.h"

namespace tandem::rec {

class LoadRecorder {
 public:
  // Records a response that arrived at `now` (counted only when now >= measure_from).
  void add(const Response& r, bool measured) {
    if (!measured) return;
    std::lock_guard lk(mu_);
    lat_.push_back(r.latency_s);
    queue_.push_back(r.queue_s);
    service_.push_back(r.service_s);
    batch_rows_ += double(r.batch_rows);
    rows_ += static_cast<int64_t>(r.scores.size());
  }
  // A failed request: the admission layer's rejections (queue full, timed out) are counted apart
  // from errors. Returns true for a rejection.
  bool add_failure(std::exception_ptr error) {
    std::lock_guard lk(mu_);
    try {
      std::rethrow_exception(error);
    } catch (const Rejected& r) {
      ++(r.reason() == Rejected::Reason::kTimeout ? timed_out_ : rejected_);
      return true;
    } catch (...) {
      ++errors_;
    }
    return false;
  }
  LoadStats finish(const std::string& policy, int clients, double rate_qps, double measured_s,
                   int64_t dropped, int64_t late) {
    std::lock_guard lk(mu_);
    LoadStats s;
    s.policy = policy;
    s.clients = rate_qps > 0 ? 0 : clients;
    s.rate_qps = rate_qps;
    s.completed = static_cast<int64_t>(lat_.size());
    s.errors = errors_;
    s.rejected = rejected_;
    s.timed_out = timed_out_;
    s.dropped = dropped;
    s.late = late;
    s.measured_s = measured_s;
    s.throughput_qps = double(s.completed) / s.measured_s;
    s.rows_per_s = double(rows_) / s.measured_s;
    s.latency_ms = percentiles_ms(lat_);
    s.queue_ms = percentiles_ms(queue_);
    s.service_ms = percentiles_ms(service_);
    s.mean_batch_rows = s.completed ? batch_rows_ / double(s.completed) : 0;
    return s;
  }

 private:
  std::mutex mu_;
  std::vector<double> lat_, queue_, service_;
  double batch_rows_ = 0;
  int64_t rows_ = 0, errors_ = 0, rejected_ = 0, timed_out_ = 0;
};

// The request of the query at pool[index]: priority 1 + index mod options.priorities.
inline RequestMeta load_meta(const LoadOptions& o, size_t index) {
  RequestMeta m;
  m.priority = 1 + static_cast<int64_t>(index % static_cast<size_t>(o.priorities));
  return m;
}

// The checks run_load and run_sim_load share (InvalidArgument naming the field).
void check_load_options(const std::vector<std::shared_ptr<const QueryInputs>>& pool,
                        const LoadOptions& o);

}  // namespace tandem::rec
