// SPDX-License-Identifier: Apache-2.0
// Closed- and open-loop load generation over a ServingPolicy, and its statistics.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "recsys/load_recorder.h"
#include "tandem/core/error.h"
#include "tandem/recsys/serving.h"
#include "tandem/recsys/workload.h"

namespace tandem::rec {

Percentiles percentiles_ms(std::vector<double> s) {
  Percentiles p;
  if (s.empty()) return p;
  std::sort(s.begin(), s.end());
  auto at = [&](double q) {  // nearest rank
    const size_t i = static_cast<size_t>(std::ceil(q * double(s.size()))) - 1;
    return 1e3 * s[std::min(i, s.size() - 1)];
  };
  double sum = 0;
  for (double v : s) sum += v;
  p.mean = 1e3 * sum / double(s.size());
  p.p50 = at(0.50);
  p.p95 = at(0.95);
  p.p99 = at(0.99);
  p.max = 1e3 * s.back();
  return p;
}

nlohmann::json LoadStats::to_json() const {
  auto pj = [](const Percentiles& p) {
    return nlohmann::json{
        {"mean", p.mean}, {"p50", p.p50}, {"p95", p.p95}, {"p99", p.p99}, {"max", p.max}};
  };
  return {{"policy", policy},
          {"clients", clients},
          {"rate_qps", rate_qps},
          {"completed", completed},
          {"errors", errors},
          {"dropped", dropped},
          {"late", late},
          {"rejected", rejected},
          {"timed_out", timed_out},
          {"measured_s", measured_s},
          {"throughput_qps", throughput_qps},
          {"rows_per_s", rows_per_s},
          {"latency_ms", pj(latency_ms)},
          {"queue_ms", pj(queue_ms)},
          {"service_ms", pj(service_ms)},
          {"mean_batch_rows", mean_batch_rows}};
}

void check_load_options(const std::vector<std::shared_ptr<const QueryInputs>>& pool,
                        const LoadOptions& o) {
  if (pool.empty()) throw InvalidArgument("run_load: empty query pool");
  if (o.clients < 1 && o.rate_qps <= 0) throw InvalidArgument("run_load: clients must be >= 1");
  if (!(o.duration_s > 0)) throw InvalidArgument("run_load: duration must be positive");
  if (!(o.rate_qps >= 0 && o.rate_qps <= kMaxOpenLoopRateQps))
    throw InvalidArgument(
        cat("run_load: rate ", o.rate_qps, " queries/s is outside [0, ", kMaxOpenLoopRateQps, "]"));
  if (o.max_outstanding < 1) throw InvalidArgument("run_load: max_outstanding must be >= 1");
  if (!(o.reject_backoff_s > 0 && o.reject_backoff_s <= 3600))
    throw InvalidArgument(
        cat("run_load: reject_backoff_s ", o.reject_backoff_s, " is outside (0, 3600]"));
  if (o.priorities < 1) throw InvalidArgument(cat("run_load: priorities ", o.priorities, " < 1"));
}

LoadStats run_load(ServingPolicy& policy,
                   const std::vector<std::shared_ptr<const QueryInputs>>& pool,
                   const LoadOptions& o) {
  check_load_options(pool, o);
  LoadRecorder rec;
  int64_t dropped = 0, late = 0;
  const auto t0 = Clock::now();
  const auto measure_from =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.warmup_s));
  const auto stop_at = measure_from + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(o.duration_s));
  // Returns false when the admission layer rejected the query.
  auto record = [&](size_t index, std::future<Response>& fut) {
    try {
      Response r = fut.get();
      if (o.on_response) o.on_response(index, r);
      rec.add(r, Clock::now() >= measure_from);
    } catch (...) {
      return !rec.add_failure(std::current_exception());
    }
    return true;
  };
  if (o.rate_qps > 0) {
    // Open loop: one thread submits at Poisson times; futures are collected in order.
    std::mutex qmu;
    std::condition_variable qcv;
    std::deque<std::pair<size_t, std::future<Response>>> inflight;
    std::atomic<int64_t> outstanding{0};  // submitted and not yet recorded
    bool done = false;
    std::thread collector([&] {
      for (;;) {
        std::unique_lock lk(qmu);
        qcv.wait(lk, [&] { return done || !inflight.empty(); });
        if (inflight.empty()) return;
        auto item = std::move(inflight.front());
        inflight.pop_front();
        lk.unlock();
        record(item.first, item.second);
        --outstanding;
      }
    });
    PoissonArrivals arrivals(o.rate_qps, o.seed);
    auto next = Clock::now();
    for (size_t k = 0;; ++k) {
      next += std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(arrivals.next_gap_s()));
      if (next >= stop_at) break;
      std::this_thread::sleep_until(next);
      if (Clock::now() - next > std::chrono::duration<double>(kLateArrivalS)) ++late;
      if (outstanding.load() >= o.max_outstanding) {
        ++dropped;
        continue;
      }
      ++outstanding;
      const size_t index = k % pool.size();
      auto fut = policy.submit(pool[index], load_meta(o, index));
      std::lock_guard lk(qmu);
      inflight.emplace_back(index, std::move(fut));
      qcv.notify_one();
    }
    {
      std::lock_guard lk(qmu);
      done = true;
    }
    qcv.notify_one();
    collector.join();
  } else {
    std::vector<std::thread> clients;
    for (int c = 0; c < o.clients; ++c)
      clients.emplace_back([&, c] {
        for (size_t k = 0; Clock::now() < stop_at; ++k) {
          const size_t index = (k * size_t(o.clients) + size_t(c)) % pool.size();
          auto fut = policy.submit(pool[index], load_meta(o, index));
          if (!record(index, fut))
            std::this_thread::sleep_for(std::chrono::duration<double>(o.reject_backoff_s));
        }
      });
    for (auto& t : clients) t.join();
  }
  const double measured_s =
      std::chrono::duration<double>(std::max(Clock::now(), stop_at) - measure_from).count();
  return rec.finish(policy.name(), o.clients, o.rate_qps, measured_s, dropped, late);
}

}  // namespace tandem::rec
