// SPDX-License-Identifier: Apache-2.0
// `tandem rec-serve`: serve a recommendation model from the zoo to concurrent clients under one of
// the serving policies (the baselines, or the op-level recos / race / recos+race / b4) and report
// latency percentiles, throughput and queue times; optionally write a Chrome-trace JSON of every
// op. --device sim:h100 (sim:h200, sim:a100, sim:cpu) runs on the simulated GPU (SimExecutor):
// scores are real, times simulated (--duration and --warmup are simulated seconds then), and
// --ltp searches the latency-bounded throughput (highest Poisson rate with p99 <= --sla-ms).
//
//   tandem rec-serve --model rm2 --clients 16 --duration 5 --policy stream-pool -o json
//   tandem rec-serve --model din --rate 50 --policy dynamic-batch --trace din.trace.json
//   tandem rec-serve --model rm2 --device cuda:0 --clients 8 --policy stream-pool
//   tandem rec-serve --model bst --device sim:h100 --clients 32 --duration 0.2 --policy recos
//   tandem rec-serve --model rm2 --device sim:h100 --load-phases 8:1,64:1 \
//       --recstream configs/recsys/recstream/sim-h100.json
//   tandem rec-serve --model rm2 --device sim:h100 --sim-timing-only --gpu-cache-mib 64 \
//       --gpu-cache-tau 0.9 --gpu-cache-prefetch
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <string>

#include "commands.h"
#include "rec_options.h"
#include "rec_pipeline.h"
#include "report.h"
#include "tandem/core/allocator.h"
#include "tandem/core/backend.h"
#include "tandem/core/build_info.h"
#include "tandem/core/error.h"
#include "tandem/recsys/early_touch.h"
#include "tandem/recsys/recstream_online.h"
#include "tandem/recsys/serving.h"
#include "tandem/recsys/sim_executor.h"
#include "tandem/recsys/workload.h"

namespace tandem::cli {
namespace {

constexpr int kMaxPool = 1 << 16;  // distinct queries held in memory at once

// A number in (0, hi]; refuses nan (CLI::PositiveNumber & number_in would print both ranges).
CLI::Validator positive_up_to(double hi) {
  char range[64];
  std::snprintf(range, sizeof range, "(0, %g]", hi);
  const std::string r = range;
  return CLI::Validator(
      [hi, r](std::string& s) {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v) || !(v > 0 && v <= hi))
          return "Value " + s + " not in " + r;
        return std::string();
      },
      "NUMBER in " + r);
}

struct RecServeOptions {
  std::string model = "tiny-dlrm";
  std::string output = "md";
  std::string trace;
  std::string weights;
  std::string save_weights;
  std::string index_dist = "zipf";
  std::string size_dist = "fixed";
  std::string table_dtype;
  std::string table_dir;
  bool early_touch = false;   // touch admitted queries' mapped rows on a background thread
  double gpu_cache_mib = -1;  // sim: tables in host memory behind a GPU cache of this size
  double gpu_cache_tau = rec::SimEmbeddingOptions{}.tau;
  bool gpu_cache_prefetch = false;
  std::string size_quantiles;
  std::string device = "cpu";
  std::string device_profile;  // a `tandem profile` JSON file; empty: measure this machine
  std::string pipeline;        // a multi-stage pipeline instead of --model ("recflow")
  std::string recflow_stats = "configs/recsys/recflow-stats.json";
  std::string recflow_requests;  // real RecFlow requests (bench/recsys/recflow_convert.py)
  std::string recstream;         // a RecStream weight file or "hill": online switching
  std::string load_phases;       // "8:1,64:1": clients:seconds, run one after the other
  rec::RecStreamOnlineOptions online;
  double size_sd = 4;
  int clients = 1;
  int threads = 0;
  int pool = 64;
  int trace_events = 100000;
  int64_t max_outstanding = 1024;
  double duration_s = 5;
  double warmup_s = 0.5;
  double rate_qps = 0;
  double zipf_s = 1.05;
  double rows_scale = 0;  // 0: fit the tables into table_budget_mib
  double table_budget_mib = 1024;
  int64_t query_size = 0;
  int64_t cache_rows = 0;
  uint64_t seed = 1;
  int64_t priorities = 1;
  std::string timeout_action = "reject";
  rec::PolicyOptions po;  // the policy and its knobs, bound to the options directly
  double jitter = rec::SimOptions{}.jitter;
  bool ltp = false;
  bool timing_only = false;
};

// Mean simulated milliseconds per query spent in lookup ops (embedding) and in the rest (dense),
// from the simulator's schedule (sim:... devices elide copies).
nlohmann::json phase_breakdown(const rec::RecModel& model, const rec::SimExecutor& ex) {
  const Graph g = model.graph(model.config().query_size, ex.device().profile);
  double emb = 0, dense = 0;
  std::set<int64_t> queries;
  for (const auto& sp : ex.schedule()) {
    // A fused launch's time is shared by its members.
    (rec::is_lookup_kind(g.node(sp.node).kind) ? emb : dense) +=
        (sp.end_us - sp.start_us) / sp.group;
    queries.insert(sp.query);
  }
  const double n = std::max<double>(1, double(queries.size()));
  return {{"embedding", 1e-3 * emb / n}, {"dense", 1e-3 * dense / n}, {"copies", 0.0}};
}

// --load-phases "C:S,C:S,...": closed-loop clients and (simulated) seconds per phase.
std::vector<std::pair<int, double>> parse_load_phases(const std::string& spec) {
  std::vector<std::pair<int, double>> out;
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string item = spec.substr(at, comma - at);
    const size_t colon = item.find(':');
    char* end1 = nullptr;
    char* end2 = nullptr;
    const std::string c = item.substr(0, colon),
                      d = colon == std::string::npos ? "" : item.substr(colon + 1);
    const long clients = std::strtol(c.c_str(), &end1, 10);
    const double secs = std::strtod(d.c_str(), &end2);
    if (c.empty() || d.empty() || *end1 != '\0' || *end2 != '\0' || clients < 1 || clients > 4096 ||
        !(secs > 0 && secs <= 86400))
      throw InvalidArgument(
          cat("--load-phases '", spec, "': item '", item,
              "' is not CLIENTS:SECONDS (clients 1..4096, seconds in (0, 86400])"));
    out.emplace_back(int(clients), secs);
    at = comma + 1;
  }
  return out;
}

// The serving policy: `po`'s, or RecStream online switching (--recstream) behind the admission
// layer when that is enabled.
std::unique_ptr<rec::ServingPolicy> make_base_policy(const RecServeOptions& o,
                                                     const rec::RecModel& model, rec::Executor& ex,
                                                     const rec::PolicyOptions& po) {
  if (o.recstream.empty()) return rec::make_policy(model, ex, po);
  rec::RecStreamOnlineOptions ro = o.online;
  ro.base = po;
  ro.weights = o.recstream == "hill" ? "" : o.recstream;
  ro.open_loop = o.rate_qps > 0;
  std::unique_ptr<rec::ServingPolicy> p = rec::make_recstream_online(model, ex, ro);
  if (!po.admission.enabled()) return p;
  return rec::with_admission(std::move(p), model, ex, po.admission, po.streams);
}

// make_base_policy, with --gpu-cache-prefetch prefetching each admitted query's rows (run_rec_serve
// allows it on simulated devices only).
std::unique_ptr<rec::ServingPolicy> make_serving_policy(const RecServeOptions& o,
                                                        const rec::RecModel& model,
                                                        rec::Executor& ex,
                                                        const rec::PolicyOptions& po) {
  std::unique_ptr<rec::ServingPolicy> p = make_base_policy(o, model, ex, po);
  if (!o.gpu_cache_prefetch) return p;
  return rec::with_gpu_prefetch(std::move(p), model, dynamic_cast<rec::SimExecutor&>(ex));
}

// The simulated GPU cache's totals (host tables: every miss crossed the host link).
void print_gpu_cache(const nlohmann::json& e) {
  double lo = 1, hi = 0;
  for (const auto& t : e["tables"]) {
    lo = std::min(lo, t["hit_rate"].get<double>());
    hi = std::max(hi, t["hit_rate"].get<double>());
  }
  std::printf(
      ", GPU cache (%.4g MiB, tau %g) hit rate %.1f%% (tables %.1f..%.1f%%), %.1f MiB over "
      "the host link",
      e["cache_bytes"].get<double>() / (1 << 20), e["tau"].get<double>(),
      100 * e["hit_rate"].get<double>(), 100 * lo, 100 * hi,
      e["host_link_bytes"].get<double>() / (1 << 20));
}

// The switches of --recstream as a table.
void print_switches(const nlohmann::json& online) {
  std::printf("\nRecStream online (%s: %s): %zu switches, %lld predictions, now %s\n\n",
              online["mode"].get<std::string>().c_str(),
              online["mode_reason"].get<std::string>().c_str(), online["switches"].size(),
              online["predictions"].get<long long>(), online["current"].get<std::string>().c_str());
  if (online["switches"].empty()) return;
  std::printf(
      "| t s | from | to | reason | predicted gain | predicted p99 from / to ms | measured p99 "
      "from / to ms | drained | drain ms |\n|---|---|---|---|---|---|---|---|---|\n");
  auto num = [](const nlohmann::json& v, double scale = 1) {
    return v.is_number() ? cat(std::round(v.get<double>() * scale * 1000) / 1000)
                         : std::string("-");
  };
  for (const auto& r : online["switches"])
    std::printf("| %.3f | %s | %s | %s | %s | %s / %s | %s / %s | %lld | %s |\n",
                r["t_s"].get<double>(), r["from"].get<std::string>().c_str(),
                r["to"].get<std::string>().c_str(), r["reason"].get<std::string>().c_str(),
                num(r["predicted_gain"]).c_str(), num(r["predicted_from_p99_ms"]).c_str(),
                num(r["predicted_to_p99_ms"]).c_str(), num(r["measured_from_p99_ms"]).c_str(),
                num(r["measured_to_p99_ms"]).c_str(), r["drained"].get<long long>(),
                num(r["drain_s"], 1e3).c_str());
}

int run_pipeline(const RecServeOptions& o) {
  RecPipelineRun r;
  r.pipeline = o.pipeline;
  r.stats_path = o.recflow_stats;
  r.requests_path = o.recflow_requests;
  r.device = o.device;
  r.output = o.output;
  r.table_budget_mib = o.table_budget_mib;
  r.pool = o.pool;
  r.seed = o.seed;
  r.jitter = o.jitter;
  r.timing_only = o.timing_only;
  r.ltp = o.ltp;
  r.recstream = o.recstream;
  r.po = o.po;
  r.lo = load_options(o.clients, o.rate_qps, o.duration_s, o.warmup_s, o.seed, o.max_outstanding);
  return run_rec_pipeline(r);
}

int run_rec_serve(const RecServeOptions& o) {
  using namespace tandem::rec;
  if (o.recstream == "hill" && !o.pipeline.empty())
    throw InvalidArgument("--pipeline takes RecStream weights (its pick per stage), not 'hill'");
  const bool gpu_cache = o.gpu_cache_mib >= 0;
  if ((gpu_cache || o.gpu_cache_prefetch) && !o.pipeline.empty())
    throw InvalidArgument(
        "--gpu-cache-mib and --gpu-cache-prefetch serve one model, not --pipeline");
  if ((gpu_cache || o.gpu_cache_prefetch) && o.device.rfind("sim:", 0) != 0)
    throw InvalidArgument(
        "--gpu-cache-mib and --gpu-cache-prefetch need a simulated device (--device sim:...), "
        "not '" +
        o.device + "'");
  if (o.gpu_cache_prefetch && !(o.gpu_cache_mib > 0))
    throw InvalidArgument("--gpu-cache-prefetch needs a GPU cache (--gpu-cache-mib > 0)");
  if (!o.pipeline.empty()) return run_pipeline(o);
  if (o.threads > 0) set_cpu_num_threads(o.threads);
  ModelConfig cfg = zoo_config(o.model);
  if (!o.table_dtype.empty()) {
    cfg.table_dtype = parse_dtype(o.table_dtype);
    EmbeddingTable::row_bytes(cfg.table_dtype, 1);  // rejects dtypes tables cannot hold
  }
  const int64_t full_bytes = cfg.table_bytes();
  double scale = 1.0;
  if (o.rows_scale > 0) {
    cfg.scale_rows(o.rows_scale);
    scale = o.rows_scale;
  } else if (o.table_dir.empty()) {
    scale = cfg.fit_tables(static_cast<int64_t>(o.table_budget_mib * (1 << 20)));
  }
  if (o.query_size > 0) cfg.query_size = o.query_size;
  const bool simulated = o.device.rfind("sim:", 0) == 0;
  const Device device = simulated ? Device::cpu() : Device::parse(o.device);
  std::fprintf(stderr,
               "rec-serve: model %s (%s) on %s, tables %.1f MiB (%.4g x the zoo's %.1f MiB)\n",
               cfg.name.c_str(), to_string(cfg.kind), o.device.c_str(),
               cfg.table_bytes() / 1048576.0, scale, full_bytes / 1048576.0);
  if (!o.table_dir.empty() && !o.weights.empty())
    throw InvalidArgument("--table-dir and --weights exclude each other");
  if (o.early_touch && o.table_dir.empty())
    throw InvalidArgument(
        "--early-touch needs --table-dir (tables in memory have no pages to fetch)");
  RecModel model = !o.weights.empty()     ? RecModel::load(cfg, o.weights)
                   : !o.table_dir.empty() ? RecModel::generate_mapped(cfg, o.table_dir)
                                          : RecModel::generate(cfg);
  if (!o.save_weights.empty()) model.save(o.save_weights);
  if (!device.is_cpu()) {
    if (o.cache_rows > 0)
      throw InvalidArgument("--cache-rows applies to CPU lookups only, not to --device " +
                            device.to_string());
    model.to(device);
  }
  if (o.cache_rows > 0) model.set_cache_rows(o.cache_rows);

  WorkloadOptions w;
  w.index.dist = parse_index_dist(o.index_dist);
  w.index.zipf_s = o.zipf_s;
  set_query_sizes(w.size, o.size_dist, o.size_sd, o.size_quantiles);
  w.seed = o.seed;
  QueryFactory factory(cfg, w);
  std::vector<std::shared_ptr<const QueryInputs>> pool;
  for (int i = 0; i < o.pool; ++i)
    pool.push_back(std::make_shared<QueryInputs>(factory.make(uint64_t(i))));

  // The device's profile prices the nodes (cost classes in the trace, stream-pool's balance).
  // (Measured only when used: sim:h100 and the like are described by their own data.)
  auto profile = [&] {
    return o.device_profile.empty() ? measured_profile(device)
                                    : DeviceProfile::from_json_file(o.device_profile);
  };
  std::unique_ptr<Executor> executor;
  SimDevice sim_dev;
  SimOptions sim_opt = sim_options(o.device, o.seed, o.jitter, o.timing_only);
  if (gpu_cache) {
    sim_opt.embedding.host_tables = true;
    sim_opt.embedding.cache_bytes = static_cast<int64_t>(o.gpu_cache_mib * (1 << 20));
    sim_opt.embedding.tau = o.gpu_cache_tau;
  }
  if (simulated) {
    const std::string name = o.device.substr(4);
    sim_dev = name == "cpu" ? sim_cpu_device(profile()) : sim_device(name);
    executor = std::make_unique<SimExecutor>(sim_dev, sim_opt);
  } else if (device.is_cpu())
    executor = std::make_unique<CpuExecutor>(profile());
  else
    executor = std::make_unique<DeviceExecutor>(device, profile());
  Executor& ex = *executor;
  Tracer tracer(static_cast<size_t>(std::max(1, o.trace_events)));
  if (!o.trace.empty()) ex.set_tracer(&tracer);
  PolicyOptions po = o.po;
  po.admission.timeout_action = parse_timeout_action(o.timeout_action);
  if (o.ltp && !simulated)
    throw InvalidArgument("--ltp searches on a simulated device only (--device sim:...)");
  if (!o.load_phases.empty() && o.rate_qps > 0)
    throw InvalidArgument("--load-phases are closed-loop phases; drop --rate");
  // One phase (--clients, --duration) or --load-phases, one after the other on the same policy;
  // only the first has a warm-up.
  std::vector<std::pair<int, double>> phases = {{o.clients, o.duration_s}};
  if (!o.load_phases.empty()) phases = parse_load_phases(o.load_phases);
  std::vector<LoadStats> phase_stats;
  LoadStats s;
  nlohmann::json sched;
  LoadOptions lo =
      load_options(o.clients, o.rate_qps, o.duration_s, o.warmup_s, o.seed, o.max_outstanding);
  lo.priorities = o.priorities;
  // Host bytes allocated during the load above what was live before it (intermediate outputs,
  // inputs, pool blocks): the CPU allocator's own counters.
  Allocator& host = allocator(Device::cpu());
  const int64_t host_before = host.stats().current_bytes;
  host.reset_peak();
  {
    auto policy = make_serving_policy(o, model, ex, po);
    if (o.early_touch) policy = with_early_touch(std::move(policy), model);
    for (const auto& [clients, secs] : phases) {
      LoadOptions plo = lo;
      plo.clients = clients;
      plo.duration_s = secs;
      plo.warmup_s = phase_stats.empty() ? lo.warmup_s : 0;
      phase_stats.push_back(simulated
                                ? run_sim_load(*policy, static_cast<SimExecutor&>(ex), pool, plo)
                                : run_load(*policy, pool, plo));
    }
    s = phase_stats.front();  // with phases: counts summed, mean queue time over all of them
    s.queue_ms.mean *= double(s.completed);
    for (size_t i = 1; i < phase_stats.size(); ++i) {
      s.queue_ms.mean += phase_stats[i].queue_ms.mean * double(phase_stats[i].completed);
      s.completed += phase_stats[i].completed, s.errors += phase_stats[i].errors;
      s.rejected += phase_stats[i].rejected, s.timed_out += phase_stats[i].timed_out;
      s.measured_s += phase_stats[i].measured_s;
    }
    s.queue_ms.mean /= double(std::max<int64_t>(1, s.completed));
    sched = policy->stats();
  }
  const int64_t host_peak = host.stats().peak_bytes - host_before;
  ex.synchronize();
  nlohmann::json ltp;
  if (o.ltp)
    ltp = latency_bounded_throughput(
        [&](SimExecutor& e) { return make_serving_policy(o, model, e, po); }, sim_dev, sim_opt,
        po.sla_ms, pool, lo);
  nlohmann::json breakdown, gpu_cache_stats;
  if (simulated) breakdown = phase_breakdown(model, static_cast<SimExecutor&>(ex));
  if (gpu_cache) gpu_cache_stats = static_cast<SimExecutor&>(ex).embedding_stats();
  if (!o.trace.empty()) tracer.write(o.trace);
  auto caches = model.cache_stats();
  double hit = 0;
  for (const auto& c : caches) hit += c.hit_rate();
  if (!caches.empty()) hit /= double(caches.size());

  if (o.output == "json") {
    nlohmann::json j = {{"schema_version", 1},
                        {"build", build_info_json()},
                        {"system", system_json()},
                        {"params",
                         {{"model", cfg.name},
                          {"kind", to_string(cfg.kind)},
                          {"policy", o.recstream.empty() ? o.po.policy : "recstream-online"},
                          {"recstream", o.recstream},
                          {"load_phases", o.load_phases},
                          {"device", o.device},
                          {"clients", o.clients},
                          {"rate_qps", o.rate_qps},
                          {"max_outstanding", o.max_outstanding},
                          {"priorities", o.priorities},
                          {"admission",
                           {{"enabled", po.admission.enabled()},
                            {"priority_levels", po.admission.priority_levels},
                            {"max_queue_size", po.admission.max_queue_size},
                            {"timeout_us", po.admission.default_timeout_us},
                            {"timeout_action", o.timeout_action},
                            {"preserve_ordering", po.admission.preserve_ordering},
                            {"max_in_flight", po.admission.max_in_flight}}},
                          {"streams", o.po.streams},
                          {"urgent_slack_ms", o.po.urgent_slack_ms},
                          {"fuse_across", o.po.fuse_across},
                          {"duration_s", o.duration_s},
                          {"query_size", cfg.query_size},
                          {"size_dist", o.size_dist},
                          {"index_dist", o.index_dist},
                          {"rows_scale", scale},
                          {"table_bytes", cfg.table_bytes()},
                          {"table_dtype", std::string(dtype_name(cfg.table_dtype))},
                          {"threads", cpu_num_threads()}}},
                        {"results", s.to_json()}};
    j["results"]["host_peak_bytes"] = host_peak;
    if (phase_stats.size() > 1) {  // the phases' latencies apart; counts summed
      j["results"] = {{"policy", s.policy},           {"completed", s.completed},
                      {"errors", s.errors},           {"rejected", s.rejected},
                      {"timed_out", s.timed_out},     {"measured_s", s.measured_s},
                      {"host_peak_bytes", host_peak}, {"phases", nlohmann::json::array()}};
      for (size_t i = 0; i < phases.size(); ++i)
        j["results"]["phases"].push_back({{"clients", phases[i].first},
                                          {"duration_s", phases[i].second},
                                          {"results", phase_stats[i].to_json()}});
    }
    if (!sched.empty()) j["results"]["scheduler"] = sched;
    if (!ltp.is_null()) j["results"]["latency_bounded_throughput"] = ltp;
    if (!breakdown.is_null()) j["results"]["breakdown_ms"] = breakdown;
    if (gpu_cache) j["results"]["gpu_cache"] = gpu_cache_stats;
    if (simulated) j["params"]["sim_device"] = sim_dev.to_json();
    if (!caches.empty()) {
      j["results"]["cache_hit_rate"] = hit;
      nlohmann::json per = nlohmann::json::object();
      for (size_t t = 0; t < caches.size(); ++t) per[cfg.tables[t].name] = caches[t].hit_rate();
      j["results"]["cache_hit_rate_per_table"] = per;
    }
    if (!o.trace.empty()) {
      j["trace"] = o.trace;
      j["results"]["mean_overlapping_ops"] = tracer.mean_overlap();
    }
    std::printf("%s\n", j.dump(2).c_str());
    return s.errors ? 1 : 0;
  }
  std::printf(
      "| model | policy | clients | QPS | rows/s | p50 ms | p95 ms | p99 ms | queue mean ms | "
      "queue "
      "p99 ms | service mean ms | batch rows |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < phase_stats.size(); ++i) {
    const LoadStats& p = phase_stats[i];
    std::printf(
        "| %s | %s | %s | %.1f | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f |\n",
        cfg.name.c_str(), p.policy.c_str(),
        o.rate_qps > 0 ? cat("open ", o.rate_qps, "/s").c_str() : cat(phases[i].first).c_str(),
        p.throughput_qps, p.rows_per_s, p.latency_ms.p50, p.latency_ms.p95, p.latency_ms.p99,
        p.queue_ms.mean, p.queue_ms.p99, p.service_ms.mean, p.mean_batch_rows);
  }
  std::printf("\n%lld queries in %.2f s, %lld errors", static_cast<long long>(s.completed),
              s.measured_s, static_cast<long long>(s.errors));
  if (po.admission.enabled())
    std::printf(", admission: %lld rejected (queue full, max %lld), %lld timed out (%s)",
                static_cast<long long>(s.rejected),
                static_cast<long long>(po.admission.max_queue_size),
                static_cast<long long>(s.timed_out), o.timeout_action.c_str());
  if (o.rate_qps > 0)
    std::printf(", %lld arrivals dropped (%lld outstanding), %lld late",
                static_cast<long long>(s.dropped), static_cast<long long>(o.max_outstanding),
                static_cast<long long>(s.late));
  if (!caches.empty()) std::printf(", hot-row cache hit rate %.1f%%", 100 * hit);
  if (gpu_cache) print_gpu_cache(gpu_cache_stats);
  if (!breakdown.is_null())
    std::printf("; per query (mean ms): queue %.3f, embedding %.3f, dense %.3f, copies 0 (elided)",
                s.queue_ms.mean, breakdown["embedding"].get<double>(),
                breakdown["dense"].get<double>());
  if (sched.contains("sched_us_per_op"))
    std::printf("; scheduler %.2f us per issued op", sched["sched_us_per_op"].get<double>());
  std::printf("; host peak %.2f MiB during the load", double(host_peak) / (1 << 20));
  if (sched.contains("tensor_pool"))
    std::printf(" (tensor pool peak %.2f MiB reserved, %lld reuses, %lld violations)",
                sched["tensor_pool"]["peak_reserved_bytes"].get<double>() / (1 << 20),
                sched["tensor_pool"]["reuses"].get<long long>(),
                sched["tensor_pool"]["violations"].get<long long>());
  if (!ltp.is_null())
    std::printf("; latency-bounded throughput %.1f QPS (p99 <= %g ms)", ltp["qps"].get<double>(),
                o.po.sla_ms);
  if (!o.trace.empty())
    std::printf(
        "; trace: %s (%zu ops, %.2f running at once on average; open in "
        "chrome://tracing or ui.perfetto.dev)",
        o.trace.c_str(), tracer.size(), tracer.mean_overlap());
  std::printf("\n");
  if (sched.contains("online")) print_switches(sched["online"]);
  return s.errors ? 1 : 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<RecServeOptions>();
  CLI::App* sub = app.add_subcommand(
      "rec-serve", "Serve a recommendation model (DLRM, WnD, DIN, BST) to concurrent clients");
  sub->add_option("--device", o->device,
                  "cpu, cuda:N (the model's weights and tables are copied there), or a simulated "
                  "GPU: sim:h100, sim:h200, sim:a100, sim:cpu (this CPU's profile as a device)")
      ->capture_default_str();
  sub->add_option("--sla-ms", o->po.sla_ms, "Deadline of a query (recos / race ordering; --ltp)")
      ->check(positive_up_to(1e6))
      ->capture_default_str();
  sub->add_option("--alpha", o->po.alpha, "recos: contention weight")
      ->check(number_in(0.0, 1e6))
      ->capture_default_str();
  sub->add_option("--beta", o->po.beta, "recos: cross-stream (event) weight")
      ->check(number_in(0.0, 1e6))
      ->capture_default_str();
  sub->add_option("--horizon-us", o->po.horizon_us,
                  "recos / race: issue horizon (0 = 0.4 x the median op duration)")
      ->check(number_in(0.0, 1e9))
      ->capture_default_str();
  sub->add_option("--urgent-slack-ms", o->po.urgent_slack_ms,
                  "recos / race: ops of queries with less slack than this go least slack first, "
                  "the rest earliest deadline first ('inf': least slack for all, the spec's rule)")
      ->capture_default_str();
  sub->add_option(
         "--fuse-across", o->po.fuse_across,
         "recos / recos+race: horizontal fusion, up to this many queries' instances of one "
         "graph node in one launch (1 = off; 0 = 4 on sim devices, 1 on the CPU)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  sub->add_option("--rho", o->po.rho, "race: share of the parallel units for lookups")
      ->check(positive_up_to(1.0))
      ->capture_default_str();
  sub->add_flag("--tensor-pool,!--no-tensor-pool", o->po.tensor_pool,
                "recos / race / b4: intermediate outputs in the executor's stream-ordered pool "
                "(default), or allocated per node and held until the query completes")
      ->capture_default_str();
  sub->add_option("--lookup-streams", o->po.lookup_streams, "race: streams of the lookup lane")
      ->check(CLI::Range(1, 1023))
      ->capture_default_str();
  sub->add_option("--jitter", o->jitter, "sim: relative spread of op durations")
      ->check(number_in(0.0, 0.5))
      ->capture_default_str();
  add_sim_timing_only_option(sub, o->timing_only);
  sub->add_flag("--ltp", o->ltp,
                "sim: also search the latency-bounded throughput (p99 <= --sla-ms), open loop");
  sub->add_option("--pipeline", o->pipeline,
                  "Serve a multi-stage pipeline instead of one model: recflow (retrieval -> "
                  "pre-rank -> coarse -> rank -> re-rank; --policy runs every stage, --sla-ms is "
                  "end to end, --table-budget holds all stages' tables, --pool requests)")
      ->check(CLI::IsMember({"recflow"}));
  sub->add_option("--recstream", o->recstream,
                  "Switch the stream configuration online (scheduler stream-pool|recos x K): "
                  "a RecStream weight file (configs/recsys/recstream/sim-h100.json) predicts the "
                  "best one from the load of a sliding window, 'hill' (or weights for another "
                  "executor) climbs over K on the measured p99; switches drain the old "
                  "configuration and are listed in the output. With --pipeline: weights only, "
                  "each stage gets the configuration predicted for its model and rows");
  sub->add_option("--recstream-initial", o->online.initial,
                  "--recstream: the configuration it starts with")
      ->capture_default_str();
  sub->add_option("--recstream-period", o->online.period_s,
                  "--recstream: seconds between decisions (simulated on sim: devices)")
      ->check(positive_up_to(86400.0))
      ->capture_default_str();
  sub->add_option("--recstream-window", o->online.window_s,
                  "--recstream: seconds of the sliding window of the load and the p99")
      ->check(positive_up_to(86400.0))
      ->capture_default_str();
  sub->add_option("--recstream-gain", o->online.min_gain,
                  "--recstream: switch only for a larger predicted (or measured) p99 gain")
      ->check(number_in(0.0, 100.0))
      ->capture_default_str();
  sub->add_option("--load-phases", o->load_phases,
                  "Closed-loop phases run one after the other on the same policy, "
                  "CLIENTS:SECONDS,... (e.g. 8:1,64:1; replaces --clients and --duration); the "
                  "table has a row per phase");
  sub->add_option("--recflow-stats", o->recflow_stats,
                  "--pipeline recflow: the statistics file of the requests and stages")
      ->capture_default_str();
  sub->add_option("--recflow-requests", o->recflow_requests,
                  "--pipeline recflow: serve real RecFlow requests from this file (a day converted "
                  "by bench/recsys/recflow_convert.py) instead of generated ones; --pool of them")
      ->check(CLI::ExistingFile);
  sub->add_option("--device-profile", o->device_profile,
                  "DeviceProfile JSON of the device (as `tandem profile` writes it) that prices "
                  "the nodes; default: measure this machine's peaks once (about a second)")
      ->check(CLI::ExistingFile);
  sub->add_option("-m,--model", o->model,
                  "Zoo name (rm1, rm2, rm3, wnd, din, bst, ...) or JSON file")
      ->capture_default_str();
  sub->add_option("-c,--clients", o->clients, "Closed-loop clients")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub->add_option("-d,--duration", o->duration_s, "Measured seconds")
      ->check(positive_up_to(86400.0))
      ->capture_default_str();
  sub->add_option("-p,--policy", o->po.policy, "Serving policy")
      ->check(CLI::IsMember(rec::policy_names()))
      ->capture_default_str();
  sub->add_option("-o,--output", o->output, "Output format")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();
  sub->add_option("--trace", o->trace, "Write a Chrome-trace JSON of every op to this file");
  sub->add_option("--trace-events", o->trace_events, "Most ops kept in the trace")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  sub->add_option("--streams", o->po.streams, "Streams / instances of the policy")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  sub->add_option("--rate", o->rate_qps,
                  "Open loop: Poisson arrivals per second (0 = closed loop); arrivals that find "
                  "--max-outstanding queries unanswered are dropped and counted")
      ->check(number_in(0.0, rec::kMaxOpenLoopRateQps));
  sub->add_option("--max-outstanding", o->max_outstanding,
                  "Open loop: most queries submitted and not yet answered")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--warmup", o->warmup_s, "Seconds before measuring")
      ->check(number_in(0.0, 3600.0))
      ->capture_default_str();
  add_query_size_options(sub, o->query_size, o->size_dist, o->size_sd, o->size_quantiles);
  sub->add_option("--index-dist", o->index_dist, "Embedding ids: uniform, zipf, stack")
      ->check(CLI::IsMember({"uniform", "zipf", "stack"}))
      ->capture_default_str();
  sub->add_option("--zipf-s", o->zipf_s, "Zipf exponent")
      ->check(number_in(0.0, 100.0))
      ->capture_default_str();
  sub->add_option("--rows-scale", o->rows_scale,
                  "Multiply every table's rows by this, in (0, 1e3] (default: fit --table-budget)")
      ->check(positive_up_to(1e3));
  sub->add_option("--table-budget", o->table_budget_mib, "MiB the tables may use when scaling")
      ->check(positive_up_to(1e8))
      ->capture_default_str();
  sub->add_option("--table-dtype", o->table_dtype, "Table storage: f32, f16, i8")
      ->check(CLI::IsMember({"f32", "f16", "i8"}));
  sub->add_option(
      "--table-dir", o->table_dir,
      "Keep the tables in .temb files here, mapped (full zoo sizes unless --rows-scale)");
  sub->add_flag("--early-touch", o->early_touch,
                "With --table-dir: a background thread reads the pages of each submitted query's "
                "rows while it waits, so the lookups do not take the page faults (spec B7)");
  sub->add_option("--weights", o->weights, "Load weights from this safetensors file")
      ->check(CLI::ExistingFile);
  sub->add_option("--save-weights", o->save_weights, "Write the weights as safetensors");
  sub->add_option("--max-batch", o->po.max_batch_rows, "dynamic-batch: rows per merged launch")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  sub->add_option("--max-delay-us", o->po.max_queue_delay_us, "dynamic-batch: longest queue delay")
      ->check(number_in(0.0, 1e7))
      ->capture_default_str();
  sub->add_option("--priority-levels", o->po.admission.priority_levels,
                  "Admission: priority levels of the queue (0 = off; 1 is the highest)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  sub->add_option("--priorities", o->priorities,
                  "Load: query i of the pool has priority 1 + i mod this (<= --priority-levels)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  sub->add_option("--max-queue-size", o->po.admission.max_queue_size,
                  "Admission: most waiting requests; one more is rejected at once (0 = unbounded)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  sub->add_option("--timeout-us", o->po.admission.default_timeout_us,
                  "Admission: queue timeout of a request (0 = none)")
      ->check(number_in(0.0, 1e12))
      ->capture_default_str();
  sub->add_option("--timeout-action", o->timeout_action,
                  "Admission: a timed-out request is rejected (never run) or delayed (run after "
                  "the others of its level)")
      ->check(CLI::IsMember({"reject", "delay"}))
      ->capture_default_str();
  sub->add_flag("--preserve-ordering", o->po.admission.preserve_ordering,
                "Admission: answer requests in submit order");
  sub->add_option("--max-in-flight", o->po.admission.max_in_flight,
                  "Admission: requests handed to the policy at once (0 = --streams)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  sub->add_option("--gpu-cache-mib", o->gpu_cache_mib,
                  "sim: the tables live in host memory; lookups go through a GPU cache "
                  "(HugeCTR gpu_cache semantics) of this many MiB, split over the tables by "
                  "size; misses cross the host link (0 = no cache; default: tables in HBM)")
      ->check(number_in(0.0, 1e8));
  sub->add_option("--gpu-cache-tau", o->gpu_cache_tau,
                  "sim: insert missed rows synchronously while the cache's window hit rate is "
                  "below this, asynchronously on the copy stream otherwise (1 = always "
                  "synchronously)")
      ->check(number_in(0.0, 1.0))
      ->capture_default_str();
  sub->add_flag("--gpu-cache-prefetch", o->gpu_cache_prefetch,
                "sim: send each submitted query's missing rows to the GPU cache early, on the "
                "copy stream (spec B7)");
  sub->add_option("--cache-rows", o->cache_rows, "Hot-row cache rows per table (0 = none)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 32));
  sub->add_option("--pool", o->pool, "Distinct queries generated and reused")
      ->check(CLI::Range(1, kMaxPool))
      ->capture_default_str();
  sub->add_option("-t,--threads", o->threads, "CPU threads of the kernels (0 = default)")
      ->check(CLI::Range(0, 4096));
  sub->add_option("--seed", o->seed, "Workload seed")->capture_default_str();
  return Command{sub, [o] { return run_rec_serve(*o); }};
});

}  // namespace
}  // namespace tandem::cli
