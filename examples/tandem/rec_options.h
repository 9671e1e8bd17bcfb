// SPDX-License-Identifier: Apache-2.0
// Options the recsys commands share (rec-serve, rec-tune): the query-size distribution of the
// workload kit (tandem/recsys/workload.h), bound to the caller's fields, and applied to a workload;
// --sim-timing-only and the simulator options it sets; and the latency-bounded throughput search on
// a simulated device.
//
//   add_query_size_options(sub, o->query_size, o->size_dist, o->size_sd, o->size_quantiles);
//   set_query_sizes(w.size, o.size_dist, o.size_sd, o.size_quantiles);
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "tandem/core/error.h"
#include "tandem/recsys/serving.h"
#include "tandem/recsys/sim_executor.h"
#include "tandem/recsys/workload.h"

namespace tandem::cli {

// --query-size (rows per query, 0 = the model's), --size-dist, --size-sd and --size-quantiles.
inline void add_query_size_options(CLI::App* sub, int64_t& query_size, std::string& size_dist,
                                   double& size_sd, std::string& size_quantiles) {
  sub->add_option("--query-size", query_size, "Candidate rows per query (0 = the model's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  sub->add_option("--size-dist", size_dist, "Query sizes: fixed, normal, lognormal, uniform")
      ->check(CLI::IsMember({"fixed", "normal", "lognormal", "uniform"}))
      ->capture_default_str();
  sub->add_option("--size-sd", size_sd, "normal: sd of the size; lognormal: sd of its log")
      ->check(number_in(0.0, 1e6))
      ->capture_default_str();
  sub->add_option("--size-quantiles", size_quantiles,
                  "File of equally likely query sizes in MLPerf DLRM's format "
                  "(bench/recsys/mlperf_dist_quantile.txt: its 100-700); overrides --size-dist")
      ->check(CLI::ExistingFile);
}

// The distribution those options name (the quantile file read here, ParseError naming its line).
inline void set_query_sizes(rec::QuerySizeOptions& s, const std::string& size_dist, double size_sd,
                            const std::string& size_quantiles) {
  s.dist = rec::parse_size_dist(size_dist);
  s.stddev = size_sd;
  if (!size_quantiles.empty()) rec::use_size_quantiles(s, rec::read_size_quantiles(size_quantiles));
}

// --sim-timing-only: SimOptions::compute = false (ops timed, not computed).
inline void add_sim_timing_only_option(CLI::App* sub, bool& timing_only) {
  sub->add_flag("--sim-timing-only", timing_only,
                "sim: advance each op's simulated time without computing it: the same schedule "
                "and latencies, meaningless scores (for sweeps, tuning and --ltp)");
}

// The simulator's options for --device `device`; InvalidArgument for --sim-timing-only on a device
// that is not simulated (there every op is computed: that is the measurement).
inline rec::SimOptions sim_options(const std::string& device, uint64_t seed, double jitter,
                                   bool timing_only) {
  if (timing_only && device.rfind("sim:", 0) != 0)
    throw InvalidArgument("--sim-timing-only needs a simulated device (--device sim:...), not '" +
                          device + "'");
  return {.seed = seed, .jitter = jitter, .compute = !timing_only};
}

// The load of --clients / --rate / --duration / --warmup / --seed (and --max-outstanding).
inline rec::LoadOptions load_options(int clients, double rate_qps, double duration_s,
                                     double warmup_s, uint64_t seed,
                                     int64_t max_outstanding = rec::LoadOptions{}.max_outstanding) {
  rec::LoadOptions lo;
  lo.clients = clients;
  lo.rate_qps = rate_qps;
  lo.duration_s = duration_s;
  lo.warmup_s = warmup_s;
  lo.seed = seed;
  lo.max_outstanding = max_outstanding;
  return lo;
}

// Highest Poisson rate (queries/s) whose p99 stays within sla_ms, by bisection on a simulated
// device (each probe a fresh executor and a fresh policy from `make`, so probes do not disturb each
// other): {qps, sla_ms, p99_ms_at_qps}.
inline nlohmann::json latency_bounded_throughput(
    const std::function<std::unique_ptr<rec::ServingPolicy>(rec::SimExecutor&)>& make,
    const rec::SimDevice& dev, const rec::SimOptions& so, double sla_ms,
    const std::vector<std::shared_ptr<const rec::QueryInputs>>& pool,
    const rec::LoadOptions& base) {
  auto p99_at = [&](double rate) {
    rec::SimExecutor ex(dev, so);
    auto policy = make(ex);
    rec::LoadOptions lo = base;
    lo.rate_qps = rate;
    const rec::LoadStats s = run_sim_load(*policy, ex, pool, lo);
    return s.dropped > 0 || s.rejected > 0 || s.timed_out > 0 || s.completed == 0
               ? 1e30
               : s.latency_ms.p99;
  };
  // p99_lo: the measured p99 at lo (each probe is a whole simulated run: never repeated).
  double lo = 0, hi = 100, p99_lo = 0;
  auto probe = [&](double rate) {
    const double p = p99_at(rate);
    if (p <= sla_ms) lo = rate, p99_lo = p;
    return p <= sla_ms;
  };
  while (hi < 1e7 && probe(hi)) hi *= 4;
  for (int i = 0; i < 12 && hi - lo > 0.01 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (!probe(mid)) hi = mid;
  }
  return {{"qps", lo}, {"sla_ms", sla_ms}, {"p99_ms_at_qps", p99_lo}};
}

}  // namespace tandem::cli
