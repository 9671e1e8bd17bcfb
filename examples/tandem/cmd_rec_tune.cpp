// SPDX-License-Identifier: Apache-2.0
// `tandem rec-tune`: choose the stream configuration (K streams x query-level or op-level
// scheduler, the recsys spec §2.5) for one model under one load, and compare the choices of the
// baselines B5 with the exhaustive oracle. Every configuration of the space is measured (a fresh
// executor and policy each; on sim:... devices the runs are deterministic), which gives
//   oracle     the configuration with the lowest measured p99 (B5 c),
//   default    stream-pool:1 (one stream, query-level), and the fixed K of --fixed (B5 a),
//   hill       hill climbing over K per scheduler from K = 1, doubling while p99 improves, the
//              better of the two schedulers (B5 b; its probe count is reported),
//   recstream  with --weights, the GNN's prediction (recstream.h) and its predicted p99,
// and each one's regret, p99(choice) / p99(oracle) - 1. --features adds the GNN's inputs (X, Â, z)
// to the JSON, which is what the offline trainer (bench/recsys/recstream_train.py) learns from.
//
//   tandem rec-tune --model rm2 --device sim:h100 --clients 32 --duration 0.1
//   tandem rec-tune --model din --device sim:h100 --clients 16 -o json
//       --weights configs/recsys/recstream/sim-h100.json
// --deeprecsched tunes DeepRecSched's split and offload instead (rec_deeprecsched.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "rec_deeprecsched.h"
#include "rec_options.h"
#include "report.h"
#include "tandem/core/build_info.h"
#include "tandem/core/error.h"
#include "tandem/recsys/recstream.h"
#include "tandem/recsys/serving.h"
#include "tandem/recsys/sim_executor.h"
#include "tandem/recsys/workload.h"

namespace tandem::cli {
namespace {

struct RecTuneOptions {
  std::string model = "tiny-dlrm";
  std::string device = "sim:h100";
  std::string output = "md";
  std::string weights;
  std::string size_dist = "fixed";
  std::string size_quantiles;
  std::string fixed = "recos:4";
  double size_sd = 0.3;
  int clients = 16;
  int pool = 64;
  double rate_qps = 0;
  double duration_s = 0.1;
  double warmup_s = 0.02;
  double table_budget_mib = 64;
  int64_t query_size = 0;
  uint64_t seed = 1;
  bool features = false;
  bool timing_only = false;
  DeepRecSchedCli drs;
};

struct Measured {
  rec::StreamConfig config;
  rec::LoadStats stats;
};

// The configuration with the lowest p99 among `idx` (indices into m).
size_t best_of(const std::vector<Measured>& m, const std::vector<size_t>& idx) {
  size_t b = idx.front();
  for (size_t i : idx)
    if (m[i].stats.latency_ms.p99 < m[b].stats.latency_ms.p99) b = i;
  return b;
}

int run_rec_tune(const RecTuneOptions& o) {
  using namespace tandem::rec;
  ModelConfig cfg = zoo_config(o.model);
  const double scale = cfg.fit_tables(static_cast<int64_t>(o.table_budget_mib * (1 << 20)));
  if (o.query_size > 0) cfg.query_size = o.query_size;
  const bool simulated = o.device.rfind("sim:", 0) == 0;
  const Device device = simulated ? Device::cpu() : Device::parse(o.device);
  if (!device.is_cpu())
    throw InvalidArgument("rec-tune: --device cpu or sim:... (the CUDA executor is not tuned yet)");
  const RecModel model = RecModel::generate(cfg);

  WorkloadOptions w;
  w.index.dist = IndexDist::kZipf;
  set_query_sizes(w.size, o.size_dist, o.size_sd, o.size_quantiles);
  w.seed = o.seed;
  QueryFactory factory(cfg, w);
  std::vector<std::shared_ptr<const QueryInputs>> pool;
  std::vector<double> sizes;
  for (int i = 0; i < o.pool; ++i) {
    pool.push_back(std::make_shared<QueryInputs>(factory.make(uint64_t(i))));
    sizes.push_back(double(pool.back()->rows));
  }
  nlohmann::json params = {{"model", cfg.name},
                           {"kind", to_string(cfg.kind)},
                           {"device", o.device},
                           {"size_dist", o.size_dist},
                           {"size_sd", o.size_sd},
                           {"size_quantiles", o.size_quantiles},
                           {"query_size", cfg.query_size},
                           {"pool", o.pool},
                           {"rows_scale", scale},
                           {"seed", o.seed}};
  if (o.drs.enabled) {
    if (!simulated) throw InvalidArgument("rec-tune --deeprecsched: --device sim:NAME needed");
    return run_deeprecsched(model, pool, o.drs, o.device,
                            sim_options(o.device, o.seed, SimOptions{}.jitter, o.timing_only),
                            o.output, params);
  }
  LoadShape shape;
  shape.clients = o.rate_qps > 0 ? 1 : o.clients;
  shape.rate_qps = o.rate_qps;
  set_row_stats(shape, sizes);

  const SimOptions sim_opt = sim_options(o.device, o.seed, SimOptions{}.jitter, o.timing_only);
  const SimDevice sim_dev = simulated ? sim_device_from_flag(o.device) : SimDevice{};
  auto make_executor = [&]() -> std::unique_ptr<Executor> {
    if (simulated) return std::make_unique<SimExecutor>(sim_dev, sim_opt);
    return std::make_unique<CpuExecutor>(measured_profile(Device::cpu()));
  };
  const LoadOptions lo = load_options(o.clients, o.rate_qps, o.duration_s, o.warmup_s, o.seed);

  std::vector<Measured> runs;
  for (const StreamConfig& c : stream_config_space()) {
    auto ex = make_executor();
    PolicyOptions po;
    auto policy = make_policy(model, *ex, c.apply(po));
    LoadStats s = simulated ? run_sim_load(*policy, static_cast<SimExecutor&>(*ex), pool, lo)
                            : run_load(*policy, pool, lo);
    if (s.completed == 0 || s.errors > 0)
      throw InvalidArgument(cat("rec-tune: ", c.name(), " completed ", s.completed,
                                " queries with ", s.errors, " errors; lengthen --duration"));
    std::fprintf(stderr, "rec-tune: %s p99 %.3f ms\n", c.name().c_str(), s.latency_ms.p99);
    runs.push_back({c, std::move(s)});
  }
  auto index_of = [&](const std::string& name) {
    for (size_t i = 0; i < runs.size(); ++i)
      if (runs[i].config.name() == name) return i;
    throw InvalidArgument(cat("rec-tune: configuration '", name, "' is not in the space"));
  };
  std::vector<size_t> all(runs.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const size_t oracle = best_of(runs, all);
  const double best_p99 = runs[oracle].stats.latency_ms.p99;
  auto regret = [&](size_t i) { return runs[i].stats.latency_ms.p99 / best_p99 - 1; };

  // Hill climbing over K (B5 b): per scheduler from K = 1, double K while p99 drops.
  size_t hill = 0;
  int probes = 0;
  bool first = true;
  for (const char* sched : {"stream-pool", "recos"}) {
    size_t at = index_of(cat(sched, ":1"));
    ++probes;
    for (int k = 2; k <= 16; k *= 2) {
      const size_t next = index_of(cat(sched, ':', k));
      ++probes;
      if (!(runs[next].stats.latency_ms.p99 < runs[at].stats.latency_ms.p99)) break;
      at = next;
    }
    if (first || runs[at].stats.latency_ms.p99 < runs[hill].stats.latency_ms.p99) hill = at;
    first = false;
  }
  const size_t dflt = index_of("stream-pool:1");
  const size_t fixed = index_of(parse_stream_config(o.fixed).name());

  nlohmann::json pred;
  RecStreamInputs inputs;
  if (!o.weights.empty() || o.features) {
    auto ex = make_executor();
    inputs = recstream_inputs(model, *ex, shape);
  }
  if (!o.weights.empty()) {
    const RecStreamWeights wt = load_recstream_weights(o.weights);
    const std::string want = simulated ? "sim" : "cpu";
    if (wt.executor != want)
      throw InvalidArgument(cat("rec-tune: weights '", o.weights, "' are for executor '",
                                wt.executor, "', not ", want));
    const RecStreamPrediction p = recstream_predict(wt, inputs);
    const size_t chosen = index_of(wt.configs[size_t(p.best)].name());
    nlohmann::json per = nlohmann::json::object();
    for (size_t c = 0; c < wt.configs.size(); ++c) per[wt.configs[c].name()] = p.p99_ms(int(c));
    pred = {{"weights", o.weights},
            {"config", runs[chosen].config.name()},
            {"predicted_p99_ms", p.p99_ms(p.best)},
            {"measured_p99_ms", runs[chosen].stats.latency_ms.p99},
            {"regret", regret(chosen)},
            {"predicted_p99_ms_per_config", per}};
  }

  auto choice = [&](size_t i) {
    return nlohmann::json{{"config", runs[i].config.name()},
                          {"p99_ms", runs[i].stats.latency_ms.p99},
                          {"regret", regret(i)}};
  };
  params.update({{"clients", o.clients},
                 {"rate_qps", o.rate_qps},
                 {"duration_s", o.duration_s},
                 {"warmup_s", o.warmup_s},
                 {"mean_rows", shape.mean_rows},
                 {"p95_rows", shape.p95_rows}});
  nlohmann::json j = {{"schema_version", 1},      {"build", build_info_json()},
                      {"params", params},         {"configs", nlohmann::json::array()},
                      {"oracle", choice(oracle)}, {"default", choice(dflt)},
                      {"fixed", choice(fixed)},   {"hill_climbing", choice(hill)}};
  j["hill_climbing"]["probes"] = probes;
  for (const auto& r : runs) {
    nlohmann::json c = r.stats.to_json();
    c["config"] = r.config.name();
    j["configs"].push_back(std::move(c));
  }
  if (!pred.is_null()) j["recstream"] = pred;
  if (o.features) j["features"] = inputs.to_json();

  if (o.output == "json") {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("| config | p99 ms | p50 ms | QPS | regret vs oracle |%s\n",
              pred.is_null() ? "" : " RecStream predicted p99 ms |");
  std::printf("|---|---|---|---|---|%s\n", pred.is_null() ? "" : "---|");
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& s = runs[i].stats;
    std::printf("| %s | %.3f | %.3f | %.1f | %+.1f%% |", runs[i].config.name().c_str(),
                s.latency_ms.p99, s.latency_ms.p50, s.throughput_qps, 100 * regret(i));
    if (!pred.is_null())
      std::printf(" %.3f |",
                  pred["predicted_p99_ms_per_config"][runs[i].config.name()].get<double>());
    std::printf("\n");
  }
  std::printf(
      "\n%s, %s, load %s: oracle %s (%.3f ms); default %s %+.1f%%; fixed %s %+.1f%%; "
      "hill climbing %s %+.1f%% (%d probes)",
      cfg.name.c_str(), o.device.c_str(),
      o.rate_qps > 0 ? cat("open ", o.rate_qps, "/s").c_str() : cat(o.clients, " clients").c_str(),
      runs[oracle].config.name().c_str(), best_p99, runs[dflt].config.name().c_str(),
      100 * regret(dflt), runs[fixed].config.name().c_str(), 100 * regret(fixed),
      runs[hill].config.name().c_str(), 100 * regret(hill), probes);
  if (!pred.is_null())
    std::printf("; RecStream %s %+.1f%% (predicted %.3f ms)",
                pred["config"].get<std::string>().c_str(), 100 * pred["regret"].get<double>(),
                pred["predicted_p99_ms"].get<double>());
  std::printf("\n");
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<RecTuneOptions>();
  CLI::App* sub = app.add_subcommand(
      "rec-tune", "Stream configuration of a recommendation model: RecStream vs the oracle (B5)");
  sub->add_option("-m,--model", o->model, "Zoo name or model JSON file")->capture_default_str();
  sub->add_option("--device", o->device, "sim:h100, sim:h200, sim:a100, sim:cpu, or cpu")
      ->capture_default_str();
  sub->add_option("-o,--output", o->output, "Output format")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();
  sub->add_option("--weights", o->weights, "RecStream weight JSON: add its prediction")
      ->check(CLI::ExistingFile);
  sub->add_flag("--features", o->features, "json: add the GNN's inputs (X, adjacency, z)");
  sub->add_option("--fixed", o->fixed, "The fixed-K baseline's configuration")
      ->capture_default_str();
  sub->add_option("-c,--clients", o->clients, "Closed-loop clients")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub->add_option("--rate", o->rate_qps, "Open loop: Poisson arrivals per second (0 = closed)")
      ->check(number_in(0.0, rec::kMaxOpenLoopRateQps));
  sub->add_option("-d,--duration", o->duration_s, "Measured seconds per configuration")
      ->check(number_in(1e-3, 3600.0))
      ->capture_default_str();
  sub->add_option("--warmup", o->warmup_s, "Seconds before measuring")
      ->check(number_in(0.0, 3600.0))
      ->capture_default_str();
  add_query_size_options(sub, o->query_size, o->size_dist, o->size_sd, o->size_quantiles);
  sub->add_option("--table-budget", o->table_budget_mib, "MiB the tables may use")
      ->check(number_in(1.0, 1e8))
      ->capture_default_str();
  sub->add_option("--pool", o->pool, "Distinct queries generated and reused")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  sub->add_option("--seed", o->seed, "Workload seed")->capture_default_str();
  add_sim_timing_only_option(sub, o->timing_only);
  add_deeprecsched_options(sub, o->drs);
  return Command{sub, [o] { return run_rec_tune(*o); }};
});

}  // namespace
}  // namespace tandem::cli
