// SPDX-License-Identifier: Apache-2.0
// `tandem bench-llm`: prefill and decode speed of a GGUF model, measured the way llama-bench
// measures pp/tg so the two compare as ratios (bench/llm/compare_llamacpp.py runs both):
//   prefill  --prompt-tokens random token ids run from an empty cache in forward passes of
//            --batch tokens (only the last row's logits), tokens / wall time     (llama-bench pp)
//   decode   --gen single-token forward passes from an empty cache, each feeding back the greedy
//            choice of the previous one, tokens / wall time                      (llama-bench tg)
//            (--decode int8, the default: int8 activations as llama.cpp; --decode f32: reference)
//   TTFT     prefill of the prompt plus choosing the first token
// Each is repeated -r times after one warm-up run; mean and stddev are reported. Also: KV-cache
// bytes after prompt + gen tokens, the allocator's peak bytes during the runs, weight bytes, and
// decode's share of the memory-bandwidth bound: bytes a decode step must read (every weight
// matrix once, one embedding row, the KV cache at the mean decode length) times decode tokens/s,
// divided by a STREAM-triad bandwidth measured on the same threads.
// With --kv-policy NAME (a KV policy or '+' chain, kv_policy_registry.h) it measures decode at
// long context instead: the prompt is prefilled once, the policy runs (on_prefill_done: e.g. the
// cache is quantized), then -r segments of --gen decode steps continue the sequence (each step
// followed by on_decode_step), one segment of 4 steps first as warm-up; decode tokens/s per
// segment, KV bytes and bits/element after the prefill. `--kv-policy full` is the f32 baseline.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "commands.h"
#include "model_path.h"
#include "report.h"
#include "tandem/core/allocator.h"
#include "tandem/core/backend.h"
#include "tandem/core/build_info.h"
#include "tandem/core/error.h"
#include "tandem/core/profiler.h"
#include "tandem/llm/kv_policy_registry.h"
#include "tandem/llm/kv_quant.h"
#include "tandem/llm/model.h"
#include "tandem/llm/model_store.h"
#include "tandem/llm/synthetic_model.h"

namespace tandem::cli {
namespace {

struct BenchLlmOptions {
  std::string model;
  std::string synthetic;  // "PRESET[:LAYERS]": a generated-weight model of that shape
  std::string synthetic_dtype = "q4_1";
  int prompt_tokens = 512;
  int gen = 128;
  int batch = 512;
  int threads = 0;
  int repetitions = 3;
  bool no_bandwidth = false;
  llm::DecodeArithmetic decode = llm::DecodeArithmetic::kInt8;
  std::string output = "md";
  bool no_progress = false;
  std::string kv_policy;  // non-empty: long-context decode with this policy
  std::string kv_calibration;
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int32_t argmax(const Tensor& logits) {
  const float* p = logits.data<float>();
  const int64_t n = logits.numel();
  return static_cast<int32_t>(std::max_element(p, p + n) - p);
}

// Prefill of `ids` from an empty cache; returns seconds, and the first token (greedy).
double run_prefill(const llm::Model& m, const std::vector<int32_t>& ids, int batch,
                   llm::KvCache& cache, int32_t* first) {
  cache.clear();
  const int n = static_cast<int>(ids.size());
  std::vector<int32_t> pos(ids.size());
  for (int i = 0; i < n; ++i) pos[i] = i;
  const auto t0 = Clock::now();
  Tensor logits;
  for (int b = 0; b < n; b += batch) {
    const int len = std::min(batch, n - b);
    logits = m.forward(std::span<const int32_t>(ids).subspan(b, len),
                       std::span<const int32_t>(pos).subspan(b, len), cache, {.last_only = true});
  }
  *first = argmax(logits);
  return since(t0);
}

// `gen` decode steps from an empty cache starting with `start`; returns seconds.
double run_decode(const llm::Model& m, int32_t start, int gen, llm::KvCache& cache,
                  llm::DecodeArithmetic decode) {
  cache.clear();
  int32_t tok = start;
  const auto t0 = Clock::now();
  for (int i = 0; i < gen; ++i) {
    const int32_t p = i;
    const Tensor logits =
        m.forward({&tok, 1}, {&p, 1}, cache, {.last_only = true, .decode = decode});
    tok = argmax(logits);
  }
  return since(t0);
}

// Bytes one decode step reads from memory besides the KV cache: every weight matrix and norm of
// the layers, the output norm and matrix, and one row of the token embedding.
// Bytes of the parts outside the layers that one decode step reads: output norm and matrix, one
// embedding row.
int64_t m_head_bytes(const llm::Model& m) {
  return m.output_norm().nbytes() + m.output().nbytes() +
         m.token_embd().nbytes() / std::max<int64_t>(1, m.token_embd().size(0));
}

int64_t decode_weight_bytes(const llm::Model& m) {
  int64_t n = m_head_bytes(m);
  for (int l = 0; l < m.config().n_layers; ++l) {
    const llm::LayerWeights& w = m.layer(l);
    for (const Tensor* t :
         {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.ffn_norm, &w.w_gate, &w.w_up, &w.w_down}) {
      n += t->nbytes();
    }
  }
  return n;
}

nlohmann::json stat_json(const std::vector<double>& v) {
  const SampleStats s = stats_of(v);
  return {{"mean", s.mean}, {"stddev", s.stddev}, {"min", s.min}, {"samples", v}};
}

// The GGUF file of a synthetic model ("llama7b:2"), written into the model cache on first use.
std::string synthetic_model_path(const std::string& spec, const std::string& dtype, bool progress) {
  const size_t colon = spec.find(':');
  llm::SyntheticLlamaConfig cfg = llm::synthetic_preset(spec.substr(0, colon));
  if (colon != std::string::npos) {
    try {
      cfg.n_layers = std::stoi(spec.substr(colon + 1));
    } catch (const std::exception&) {
      throw InvalidArgument(
          cat("bench-llm --synthetic ", spec, ": layers after ':' must be a number"));
    }
    if (cfg.n_layers < 1 || cfg.n_layers > 1024)
      throw InvalidArgument(cat("bench-llm --synthetic ", spec, ": layers must be in [1, 1024]"));
  }
  cfg.weight_dtype = parse_dtype(dtype);
  const std::filesystem::path dir = std::filesystem::path(llm::model_cache_dir()) / "synthetic";
  const std::filesystem::path file =
      dir / cat(cfg.name, "-", cfg.n_layers, "l-", dtype_name(cfg.weight_dtype), ".gguf");
  if (!std::filesystem::exists(file)) {
    std::filesystem::create_directories(dir);
    Progress p(progress);
    p.update(cat("bench-llm: writing ", file.string(), " (generated weights)"));
    llm::write_synthetic_llama(cfg, file.string());
    p.update("");
  }
  return file.string();
}

// Long-context decode with a KV policy (see the file comment).
int run_policy_bench(const BenchLlmOptions& o, const llm::Model& model, const std::string& path,
                     const std::vector<int32_t>& prompt) {
  llm::KvPolicyOptions kopt;
  kopt.calibration_path = o.kv_calibration;
  const llm::KvCacheShape shape = model.make_cache().shape();
  auto policy = llm::make_kv_policy(o.kv_policy, kopt, shape);
  llm::KvCache cache = model.make_cache(policy);
  Progress progress(!o.no_progress);
  progress.update(cat("bench-llm: prefill ", prompt.size(), " tokens"));
  int32_t tok = 0;
  const int n = static_cast<int>(prompt.size());
  std::vector<int32_t> pos(prompt.size());
  for (int i = 0; i < n; ++i) pos[i] = i;
  const auto t0 = Clock::now();
  for (int b = 0; b < n; b += o.batch) {
    const int len = std::min(o.batch, n - b);
    const auto ids = std::span<const int32_t>(prompt).subspan(b, len);
    const auto ps = std::span<const int32_t>(pos).subspan(b, len);
    // The model hands the policy each batch's last query_window() queries (observe_queries).
    const Tensor logits = model.forward(ids, ps, cache, {.last_only = true});
    tok = argmax(logits);
  }
  const double prefill_s = since(t0);
  const auto t1 = Clock::now();
  policy->on_prefill_done(cache);
  const double policy_s = since(t1);
  const llm::KvStorageStats st = llm::kv_storage_stats(cache);
  int32_t p = n;
  auto decode = [&](int steps) {
    const auto td = Clock::now();
    for (int i = 0; i < steps; ++i, ++p) {
      const Tensor logits =
          model.forward({&tok, 1}, {&p, 1}, cache, {.last_only = true, .decode = o.decode});
      tok = argmax(logits);
      policy->on_decode_step(cache);
    }
    return since(td);
  };
  progress.update("bench-llm: decode warm-up");
  decode(4);
  std::vector<double> tps;
  for (int r = 0; r < o.repetitions; ++r) {
    progress.update(cat("bench-llm: decode segment ", r + 1, "/", o.repetitions));
    tps.push_back(o.gen / decode(o.gen));
  }
  progress.update("");
  const SampleStats dc = stats_of(tps);
  if (o.output == "json") {
    const nlohmann::json j = {{"schema_version", 1},
                              {"kind", "bench_llm_kv_policy"},
                              {"build", build_info_json()},
                              {"system", system_json()},
                              {"params",
                               {{"model", path},
                                {"kv_policy", o.kv_policy},
                                {"kv_calibration", o.kv_calibration},
                                {"prompt_tokens", n},
                                {"gen", o.gen},
                                {"repetitions", o.repetitions},
                                {"threads", cpu_num_threads()},
                                {"decode", llm::decode_arithmetic_name(o.decode)}}},
                              {"results",
                               {{"prefill_s", prefill_s},
                                {"policy_s", policy_s},
                                {"decode_tokens_per_s", stat_json(tps)},
                                {"kv_bytes_after_prefill", st.bytes},
                                {"kv_bits_per_element", st.bits_per_element}}}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf(
      "| kv policy | context | prefill s | policy s | decode tok/s | +/- | KV MiB | "
      "KV bits/elem |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  std::printf("| %s | %d | %.2f | %.3f | %.2f | %.2f | %.2f | %.2f |\n", o.kv_policy.c_str(), n,
              prefill_s, policy_s, dc.mean, dc.stddev, st.bytes / 1048576.0, st.bits_per_element);
  return 0;
}

int run_bench_llm(const BenchLlmOptions& o) {
  if (o.threads > 0) set_cpu_num_threads(o.threads);
  const int threads = cpu_num_threads();
  if (!o.synthetic.empty() && !o.model.empty())
    throw InvalidArgument("bench-llm: give either -m or --synthetic, not both");
  const std::string path =
      o.synthetic.empty() ? resolve_model_path(o.model, !o.no_progress)
                          : synthetic_model_path(o.synthetic, o.synthetic_dtype, !o.no_progress);
  const llm::Model model = llm::Model::load(path);
  const llm::ModelConfig& c = model.config();
  if (c.context_length > 0 && std::max<int64_t>(o.prompt_tokens, o.gen) > c.context_length) {
    throw InvalidArgument(cat("bench-llm: ", std::max(o.prompt_tokens, o.gen),
                              " tokens exceed the model's context length ", c.context_length));
  }
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(c.vocab_size - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(o.prompt_tokens));
  for (auto& t : prompt) t = pick(rng);

  if (!o.kv_policy.empty()) return run_policy_bench(o, model, path, prompt);
  Progress progress(!o.no_progress);
  llm::KvCache cache = model.make_cache();
  allocator(Device::cpu()).reset_peak();
  std::vector<double> prefill_tps, decode_tps, ttft_s;
  int32_t first = 0;
  for (int r = -1; r < o.repetitions; ++r) {  // r = -1: warm-up
    progress.update(cat("bench-llm: ", r < 0 ? "warm-up" : "run " + std::to_string(r + 1),
                        ", prefill ", o.prompt_tokens, " tokens"));
    const double tp = run_prefill(model, prompt, o.batch, cache, &first);
    progress.update(cat("bench-llm: ", r < 0 ? "warm-up" : "run " + std::to_string(r + 1),
                        ", decode ", o.gen, " tokens"));
    const double td = o.gen > 0 ? run_decode(model, first, o.gen, cache, o.decode) : 0.0;
    if (r < 0) continue;
    prefill_tps.push_back(o.prompt_tokens / tp);
    ttft_s.push_back(tp);
    if (o.gen > 0) decode_tps.push_back(o.gen / td);
  }
  const int64_t peak_bytes = memory_stats(Device::cpu()).peak_bytes;
  // KV bytes of one sequence holding the prompt and the generated tokens.
  cache.clear();
  {
    std::vector<int32_t> all = prompt;
    all.resize(prompt.size() + static_cast<size_t>(o.gen), first);
    std::vector<int32_t> pos(all.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
    for (size_t b = 0; b < all.size(); b += static_cast<size_t>(o.batch)) {
      const size_t len = std::min(all.size() - b, static_cast<size_t>(o.batch));
      model.forward(std::span<const int32_t>(all).subspan(b, len),
                    std::span<const int32_t>(pos).subspan(b, len), cache, {.last_only = true});
    }
  }
  const int64_t kv_bytes = cache.bytes();
  cache.clear();
  const int64_t kv_bytes_per_token =
      o.prompt_tokens + o.gen > 0 ? kv_bytes / (o.prompt_tokens + o.gen) : 0;

  double bandwidth = 0.0;
  if (!o.no_bandwidth) {
    progress.update("bench-llm: measuring memory bandwidth (STREAM triad)");
    tandem::ProfileOptions po;
    po.threads = threads;
    bandwidth = measure_memory_bandwidth_bytes_per_s(Device::cpu(), po);
  }
  progress.update("");

  const int64_t weight_read = decode_weight_bytes(model);
  const double mean_kv_read = kv_bytes_per_token * (o.gen / 2.0);  // decode runs 0..gen-1 tokens
  const double bytes_per_token = weight_read + mean_kv_read;
  const SampleStats pf = stats_of(prefill_tps), dc = stats_of(decode_tps), tt = stats_of(ttft_s);
  // Per layer: decode time split in proportion to the bytes each part reads (the layers' weights
  // and KV, against the output matrix and norms), since decode is memory-bound.
  const double layer_bytes = (bytes_per_token - (m_head_bytes(model))) / c.n_layers;
  const double ms_per_token = dc.mean > 0 ? 1000.0 / dc.mean : 0.0;
  const double ms_per_layer =
      bytes_per_token > 0 ? ms_per_token * layer_bytes / bytes_per_token : 0;
  const double achieved = bytes_per_token * dc.mean;
  const double share = bandwidth > 0 ? achieved / bandwidth : 0.0;

  if (o.output == "json") {
    nlohmann::json j = {{"schema_version", 1},
                        {"kind", "bench-llm"},
                        {"build", build_info_json()},
                        {"system", system_json()},
                        {"params",
                         {{"model", path},
                          {"model_name", c.name},
                          {"prompt_tokens", o.prompt_tokens},
                          {"gen_tokens", o.gen},
                          {"batch", o.batch},
                          {"threads", threads},
                          {"repetitions", o.repetitions},
                          {"decode", llm::decode_arithmetic_name(o.decode)}}},
                        {"results",
                         {{"prefill_tokens_per_s", stat_json(prefill_tps)},
                          {"decode_tokens_per_s", stat_json(decode_tps)},
                          {"ttft_s", stat_json(ttft_s)},
                          {"kv_bytes", kv_bytes},
                          {"kv_bytes_per_token", kv_bytes_per_token},
                          {"peak_tensor_bytes", peak_bytes},
                          {"weight_bytes", model.weight_bytes()},
                          {"decode_bytes_per_token", bytes_per_token},
                          {"decode_bytes_per_s", achieved},
                          {"memory_bandwidth_bytes_per_s", bandwidth},
                          {"decode_bandwidth_share", share},
                          {"decode_ms_per_token", ms_per_token},
                          {"decode_ms_per_layer_estimate", ms_per_layer},
                          {"layers", c.n_layers}}}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  const std::string name = c.name.empty() ? path : c.name;
  std::printf("| model | threads | test | tokens/s | +/- |\n|---|---:|---|---:|---:|\n");
  std::printf("| %s | %d | pp%d | %.2f | %.2f |\n", name.c_str(), threads, o.prompt_tokens, pf.mean,
              pf.stddev);
  if (o.gen > 0) {
    std::printf("| %s | %d | tg%d | %.2f | %.2f |\n", name.c_str(), threads, o.gen, dc.mean,
                dc.stddev);
  }
  std::printf(
      "\nTTFT (%d-token prompt) %.3f s; KV cache %.2f MiB for %d tokens (%lld bytes/token); peak "
      "tensor memory %.2f MiB; weights %.2f MiB (mapped)\n",
      o.prompt_tokens, tt.mean, kv_bytes / 1048576.0, o.prompt_tokens + o.gen,
      static_cast<long long>(kv_bytes_per_token), peak_bytes / 1048576.0,
      model.weight_bytes() / 1048576.0);
  if (o.gen > 0) {
    std::printf(
        "decode (%s activations) %.2f ms/token over %d layers: about %.3f ms per layer "
        "(byte-proportional share)\n",
        llm::decode_arithmetic_name(o.decode), ms_per_token, c.n_layers, ms_per_layer);
  }
  if (bandwidth > 0 && o.gen > 0) {
    std::printf(
        "decode reads %.2f MiB/token -> %.2f GB/s = %.1f%% of the measured %.2f GB/s (STREAM "
        "triad, %d threads)\n",
        bytes_per_token / 1048576.0, achieved / 1e9, 100.0 * share, bandwidth / 1e9, threads);
  }
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<BenchLlmOptions>();
  CLI::App* sub = app.add_subcommand(
      "bench-llm",
      "Prefill and decode tokens/s, TTFT and memory of a GGUF model (llama-bench style)");
  sub->add_option("-m,--model", o->model,
                  "GGUF model file (default: SmolLM2-135M-Instruct, fetched on first use)");
  sub->add_option("--synthetic", o->synthetic,
                  "Generated-weight model of a real shape instead of -m: PRESET[:LAYERS], presets "
                  "llama7b, mistral7b, tinyllama, smollm2-135m (e.g. llama7b:2); cached after the "
                  "first run");
  sub->add_option("--synthetic-dtype", o->synthetic_dtype, "Weight type of --synthetic")
      ->check(CLI::IsMember({"q4_0", "q4_1", "q8_0", "q4_k", "q6_k", "f16", "f32"}))
      ->capture_default_str();
  sub->add_option("-p,--prompt-tokens", o->prompt_tokens, "Prompt tokens (llama-bench -p)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("-n,--gen", o->gen, "Tokens to decode (llama-bench -n)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("-b,--batch", o->batch, "Tokens per prefill forward pass")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("-t,--threads", o->threads, "CPU threads (0: the default)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("-r,--repetitions", o->repetitions, "Measured runs after one warm-up")
      ->check(CLI::Range(1, 1000));
  sub->add_flag("--no-bandwidth", o->no_bandwidth, "Skip the memory-bandwidth measurement");
  CLI::Option* decode = add_decode_option(sub, o->decode);
  sub->add_flag_callback(
         "--int8", [o] { o->decode = llm::DecodeArithmetic::kInt8; },
         "Same as --decode int8, the default since 2026-12-03 (accepted for older scripts)")
      ->excludes(decode);
  sub->add_option("-o,--output", o->output, "Output format")->check(CLI::IsMember({"md", "json"}));
  sub->add_flag("--no-progress", o->no_progress, "No progress line on stderr");
  sub->add_option("--kv-policy", o->kv_policy,
                  "Decode at long context with this KV policy after a -p token prefill (int8, "
                  "int4, q8_0, q4_0, kivi2, kivi4, qokv, full = f32 baseline, '+' chains)");
  sub->add_option("--kv-calibration", o->kv_calibration, "Calibration file of --kv-policy")
      ->check(CLI::ExistingFile);
  return Command{sub, [o] { return run_bench_llm(*o); }};
});

}  // namespace
}  // namespace tandem::cli
