// SPDX-License-Identifier: Apache-2.0
// `tandem bench-kv-attention`: decode-step attention over a long cache, f32 against each KV
// policy's format, timed interleaved (f32, policy, f32, policy, ...) in one process so that load
// from other programs hits both alike; reports the per-step time of each and their ratio. The
// cache has SmolLM2-135M's attention shape (3 KV heads x 64, 9 query heads) and random keys and
// values; --layers layers are attended per step, as a decode step of that many layers would.
// Wall-clock medians give the ratio; the CPU-time medians (process CPU time, so all threads) are
// printed beside them because on a shared machine they move less with other programs' load. GB/s
// is the cache's bytes (each step reads all of them once) over the median step time, to compare
// with the STREAM-like triad bandwidth measured first (same thread count; --no-bandwidth skips it).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../../src/llm/kv_quant/attention.h"
#include "commands.h"
#include "report.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/core/profiler.h"
#include "tandem/llm/kv_policy_registry.h"
#include "tandem/llm/kv_quant.h"
#include "tandem/llm/model.h"

namespace tandem::cli {
namespace {

struct BenchKvAttentionOptions {
  std::string policies = "int8,q8_0,int4,q4_0,kivi4,kivi2,qokv";
  int context = 8192;
  int layers = 4;
  int repetitions = 20;
  int threads = 0;
  bool bandwidth = true;  // measure the triad bandwidth first
};

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The first three fields of /proc/loadavg ("?" where it cannot be read).
std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  if (!(f >> a >> b >> c)) return "?";
  return a + " " + b + " " + c;
}

llm::KvCache make_filled(const llm::KvCacheShape& s, std::shared_ptr<llm::KvPolicy> policy,
                         int context) {
  llm::KvCache cache(s, std::move(policy));
  std::mt19937_64 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<int32_t> pos(static_cast<size_t>(context));
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> k(static_cast<size_t>(context) * s.n_kv_heads * s.head_dim), v(k.size());
  for (int l = 0; l < s.n_layers; ++l) {
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng);
    cache.append(l, Tensor::from_vector(k, {context, s.n_kv_heads, s.head_dim}, DType::kF32),
                 Tensor::from_vector(v, {context, s.n_kv_heads, s.head_dim}, DType::kF32), pos);
  }
  return cache;
}

int run_bench_kv_attention(const BenchKvAttentionOptions& o) {
  if (o.threads > 0) set_cpu_num_threads(o.threads);
  llm::KvCacheShape s;
  s.n_layers = o.layers;
  s.n_kv_heads = 3;
  s.head_dim = 64;
  const int n_heads = 9;
  llm::KvCache ref = make_filled(s, nullptr, o.context);
  std::mt19937_64 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> qv(static_cast<size_t>(n_heads) * s.head_dim);
  for (float& x : qv) x = nd(rng);
  const Tensor q = Tensor::from_vector(qv, {1, n_heads, s.head_dim}, DType::kF32);
  const int32_t qpos = o.context;
  Tensor out = Tensor::empty({1, n_heads, s.head_dim}, DType::kF32);
  // Wall time and CPU time of the process (all threads) of one step.
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  // driver: call the ragged-attention driver directly (cache_attention sends f32 caches to its
  // own kernel).
  auto step = [&](const llm::KvCache& c, bool driver = false) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    for (int l = 0; l < s.n_layers; ++l) {
      if (driver) {
        llm::ragged_cache_attention(q, {&qpos, 1}, c, l, out, scale);
      } else {
        llm::cache_attention(q, {&qpos, 1}, c, l, out, scale);
      }
    }
    return std::pair{std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                     cpu_seconds() - c0};
  };
  std::printf("load average at start: %s\n", load_average().c_str());
  if (o.bandwidth) {  // the machine's bound, measured now with the same thread count
    tandem::ProfileOptions po;
    po.threads = o.threads;
    const double bw = measure_memory_bandwidth_bytes_per_s(Device::cpu(), po);
    std::printf("STREAM-like triad on %d thread(s): %.2f GB/s\n",
                o.threads > 0 ? o.threads : cpu_num_threads(), bw * 1e-9);
  }
  std::printf(
      "| policy | context | f32 ms/step | policy ms/step | policy / f32 time | f32 CPU ms | "
      "policy CPU ms | CPU ratio | f32 GB/s | policy GB/s | f32 MiB | policy MiB | bits/elem "
      "|\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::stringstream list(o.policies);
  std::string name;
  while (std::getline(list, name, ',')) {
    // Two baselines besides the policies: "f32-driver" (the f32 cache through the driver) and
    // "f16" (an f16 cache, which cache_attention sends to the driver).
    const bool driver = name == "f32-driver";
    llm::KvCacheShape cs = s;
    if (name == "f16") cs.dtype = DType::kF16;
    auto policy = driver || name == "f16" ? nullptr : llm::make_kv_policy(name, {}, s);
    llm::KvCache cache = make_filled(cs, policy, driver ? 32 : o.context);
    if (driver) cache = ref.clone();
    if (policy != nullptr &&
        policy->query_window() > 0) {  // the last 32 rows as the observed window
      std::vector<int32_t> wpos(32);
      std::iota(wpos.begin(), wpos.end(), o.context - 32);
      std::vector<float> w(static_cast<size_t>(32) * n_heads * s.head_dim);
      for (float& x : w) x = nd(rng);
      const Tensor wq = Tensor::from_vector(w, {32, n_heads, s.head_dim}, DType::kF32);
      for (int l = 0; l < s.n_layers; ++l) policy->observe_queries(cache, l, wq, wpos, true);
    }
    if (policy != nullptr) policy->on_prefill_done(cache);
    step(ref), step(cache, driver);  // warm-up
    std::vector<double> tf, tq, cf, cq;
    for (int r = 0; r < o.repetitions; ++r) {
      const auto [wf, uf] = step(ref);
      const auto [wq, uq] = step(cache, driver);
      tf.push_back(wf), cf.push_back(uf);
      tq.push_back(wq), cq.push_back(uq);
    }
    const double mf = stats_of(tf).p50, mq = stats_of(tq).p50;
    const double uf = stats_of(cf).p50, uq = stats_of(cq).p50;
    const llm::KvStorageStats st = llm::kv_storage_stats(cache);
    // Every step reads the whole cache once: bytes over the median step time.
    std::printf(
        "| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f | %.2f | %.2f | "
        "%.2f |\n",
        name.c_str(), o.context, mf * 1e3, mq * 1e3, mq / mf, uf * 1e3, uq * 1e3, uq / uf,
        ref.bytes() / mf * 1e-9, st.bytes / mq * 1e-9, ref.bytes() / 1048576.0,
        st.bytes / 1048576.0, st.bits_per_element);
    std::fflush(stdout);
  }
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<BenchKvAttentionOptions>();
  CLI::App* sub = app.add_subcommand(
      "bench-kv-attention",
      "Decode attention over a long cache: f32 vs quantized KV policies, interleaved timing");
  sub->add_option("--policies", o->policies,
                  "Comma-separated KV policies; also f16 (an f16 cache) and f32-driver (the f32 "
                  "cache through the ragged-attention driver)");
  sub->add_option("-c,--context", o->context, "Cached tokens")->check(CLI::Range(32, 1 << 20));
  sub->add_option("--layers", o->layers, "Layers attended per step")->check(CLI::Range(1, 128));
  sub->add_option("-r,--repetitions", o->repetitions, "Timed steps of each (median reported)")
      ->check(CLI::Range(1, 100000));
  sub->add_option("-t,--threads", o->threads, "CPU threads (0: the default)")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("!--no-bandwidth", o->bandwidth, "Skip the triad bandwidth measurement");
  return Command{sub, [o] { return run_bench_kv_attention(*o); }};
});

}  // namespace
}  // namespace tandem::cli
