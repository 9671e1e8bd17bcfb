// SPDX-License-Identifier: Apache-2.0
// Recsys macro benchmark. Writes one JSON document to stdout (progress on stderr):
//   curves     for each model and policy, closed-loop load at each client count: p50/p95/p99
//              latency, throughput, queue and service times (the latency-vs-load curves)
//   embedding  pooled-lookup GB/s (bytes of the rows read) per table dtype and thread count, of
//              the embedding store and of the core op ops::embedding_bag on the same lookups,
//              next to the STREAM-triad bandwidth measured in the same run
//   mlp        MLP-layer GFLOP/s of zoo shapes next to the FMA peak measured in the same run
// Never asserts timings. scripts/recsys/plot_recsys.py draws docs/results/ from the JSON.
//
// --devices runs the curves on each executor: cpu (CpuExecutor, wall clock) and sim:h100,
// sim:h200, sim:a100, sim:cpu (SimExecutor: real scores, simulated time; --sim-duration simulated
// seconds per point). Each point also carries the op-level policies' scheduler counters
// (issued ops, measured wall-clock scheduler µs per issued op).
//
//   tandem_bench_recsys --models rm2,wnd,din,bst --clients 1,2,4,8,16,32,64 --duration 1
//   tandem_bench_recsys --skip-kernels --devices sim:h100,cpu
//       --policies fcfs,stream-pool,instances,b4,recos,race,recos+race   (one line)
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>

#include "tandem/core/backend.h"
#include "tandem/core/build_info.h"
#include "tandem/core/error.h"
#include "tandem/core/profiler.h"
#include "tandem/ops/ops.h"
#include "tandem/recsys/serving.h"
#include "tandem/recsys/sim_executor.h"
#include "tandem/recsys/workload.h"

using namespace tandem;
using namespace tandem::rec;

namespace {

using Sec = std::chrono::duration<double>;

template <class T>
std::vector<T> split_list(const std::string& s) {
  std::vector<T> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) {
      std::stringstream is(item);
      T v;
      is >> v;
      out.push_back(v);
    }
  return out;
}

// Best-of-`reps` seconds of fn.
template <class F>
double best_of(int reps, F&& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, Sec(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

nlohmann::json bench_embedding(int64_t table_mib, const std::vector<int>& threads) {
  nlohmann::json out = nlohmann::json::array();
  const int64_t dim = 64, bags = 1024, pooling = 80;
  for (DType dt : {DType::kF32, DType::kF16, DType::kI8}) {
    const int64_t rows = (table_mib << 20) / EmbeddingTable::row_bytes(dt, dim);
    const auto t = EmbeddingTable::generate("bench", rows, dim, dt, 1, 0.1f);
    // A fresh uniform id set per repetition, so rows touched by the previous one (21 MB of f32
    // rows) are not served from the cache.
    constexpr int kReps = 5;
    std::mt19937_64 rng(7);
    std::vector<std::vector<int64_t>> id_sets(kReps, std::vector<int64_t>(size_t(bags * pooling)));
    for (auto& set : id_sets)
      for (auto& i : set) i = int64_t(rng() % uint64_t(rows));
    std::vector<int64_t> off(size_t(bags + 1));
    for (int64_t b = 0; b <= bags; ++b) off[b] = b * pooling;
    std::vector<float> y(size_t(bags * dim));
    for (int th : threads) {
      int rep = 0;
      const double s = best_of(kReps, [&] {
        const std::vector<int64_t>& ids = id_sets[rep++];
        const int64_t chunk = (bags + th - 1) / th;
#pragma omp parallel for num_threads(th) schedule(static)
        for (int c = 0; c < th; ++c) {
          const int64_t b0 = c * chunk, n = std::min(chunk, bags - b0);
          if (n > 0)
            t.pooled_lookup(ids.data(), off.data() + b0, n, Pooling::kSum, y.data() + b0 * dim,
                            dim);
        }
      });
      const double bytes = double(bags * pooling * EmbeddingTable::row_bytes(dt, dim));
      // The same lookups through the core op ops::embedding_bag (CPU fast kernel, th threads).
      const int saved_threads = cpu_num_threads();
      set_cpu_num_threads(th);
      const Tensor table = Tensor::from_blob(const_cast<uint8_t*>(t.row_data(0)),
                                             {rows, dt == DType::kI8 ? dim + 8 : dim},
                                             dt == DType::kI8 ? DType::kU8 : dt);
      const Tensor offsets = Tensor::from_vector(off, {bags + 1}, DType::kI64);
      Tensor pooled = Tensor::empty({bags, dim}, DType::kF32);
      std::vector<Tensor> idx_sets;
      for (const auto& set : id_sets)
        idx_sets.push_back(Tensor::from_vector(set, {bags * pooling}, DType::kI64));
      int op_rep = 0;
      const double op_s =
          best_of(kReps, [&] { ops::embedding_bag(table, idx_sets[op_rep++], offsets, pooled); });
      set_cpu_num_threads(saved_threads);
      std::fprintf(stderr, "ops::embedding_bag %s x%d: %.2f GB/s\n",
                   std::string(dtype_name(dt)).c_str(), th, bytes / op_s / 1e9);
      out.push_back({{"dtype", std::string(dtype_name(dt))},
                     {"threads", th},
                     {"table_bytes", t.bytes()},
                     {"lookups", bags * pooling},
                     {"dim", dim},
                     {"seconds", s},
                     {"gb_per_s", bytes / s / 1e9},
                     {"lookups_per_s", double(bags * pooling) / s},
                     {"op_seconds", op_s},
                     {"op_gb_per_s", bytes / op_s / 1e9}});
      std::fprintf(stderr, "embedding %s x%d: %.2f GB/s\n", std::string(dtype_name(dt)).c_str(), th,
                   bytes / s / 1e9);
    }
  }
  return out;
}

nlohmann::json bench_mlp() {
  nlohmann::json out = nlohmann::json::array();
  struct Shape3 {
    const char* what;
    int64_t m, n, k;
  };
  const Shape3 shapes[] = {{"rm3 bottom.0 (q=128)", 128, 1024, 2560},
                           {"rm3 bottom.1 (q=128)", 128, 256, 1024},
                           {"dlrm-bench top.1 (q=128)", 128, 1024, 1024},
                           {"wnd top.0 (q=128)", 128, 1024, 1376},
                           {"rm2 top.0 (q=128)", 128, 128, 2112}};
  for (const auto& s : shapes) {
    Tensor a = Tensor::empty({s.m, s.k}, DType::kF32), w = Tensor::empty({s.n, s.k}, DType::kF32),
           c = Tensor::empty({s.m, s.n}, DType::kF32);
    std::fill_n(a.data<float>(), a.numel(), 0.5f);
    std::fill_n(w.data<float>(), w.numel(), 0.25f);
    ops::gemm(a, w, c, {.trans_b = true});
    const double t = best_of(10, [&] { ops::gemm(a, w, c, {.trans_b = true}); });
    const double flops = 2.0 * double(s.m * s.n * s.k);
    out.push_back({{"layer", s.what},
                   {"m", s.m},
                   {"n", s.n},
                   {"k", s.k},
                   {"threads", cpu_num_threads()},
                   {"seconds", t},
                   {"gflop_per_s", flops / t / 1e9}});
    std::fprintf(stderr, "mlp %s: %.1f GFLOP/s\n", s.what, flops / t / 1e9);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tandem recsys benchmark: latency-vs-load curves, lookup GB/s, MLP GFLOP/s"};
  std::string models = "rm2,wnd,din,bst", clients = "1,2,4,8,16,32,64";
  std::string policies = "fcfs,stream-pool,instances,dynamic-batch";
  std::string rates;  // open-loop Poisson rates (queries/s); empty = closed loop only
  std::string devices = "cpu";
  double duration = 1.0, warmup = 0.2, table_budget_mib = 256, sim_duration = 0.05;
  int64_t query_size = 0, emb_table_mib = 512;
  std::string size_quantiles;
  int streams = 4;
  double urgent_slack_ms = PolicyOptions{}.urgent_slack_ms;
  int fuse_across = PolicyOptions{}.fuse_across;
  bool skip_curves = false, skip_kernels = false;
  app.add_option("--models", models, "Zoo models")->capture_default_str();
  app.add_option("--clients", clients, "Client counts")->capture_default_str();
  app.add_option("--policies", policies, "Policies")->capture_default_str();
  app.add_option("--rates", rates, "Also open loop at these Poisson rates (queries/s)");
  app.add_option("--duration", duration, "Seconds per point")->capture_default_str();
  app.add_option("--devices", devices, "Executors: cpu, sim:h100, sim:h200, sim:a100, sim:cpu")
      ->capture_default_str();
  app.add_option("--sim-duration", sim_duration, "Simulated seconds per point on sim devices")
      ->capture_default_str();
  app.add_option("--warmup", warmup, "Warm-up seconds per point")->capture_default_str();
  app.add_option("--streams", streams, "Streams / instances")->capture_default_str();
  app.add_option("--urgent-slack-ms", urgent_slack_ms,
                 "Op-level policies: slack below which ops go least slack first ('inf': all)")
      ->capture_default_str();
  app.add_option("--fuse-across", fuse_across,
                 "recos / recos+race: horizontal fusion of up to this many queries' ops (1 = off, "
                 "0 = by executor: 4 on sim devices, 1 on the CPU)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--table-budget", table_budget_mib, "MiB of tables per model")
      ->capture_default_str();
  app.add_option("--query-size", query_size, "Rows per query (0 = model default)");
  app.add_option("--size-quantiles", size_quantiles,
                 "Query sizes drawn from this quantile file instead (MLPerf DLRM's "
                 "dist_quantile.txt format, e.g. bench/recsys/mlperf_dist_quantile.txt)");
  app.add_option("--emb-table", emb_table_mib, "MiB of the lookup benchmark's table")
      ->capture_default_str();
  app.add_flag("--skip-curves", skip_curves, "Only the kernel measurements");
  app.add_flag("--skip-kernels", skip_kernels, "Only the curves");
  CLI11_PARSE(app, argc, argv);
  try {
    nlohmann::json doc = {{"schema_version", 1},
                          {"build", build_info_json()},
                          {"params",
                           {{"models", models},
                            {"clients", clients},
                            {"policies", policies},
                            {"duration_s", duration},
                            {"devices", devices},
                            {"sim_duration_s", sim_duration},
                            {"warmup_s", warmup},
                            {"streams", streams},
                            {"urgent_slack_ms", urgent_slack_ms},
                            {"fuse_across", fuse_across},
                            {"table_budget_mib", table_budget_mib},
                            {"threads", cpu_num_threads()}}}};
    auto& reg = BackendRegistry::global();
    doc["system"] = {{"cpu", reg.get(Device::cpu()).device_info(0).name},
                     {"threads", cpu_num_threads()}};
    if (!skip_kernels) {
      ProfileOptions po;
      po.repeats = 3;
      const int t = cpu_num_threads();
      doc["machine"] = {
          {"triad_bytes_per_s", measure_memory_bandwidth_bytes_per_s(Device::cpu(), po)},
          {"fma_peak_flops_1t", measure_cpu_fma_peak_flops(1, po)},
          {"fma_peak_flops", measure_cpu_fma_peak_flops(t, po)}};
      std::vector<int> ths = {1};
      if (t > 1) ths.push_back(t);
      doc["embedding"] = bench_embedding(emb_table_mib, ths);
      doc["mlp"] = bench_mlp();
    }
    nlohmann::json curves = nlohmann::json::array();
    // Read once for every model.
    const std::vector<int64_t> quantiles =
        size_quantiles.empty() ? std::vector<int64_t>{} : read_size_quantiles(size_quantiles);
    if (!skip_curves) {
      for (const auto& name : split_list<std::string>(models)) {
        ModelConfig cfg = zoo_config(name);
        const double scale = cfg.fit_tables(int64_t(table_budget_mib * (1 << 20)));
        if (query_size > 0) cfg.query_size = query_size;
        const RecModel model = RecModel::generate(cfg);
        WorkloadOptions w;
        w.index.dist = IndexDist::kZipf;
        if (!quantiles.empty()) use_size_quantiles(w.size, quantiles);
        QueryFactory f(cfg, w);
        std::vector<std::shared_ptr<const QueryInputs>> pool;
        for (int i = 0; i < 32; ++i) pool.push_back(std::make_shared<QueryInputs>(f.make(i)));
        for (const auto& dev : split_list<std::string>(devices)) {
          const bool sim = dev.rfind("sim:", 0) == 0;
          const SimDevice sim_dev = sim ? sim_device_from_flag(dev) : SimDevice{};
          for (const auto& pol : split_list<std::string>(policies)) {
            // Closed-loop points (clients > 0), then open-loop points (rate_qps > 0).
            std::vector<std::pair<int, double>> points;
            for (int n : split_list<int>(clients)) points.emplace_back(n, 0.0);
            for (double r : split_list<double>(rates)) points.emplace_back(0, r);
            for (const auto& [n, rate] : points) {
              std::unique_ptr<Executor> ex;
              if (sim)
                ex = std::make_unique<SimExecutor>(sim_dev, SimOptions{});
              else
                ex = std::make_unique<CpuExecutor>(measured_profile(Device::cpu()));
              PolicyOptions po;
              po.policy = pol;
              po.streams = streams;
              po.urgent_slack_ms = urgent_slack_ms;
              po.fuse_across = fuse_across;
              po.max_batch_rows = 4 * cfg.query_size;
              po.max_queue_delay_us = 2000;
              auto policy = make_policy(model, *ex, po);
              LoadOptions lo;
              lo.clients = std::max(n, 1);
              lo.rate_qps = rate;
              lo.duration_s = sim ? sim_duration : duration;
              lo.warmup_s = sim ? 0.1 * sim_duration : warmup;
              const LoadStats s =
                  sim ? run_sim_load(*policy, static_cast<SimExecutor&>(*ex), pool, lo)
                      : run_load(*policy, pool, lo);
              nlohmann::json r = s.to_json();
              r["device"] = dev;
              r["scheduler"] = policy->stats();
              r["model"] = name;
              r["kind"] = to_string(cfg.kind);
              r["rows_scale"] = scale;
              r["query_size"] = cfg.query_size;
              if (!size_quantiles.empty()) r["query_sizes"] = w.size.quantiles;
              curves.push_back(r);
              std::fprintf(stderr, "%s %s %s %s: %.1f QPS, p50 %.2f ms, p99 %.2f ms\n", dev.c_str(),
                           name.c_str(), pol.c_str(),
                           rate > 0 ? ("open " + std::to_string(rate) + "/s").c_str()
                                    : (std::to_string(n) + " clients").c_str(),
                           s.throughput_qps, s.latency_ms.p50, s.latency_ms.p99);
            }
          }
        }
      }
    }
    doc["curves"] = curves;
    std::printf("%s\n", doc.dump(1).c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
