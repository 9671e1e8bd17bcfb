// SPDX-License-Identifier: Apache-2.0
// `tandem bench`: a self-benchmark of tandem's own kernels at real model shapes. Reports
// mean/stddev/p50/p99 latency, GFLOP/s (and GB/s for memory-bound cases) and the share of the FMA
// peak measured in the same process. The comparison with oneDNN and OpenBLAS lives in bench/
// (tandem_bench_kernels).
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <sstream>

#include "commands.h"
#include "report.h"
#include "tandem/core/backend.h"
#include "tandem/core/build_info.h"
#include "tandem/core/error.h"
#include "tandem/core/profiler.h"
#include "tandem/ops/ops.h"

namespace tandem::cli {
namespace {

struct Case {
  std::string suite, name, params;
  double flops = 0;  // per run
  double bytes = 0;  // bytes a memory-bound run must move (0 = compute-bound)
  std::function<void()> run;
};

Tensor random_tensor(const Shape& shape, DType dtype, Device device, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (auto& x : v) x = dist(rng);
  Tensor f = Tensor::from_vector(v, shape, DType::kF32);
  Tensor out = f;
  if (dtype != DType::kF32) {
    out = Tensor::empty(shape, dtype);
    ops::convert(f, out);
  }
  return out.to(device);
}

void add_gemm(std::vector<Case>& cases, Device dev, const std::string& name, int64_t m, int64_t n,
              int64_t k, DType wdt) {
  Tensor a = random_tensor({m, k}, DType::kF32, dev, 1);
  Tensor w = random_tensor({n, k}, wdt, dev, 2);
  Tensor c = Tensor::empty({m, n}, DType::kF32, dev);
  Case cs;
  cs.suite = "gemm";
  cs.name = name;
  cs.params = cat("m=", m, " n=", n, " k=", k, " w=", dtype_name(wdt));
  cs.flops = 2.0 * m * n * k;
  if (m <= 8) cs.bytes = static_cast<double>(w.nbytes()) + 4.0 * (m * k + m * n);
  cs.run = [a, w, c]() mutable { ops::gemm(a, w, c, {.trans_b = true}); };
  cases.push_back(std::move(cs));
}

void add_attention(std::vector<Case>& cases, Device dev, const std::string& name, int64_t tq,
                   int64_t tk, int64_t hq, int64_t hkv, int64_t d) {
  Tensor q = random_tensor({tq, hq, d}, DType::kF32, dev, 3);
  Tensor k = random_tensor({tk, hkv, d}, DType::kF32, dev, 4);
  Tensor v = random_tensor({tk, hkv, d}, DType::kF32, dev, 5);
  Tensor o = Tensor::empty({tq, hq, d}, DType::kF32, dev);
  Case cs;
  cs.suite = "attention";
  cs.name = name;
  cs.params = cat("tq=", tq, " tk=", tk, " hq=", hq, " hkv=", hkv, " d=", d, " causal");
  // Causal: query i (at position tk - tq + i) sees tk - tq + i + 1 keys; QK^T and PV cost 2*d each
  // per pair.
  double pairs = 0;
  for (int64_t i = 0; i < tq; ++i) pairs += static_cast<double>(tk - tq + i + 1);
  cs.flops = 4.0 * d * hq * pairs;
  if (tq == 1) cs.bytes = 2.0 * 4.0 * tk * hkv * d;
  cs.run = [q, k, v, o]() mutable { ops::attention(q, k, v, o); };
  cases.push_back(std::move(cs));
}

std::string fmt_fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

bool wants(const std::string& suites, const std::string& s) {
  std::stringstream ss(suites);
  std::string item;
  while (std::getline(ss, item, ','))
    if (item == s) return true;
  return false;
}

}  // namespace

int run_bench(const BenchOptions& o) {
  const Device dev = Device::parse(o.device);
  auto& backend = BackendRegistry::global().get(dev);
  if (o.threads > 0) set_cpu_num_threads(o.threads);
  std::stringstream ss(o.suite);
  for (std::string item; std::getline(ss, item, ',');)
    if (item != "gemm" && item != "attention")
      throw InvalidArgument(cat("--suite: unknown suite '", item, "' (gemm, attention)"));

  Progress progress(!o.no_progress);
  progress.update("measuring the FMA peak");
  const double peak = dev.is_cpu() ? measure_cpu_fma_peak_flops(cpu_num_threads()) : 0.0;

  std::vector<Case> cases;
  if (wants(o.suite, "gemm")) {
    // SmolLM2-135M layer: d 576, 9 query / 3 KV heads of 64, FFN 1536; a 128-token prefill and
    // decode.
    add_gemm(cases, dev, "smollm2.qkv", 128, 960, 576, DType::kF32);
    add_gemm(cases, dev, "smollm2.ffn_up", 128, 1536, 576, DType::kF32);
    add_gemm(cases, dev, "smollm2.ffn_down", 128, 576, 1536, DType::kF32);
    add_gemm(cases, dev, "smollm2.decode_up", 1, 1536, 576, DType::kF32);
    add_gemm(cases, dev, "smollm2.decode_up", 1, 1536, 576, DType::kQ4_1);
    add_gemm(cases, dev, "smollm2.prefill_up", 128, 1536, 576, DType::kQ4_1);
    // LLaMA-7B layer: d 4096, FFN 11008.
    add_gemm(cases, dev, "llama7b.q_proj", 128, 4096, 4096, DType::kF32);
    add_gemm(cases, dev, "llama7b.decode_up", 1, 11008, 4096, DType::kQ4_1);
    add_gemm(cases, dev, "llama7b.decode_up", 1, 11008, 4096, DType::kQ8_0);
  }
  if (wants(o.suite, "attention")) {
    add_attention(cases, dev, "smollm2.prefill", 512, 512, 9, 3, 64);
    add_attention(cases, dev, "smollm2.decode", 1, 4096, 9, 3, 64);
    add_attention(cases, dev, "llama7b.decode", 1, 4096, 32, 32, 128);
  }

  nlohmann::json results = nlohmann::json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    Case& c = cases[i];
    progress.update(cat("[", i + 1, "/", cases.size(), "] ", c.suite, " ", c.name, " ", c.params));
    for (int w = 0; w < o.warmup; ++w) c.run();
    backend.synchronize(dev.index);
    std::vector<double> ms;
    for (int r = 0; r < o.repetitions; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      c.run();
      backend.synchronize(dev.index);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    const SampleStats st = stats_of(ms);
    nlohmann::json r = {
        {"suite", c.suite},       {"name", c.name},
        {"params", c.params},     {"device", dev.to_string()},
        {"samples_ms", ms},       {"mean_ms", st.mean},
        {"stddev_ms", st.stddev}, {"p50_ms", st.p50},
        {"p99_ms", st.p99},       {"gflops_per_s", c.flops / (st.p50 * 1e-3) / 1e9}};
    if (peak > 0) r["fma_peak_share"] = c.flops / (st.p50 * 1e-3) / peak;
    if (c.bytes > 0) r["gbytes_per_s"] = c.bytes / (st.p50 * 1e-3) / 1e9;
    results.push_back(r);
  }
  progress.update("");

  const nlohmann::json build = build_info_json(), system = system_json();
  if (o.output == "json") {
    nlohmann::json j = {{"schema_version", 1},
                        {"build", build},
                        {"system", system},
                        {"fma_peak_flops_per_s", peak},
                        {"params", {{"repetitions", o.repetitions}, {"warmup", o.warmup}}},
                        {"results", results}};
    std::printf("%s\n", j.dump(2).c_str());
  } else if (o.output == "jsonl") {
    for (auto r : results) {
      r["schema_version"] = 1;
      r["build"] = build;
      r["system"] = system;
      r["fma_peak_flops_per_s"] = peak;
      std::printf("%s\n", r.dump().c_str());
    }
  } else if (o.output == "csv") {
    std::printf(
        "suite,name,params,device,mean_ms,stddev_ms,p50_ms,p99_ms,gflops_per_s,gbytes_per_s,fma_"
        "peak_share\n");
    for (const auto& r : results) {
      std::printf("%s,%s,%s,%s,%.4f,%.4f,%.4f,%.4f,%.3f,%.3f,%.4f\n",
                  r["suite"].get<std::string>().c_str(), r["name"].get<std::string>().c_str(),
                  r["params"].get<std::string>().c_str(), r["device"].get<std::string>().c_str(),
                  r["mean_ms"].get<double>(), r["stddev_ms"].get<double>(),
                  r["p50_ms"].get<double>(), r["p99_ms"].get<double>(),
                  r["gflops_per_s"].get<double>(), r.value("gbytes_per_s", 0.0),
                  r.value("fma_peak_share", 0.0));
    }
  } else {
    std::printf(
        "tandem bench on %s (%d CPU threads); measured FMA peak %.1f GFLOP/s; p50 of %d runs\n\n",
        dev.to_string().c_str(), cpu_num_threads(), peak / 1e9, o.repetitions);
    std::printf(
        "| suite | case | params | p50 ms | mean ± sd ms | GFLOP/s | %% FMA peak | GB/s |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : results) {
      std::printf(
          "| %s | %s | %s | %.3f | %.3f ± %.3f | %.1f | %s | %s |\n",
          r["suite"].get<std::string>().c_str(), r["name"].get<std::string>().c_str(),
          r["params"].get<std::string>().c_str(), r["p50_ms"].get<double>(),
          r["mean_ms"].get<double>(), r["stddev_ms"].get<double>(), r["gflops_per_s"].get<double>(),
          r.contains("fma_peak_share")
              ? cat(static_cast<int>(r["fma_peak_share"].get<double>() * 100 + 0.5), "%").c_str()
              : "-",
          r.contains("gbytes_per_s") ? fmt_fixed(r["gbytes_per_s"].get<double>(), 1).c_str() : "-");
    }
  }
  return 0;
}

}  // namespace tandem::cli
