// SPDX-License-Identifier: Apache-2.0
// run_sim_load (sim_executor.h): closed- and open-loop load in simulated time.
#include <list>

#include "recsys/load_recorder.h"
#include "tandem/core/error.h"
#include "tandem/recsys/sim_executor.h"
#include "tandem/recsys/workload.h"

namespace tandem::rec {

LoadStats run_sim_load(ServingPolicy& policy, SimExecutor& ex,
                       const std::vector<std::shared_ptr<const QueryInputs>>& pool,
                       const LoadOptions& o) {
  check_load_options(pool, o);
  LoadRecorder rec;
  const double t0 = ex.now_us();
  const double measure_from = t0 + 1e6 * o.warmup_s, stop_at = measure_from + 1e6 * o.duration_s;
  struct Pending {
    int client;
    size_t k, index;
    std::future<Response> fut;
  };
  std::list<Pending> pending;  // submit order
  int64_t dropped = 0;
  int backing_off = 0;  // closed-loop clients pausing after a rejection
  auto submit = [&](int client, size_t k, size_t index) {
    pending.push_back({client, k, index, policy.submit(pool[index], load_meta(o, index))});
  };
  if (o.rate_qps > 0) {
    // Poisson arrivals as simulator timers; each arrival schedules the next.
    auto arrivals = std::make_shared<PoissonArrivals>(o.rate_qps, o.seed);
    auto k = std::make_shared<size_t>(0);
    auto arrive = std::make_shared<std::function<void()>>();
    *arrive = [&, arrivals, k, arrive] {
      if (ex.now_us() >= stop_at) return;
      if (static_cast<int64_t>(pending.size()) >= o.max_outstanding)
        ++dropped;
      else
        submit(0, *k, *k % pool.size());
      ++*k;
      ex.at(ex.now_us() + 1e6 * arrivals->next_gap_s(), *arrive);
    };
    ex.at(t0 + 1e6 * arrivals->next_gap_s(), *arrive);
  } else {
    for (int c = 0; c < o.clients; ++c) submit(c, 0, size_t(c) % pool.size());
  }
  auto ready = [&] {
    for (auto& p : pending)
      if (p.fut.wait_for(std::chrono::seconds(0)) == std::future_status::ready) return true;
    return false;
  };
  while (!pending.empty() || backing_off > 0 || (o.rate_qps > 0 && ex.now_us() < stop_at)) {
    if (!ex.run_until(ready)) {
      if (pending.empty()) continue;  // the next arrival or back-off timer fires in run_until
      throw Infeasible(cat("run_sim_load: ", pending.size(), " queries of policy '", policy.name(),
                           "' never complete"));
    }
    for (auto it = pending.begin(); it != pending.end();) {
      if (it->fut.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        ++it;
        continue;
      }
      bool rejected = false;
      try {
        Response r = it->fut.get();
        if (o.on_response) o.on_response(it->index, r);
        rec.add(r, ex.now_us() >= measure_from);
      } catch (...) {
        rejected = rec.add_failure(std::current_exception());
      }
      if (o.rate_qps <= 0 && ex.now_us() < stop_at) {
        const int client = it->client;
        const size_t k = it->k + 1, index = (k * size_t(o.clients) + size_t(client)) % pool.size();
        if (!rejected) {
          submit(client, k, index);
        } else {  // a rejection is immediate: the client pauses before its next query
          ++backing_off;
          ex.at(ex.now_us() + 1e6 * o.reject_backoff_s, [&, client, k, index] {
            --backing_off;
            submit(client, k, index);
          });
        }
      }
      it = pending.erase(it);
    }
  }
  const double measured_s = 1e-6 * (std::max(ex.now_us(), stop_at) - measure_from);
  return rec.finish(policy.name(), o.clients, o.rate_qps, measured_s, dropped, 0);
}

}  // namespace tandem::rec
