// SPDX-License-Identifier: Apache-2.0
// `tandem bench`: a self-benchmark of tandem's own kernels at real model shapes. Reports
// mean/stddev/p50/p99 latency, GFLOP/s (and GB/s for memory-bound cases) and the share of the FMA
// peak measured in the same process. Suites: gemm, attention (the default), copy (device copy
// bandwidth) and decode (int8-activation GEMV at SmolLM2 and 7B decode shapes, paged decode
// attention at 8k; GB/s also as a share of the copy's, when copy runs first). The comparison with
// oneDNN and OpenBLAS lives in bench/ (tandem_bench_kernels).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
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

// Device copy bandwidth: a 1 GiB copy on a GPU (256 MiB on the CPU) reads and writes every byte.
// The decode cases report their GB/s as a share of this one, measured in the same run.
void add_copy(std::vector<Case>& cases, Device dev) {
  const int64_t n = (dev.is_cpu() ? int64_t{64} : int64_t{256}) << 20;  // floats
  Tensor src = Tensor::zeros({n}, DType::kF32, dev);
  Tensor dst = Tensor::empty({n}, DType::kF32, dev);
  Case cs;
  cs.suite = "copy";
  cs.name = "device_copy";
  cs.params = cat(n * 4 >> 20, " MiB");
  cs.bytes = 2.0 * 4.0 * static_cast<double>(n);
  cs.run = [src, dst]() mutable { dst.copy_from(src); };
  cases.push_back(std::move(cs));
}

// The decode step's weight GEMV with int8 activations (GemmParams::int8_activations): m = 1.
void add_decode_gemv(std::vector<Case>& cases, Device dev, const std::string& name, int64_t n,
                     int64_t k, DType wdt) {
  Tensor a = random_tensor({1, k}, DType::kF32, dev, 1);
  Tensor w = random_tensor({n, k}, wdt, dev, 2);
  Tensor c = Tensor::empty({1, n}, DType::kF32, dev);
  Case cs;
  cs.suite = "decode";
  cs.name = name;
  cs.params = cat("m=1 n=", n, " k=", k, " w=", dtype_name(wdt), " int8 activations");
  cs.flops = 2.0 * n * k;
  cs.bytes = static_cast<double>(w.nbytes()) + 4.0 * (k + n);
  cs.run = [a, w, c]() mutable { ops::gemm(a, w, c, {.trans_b = true, .int8_activations = true}); };
  cases.push_back(std::move(cs));
}

// One decode row over a paged KV cache of `ctx` tokens per KV head in f16 pages of 256 slots.
void add_paged_decode(std::vector<Case>& cases, Device dev, const std::string& name, int64_t ctx,
                      int64_t hq, int64_t hkv, int64_t d) {
  constexpr int64_t kPage = 256;
  struct Store {
    std::vector<Tensor> k, v;
    std::vector<std::vector<int32_t>> pos;
    ops::PagedKv kv;
  };
  auto store = std::make_shared<Store>();
  for (int64_t h = 0; h < hkv; ++h) {
    for (int64_t t0 = 0; t0 < ctx; t0 += kPage) {
      const int64_t used = std::min(kPage, ctx - t0);
      store->k.push_back(random_tensor({kPage, d}, DType::kF16, dev, static_cast<uint32_t>(6 + h)));
      store->v.push_back(random_tensor({kPage, d}, DType::kF16, dev, static_cast<uint32_t>(7 + h)));
      std::vector<int32_t> pos(static_cast<size_t>(used));
      for (int64_t s = 0; s < used; ++s) pos[s] = static_cast<int32_t>(t0 + s);
      store->pos.push_back(std::move(pos));
    }
  }
  store->kv.heads.assign(hkv, {});
  const int64_t pages_per_head = (ctx + kPage - 1) / kPage;
  for (int64_t h = 0; h < hkv; ++h) {
    for (int64_t p = 0; p < pages_per_head; ++p) {
      const size_t i = static_cast<size_t>(h * pages_per_head + p);
      store->kv.heads[h].push_back(ops::KvPage{&store->k[i], &store->v[i], store->pos[i].data(),
                                               static_cast<int32_t>(store->pos[i].size())});
    }
  }
  Tensor q = random_tensor({1, hq, d}, DType::kF32, dev, 3);
  Tensor o = Tensor::empty({1, hq, d}, DType::kF32, dev);
  Case cs;
  cs.suite = "decode";
  cs.name = name;
  cs.params = cat("paged f16 ctx=", ctx, " hq=", hq, " hkv=", hkv, " d=", d);
  cs.flops = 4.0 * d * hq * static_cast<double>(ctx);
  cs.bytes = 2.0 * 2.0 * static_cast<double>(ctx * hkv * d);
  const std::vector<int32_t> qpos = {static_cast<int32_t>(ctx - 1)};
  cs.run = [store, q, o, qpos]() mutable { ops::paged_attention(q, qpos, store->kv, o); };
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
    if (item != "gemm" && item != "attention" && item != "copy" && item != "decode")
      throw InvalidArgument(
          cat("--suite: unknown suite '", item, "' (gemm, attention, copy, decode)"));

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

  if (wants(o.suite, "copy")) add_copy(cases, dev);
  if (wants(o.suite, "decode")) {
    // The weight products of one decode step (int8 activations) and decode attention at 8k.
    for (DType wdt : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0}) {
      add_decode_gemv(cases, dev, "smollm2.decode_qkv", 960, 576, wdt);
      add_decode_gemv(cases, dev, "smollm2.decode_up", 1536, 576, wdt);
      add_decode_gemv(cases, dev, "smollm2.decode_down", 576, 1536, wdt);
      add_decode_gemv(cases, dev, "llama7b.decode_q", 4096, 4096, wdt);
      add_decode_gemv(cases, dev, "llama7b.decode_up", 11008, 4096, wdt);
      add_decode_gemv(cases, dev, "llama7b.decode_down", 4096, 11008, wdt);
    }
    add_paged_decode(cases, dev, "smollm2.decode_attention", 8192, 9, 3, 64);
    add_paged_decode(cases, dev, "llama7b.decode_attention", 8192, 32, 32, 128);
    add_paged_decode(cases, dev, "gqa8.decode_attention", 8192, 64, 8, 128);
  }

  nlohmann::json results = nlohmann::json::array();
  double copy_gbps = 0.0;  // the copy case's GB/s, when it ran (it runs first)
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
    if (c.suite == "copy") copy_gbps = r["gbytes_per_s"].get<double>();
    if (c.suite == "decode" && copy_gbps > 0)
      r["copy_bandwidth_share"] = r["gbytes_per_s"].get<double>() / copy_gbps;
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
        "| suite | case | params | p50 ms | mean ± sd ms | GFLOP/s | %% FMA peak | GB/s | %% copy "
        "GB/s |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : results) {
      std::printf(
          "| %s | %s | %s | %.3f | %.3f ± %.3f | %.1f | %s | %s | %s |\n",
          r["suite"].get<std::string>().c_str(), r["name"].get<std::string>().c_str(),
          r["params"].get<std::string>().c_str(), r["p50_ms"].get<double>(),
          r["mean_ms"].get<double>(), r["stddev_ms"].get<double>(), r["gflops_per_s"].get<double>(),
          r.contains("fma_peak_share")
              ? cat(static_cast<int>(r["fma_peak_share"].get<double>() * 100 + 0.5), "%").c_str()
              : "-",
          r.contains("gbytes_per_s") ? fmt_fixed(r["gbytes_per_s"].get<double>(), 1).c_str() : "-",
          r.contains("copy_bandwidth_share")
              ? cat(static_cast<int>(r["copy_bandwidth_share"].get<double>() * 100 + 0.5), "%")
                    .c_str()
              : "-");
    }
  }
  return 0;
}

}  // namespace tandem::cli
