// SPDX-License-Identifier: Apache-2.0
// `tandem generate`: runs a LLaMA-family GGUF model on a prompt and streams the continuation to
// stdout as it is sampled; timing (prefill and decode tokens/s, time to first token) and memory go
// to stderr. Without -m it uses the default model (SmolLM2-135M-Instruct, fetched on first use).
// --chat wraps the prompt in the model's chat template (one user turn, generation prompt).
// --batch N generates N sequences together (generate_batch: one set of weight GEMMs per step for
// all of them); sequence 0 streams, the others are printed when done, and the batch's throughput
// goes to stderr.

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <vector>

#include "commands.h"
#include "model_path.h"
#include "tandem/core/allocator.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/llm/chat_template.h"
#include "tandem/llm/generate.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/kv_eval.h"
#include "tandem/llm/kv_policy_registry.h"
#include "tandem/llm/model.h"
#include "tandem/llm/tokenizer.h"
#include "tandem/llm/vocab.h"

namespace tandem::cli {

std::shared_ptr<llm::KvPolicy> make_sequence_kv_policy(const GenerateOptions& o,
                                                       const llm::Model& model) {
  llm::KvPolicyOptions p;
  if (!o.kv_budget.empty()) {
    const llm::KvBudget b = llm::parse_kv_budget(o.kv_budget);
    p.budget_tokens = b.tokens;
    p.budget_ratio = b.ratio;
  }
  p.window = o.kv_window;
  if (!o.kv_calibration.empty()) llm::set_kv_calibration(p, o.kv_calibration);
  p.seed = o.seed;
  for (const std::string& kv : o.kv_extra) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw InvalidArgument("generate: --kv-extra '" + kv + "' is not key=value");
    }
    p.extra[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  // --kv-quant NAME: a quantization scheme after the eviction policy (or alone).
  std::string spec = o.kv_policy;
  if (!o.kv_quant.empty()) spec = spec == "full" ? o.kv_quant : spec + "+" + o.kv_quant;
  llm::check_kv_settings({spec}, p.extra, "generate: --kv-extra");
  return llm::make_kv_policy(spec, p, model.make_cache().shape());
}

namespace {

int run_generate_batch(const llm::Model& model, const llm::Tokenizer& tokenizer,
                       llm::Detokenizer& detok, const std::vector<int32_t>& prompt,
                       const llm::GenerateOptions& g, int batch, DType kv_dtype,
                       const GenerateOptions& o) {
  std::vector<llm::KvCache> caches;
  std::vector<llm::BatchRequest> reqs;
  for (int i = 0; i < batch; ++i) {
    caches.push_back(model.make_cache(make_sequence_kv_policy(o, model), 32, kv_dtype));
  }
  for (int i = 0; i < batch; ++i) {
    llm::GenerateOptions gi = g;
    gi.sampler.seed = g.sampler.seed + static_cast<uint64_t>(i);
    if (i > 0) gi.on_token = nullptr;  // only sequence 0 streams
    reqs.push_back({&caches[i], prompt, gi});
  }
  allocator(Device::cpu()).reset_peak();
  llm::BatchStats bs;
  const auto results = llm::generate_batch(model, reqs, &bs);
  const auto mem = memory_stats(Device::cpu());
  const std::string rest = detok.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  for (int i = 1; i < batch; ++i) {
    std::vector<int32_t> ids;
    for (int32_t id : results[i].tokens) {
      if (!tokenizer.is_eog(id)) ids.push_back(id);
    }
    const std::string text = tokenizer.decode(ids, /*render_special=*/false);
    std::printf("\n--- sequence %d ---\n%s\n", i, text.c_str());
  }
  std::fflush(stdout);
  int64_t kv_bytes = 0;
  for (const auto& c : caches) kv_bytes += c.bytes();
  // Aggregate decode rate: every sequence's tokens after its first, over the longest decode phase
  // (the sequences decode in the same steps, so that phase is the batch's decode wall time).
  int64_t decode_tokens = 0;
  double decode_s = 0.0;
  for (const auto& r : results) {
    if (r.stats.generated_tokens > 1) decode_tokens += r.stats.generated_tokens - 1;
    decode_s = std::max(decode_s, r.stats.decode_s);
  }
  const double decode_tps = decode_s > 0 ? decode_tokens / decode_s : 0.0;
  const auto& s0 = results[0].stats;
  std::fprintf(stderr,
               "\nbatch of %d: %lld prompt tokens, %lld generated in %lld steps, %d threads\n"
               "batch throughput %.1f tokens/s (%.3f s); sequence 0: TTFT %.3f s, decode %.1f "
               "tokens/s\nbatch decode %.1f tokens/s (%lld tokens in %.3f s)\n"
               "KV caches %.2f MiB in all (%lld bytes), peak tensor memory %.2f MiB (%lld bytes), "
               "weights %.2f MiB (mapped)\n",
               batch, static_cast<long long>(bs.prompt_tokens),
               static_cast<long long>(bs.generated_tokens), static_cast<long long>(bs.steps),
               cpu_num_threads(), bs.tokens_per_s, bs.wall_s, s0.ttft_s, s0.decode_tokens_per_s,
               decode_tps, static_cast<long long>(decode_tokens), decode_s, kv_bytes / 1048576.0,
               static_cast<long long>(kv_bytes), mem.peak_bytes / 1048576.0,
               static_cast<long long>(mem.peak_bytes), model.weight_bytes() / 1048576.0);
  return 0;
}

}  // namespace

int run_generate(const GenerateOptions& o) {
  const llm::Model model = load_model_for(o.model, !o.no_progress, o.device, o.threads);
  const llm::Tokenizer tokenizer(llm::load_vocab(model.file()));

  std::string text = o.prompt;
  if (o.chat) {
    const auto chat = llm::ChatTemplate::detect(tokenizer.vocab().chat_template,
                                                /*fallback_to_chatml=*/true);
    text = chat.apply({{"user", o.prompt}}, /*add_generation_prompt=*/true);
  }
  const std::vector<int32_t> prompt =
      tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/o.chat);
  if (prompt.empty()) throw InvalidArgument("generate: the prompt encodes to no tokens");

  const DType kv_dtype = parse_dtype(o.kv_dtype);
  llm::KvCache cache = model.make_cache(make_sequence_kv_policy(o, model), 32, kv_dtype);
  llm::GenerateOptions g;
  g.max_new_tokens = o.n_predict;
  g.prefill_chunk = o.prefill_chunk;
  g.sampler = {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p, .seed = o.seed};
  g.stop_ids = tokenizer.eog_ids();
  g.decode = o.decode;
  llm::Detokenizer detok(tokenizer, /*render_special=*/false);
  if (o.echo) {
    std::fputs(o.prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  g.on_token = [&](int32_t id) {
    if (!tokenizer.is_eog(id)) {
      const std::string piece = detok.push(id);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  if (o.batch > 1) {
    return run_generate_batch(model, tokenizer, detok, prompt, g, o.batch, kv_dtype, o);
  }
  const auto r = llm::generate(model, cache, prompt, g);
  const std::string rest = detok.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);

  const auto& s = r.stats;
  const auto mem = memory_stats(Device::cpu());
  std::fprintf(
      stderr,
      "\n%s: %lld prompt tokens, %lld generated (stop: %s), %d threads\n"
      "prefill %.1f tokens/s (%.3f s), TTFT %.3f s, decode %.1f tokens/s (%.3f s)\n"
      "KV cache %.2f MiB (%lld bytes, policy %s), peak tensor memory %.2f MiB (%lld bytes), "
      "weights %.2f MiB (mapped)\n",
      model.config().name.empty() ? o.model.c_str() : model.config().name.c_str(),
      static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.generated_tokens),
      s.stop_reason.c_str(), cpu_num_threads(), s.prefill_tokens_per_s, s.prefill_s, s.ttft_s,
      s.decode_tokens_per_s, s.decode_s, cache.bytes() / 1048576.0,
      static_cast<long long>(cache.bytes()), cache.policy().name().c_str(),
      mem.peak_bytes / 1048576.0, static_cast<long long>(mem.peak_bytes),
      model.weight_bytes() / 1048576.0);
  return 0;
}

}  // namespace tandem::cli
