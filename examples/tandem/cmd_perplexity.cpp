// SPDX-License-Identifier: Apache-2.0
// `tandem perplexity`: perplexity of a GGUF model over a text file with llama.cpp's protocol
// (windows of --ctx tokens, the second half of each scored; see tandem/llm/perplexity.h), so the
// number compares with `llama-perplexity -m MODEL -f TEXT -c CTX [--chunks K]`. Progress (window
// i of n, running PPL) goes to stderr; the result to stdout as a Markdown table or a JSON record.
// Without -m it uses the default model (SmolLM2-135M-Instruct, fetched on first use).

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "model_path.h"
#include "report.h"
#include "tandem/core/backend.h"
#include "tandem/core/build_info.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_policy_registry.h"
#include "tandem/llm/model.h"
#include "tandem/llm/perplexity.h"
#include "tandem/llm/tokenizer.h"
#include "tandem/llm/vocab.h"

namespace tandem::cli {
namespace {

struct PerplexityCliOptions {
  std::string model;
  std::string file;
  int ctx = 512;
  int chunks = -1;
  int batch = 512;
  int threads = 0;
  std::string output = "md";
  bool no_progress = false;
  std::string kv_policy;            // empty: the plain protocol
  std::string kv_calibration;       // QoKV / ClusterAttn calibration file
  std::vector<std::string> kv_set;  // key=value policy settings
  int kv_step = 32;
  int kv_window = 32;
  llm::DecodeArithmetic decode = llm::DecodeArithmetic::kInt8;  // single-token forwards
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(cat("perplexity: cannot open text file '", path, "'"));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_perplexity(const PerplexityCliOptions& o) {
  if (o.threads > 0) set_cpu_num_threads(o.threads);
  const std::string path = resolve_model_path(o.model, !o.no_progress);
  const llm::Model model = llm::Model::load(path);
  const llm::Tokenizer tokenizer(llm::load_vocab(model.file()));
  const std::string text = read_text(o.file);
  // llama-perplexity tokenizes with add_special and without parsing control tokens in the text.
  const std::vector<int32_t> tokens =
      tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/false);
  const bool add_bos = tokenizer.add_bos() && tokenizer.bos_id() >= 0;

  llm::PerplexityOptions p{.ctx = o.ctx,
                           .chunks = o.chunks,
                           .batch = o.batch,
                           .bos_id = add_bos ? tokenizer.bos_id() : -1,
                           .decode = o.decode};
  if (!o.kv_policy.empty()) {
    llm::KvPolicyOptions kopt;
    if (!o.kv_calibration.empty()) llm::set_kv_calibration(kopt, o.kv_calibration);
    kopt.window = o.kv_window;
    for (const std::string& kv : o.kv_set) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) {
        throw InvalidArgument(cat("perplexity: --kv-set '", kv, "' is not key=value"));
      }
      kopt.extra[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    llm::check_kv_settings({o.kv_policy}, kopt.extra, "perplexity: --kv-set");
    p.kv_policy = llm::make_kv_policy(o.kv_policy, kopt, model.make_cache().shape());
    p.kv_step = o.kv_step;
  }
  llm::PerplexityResult r;
  {
    // On a terminal one "\r" line, else one line per window (logs of long runs show progress).
    const bool tty = isatty(STDERR_FILENO) != 0;
    Progress progress(!o.no_progress);
    p.on_chunk = [&](int i, int n, double ppl) {
      if (o.no_progress) return true;
      char line[128];
      std::snprintf(line, sizeof line, "perplexity: window %d/%d, running PPL %.4f", i + 1, n, ppl);
      if (tty) {
        progress.update(line);
      } else {
        std::fprintf(stderr, "%s\n", line);
      }
      return true;
    };
    r = llm::perplexity(model, tokens, p);
  }

  const std::string name = model.config().name.empty() ? path : model.config().name;
  if (o.output == "json") {
    const nlohmann::json j = {{"schema_version", 1},
                              {"kind", "perplexity"},
                              {"build", build_info_json()},
                              {"system", system_json()},
                              {"params",
                               {{"model", path},
                                {"model_name", model.config().name},
                                {"text", o.file},
                                {"text_bytes", text.size()},
                                {"ctx", o.ctx},
                                {"chunks", o.chunks},
                                {"batch", o.batch},
                                {"threads", cpu_num_threads()},
                                {"add_bos", add_bos},
                                {"kv_policy", o.kv_policy.empty() ? "none" : o.kv_policy},
                                {"kv_calibration", o.kv_calibration},
                                {"kv_step", o.kv_step},
                                {"decode", llm::decode_arithmetic_name(o.decode)}}},
                              {"results",
                               {{"ppl", r.ppl},
                                {"ppl_error", r.ppl_error},
                                {"mean_nll", r.mean_nll},
                                {"text_tokens", r.text_tokens},
                                {"n_chunks", r.n_chunks},
                                {"scored_tokens", r.scored_tokens},
                                {"chunk_ppl", r.chunk_ppl},
                                {"seconds", r.seconds},
                                {"tokens_per_s", r.tokens_per_s},
                                {"kv_bytes", r.kv_bytes},
                                {"kv_bits_per_element", r.kv_bits_per_element}}}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf(
      "| model | text | kv policy | tokens | ctx | windows | scored | PPL | +/- | KV bytes | "
      "KV bits/elem | time s | tok/s |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::printf(
      "| %s | %s | %s | %lld | %d | %d | %lld | %.4f | %.5f | %lld | %.2f | %.1f | %.1f |\n",
      name.c_str(), o.file.c_str(), o.kv_policy.empty() ? "none" : o.kv_policy.c_str(),
      static_cast<long long>(r.text_tokens), o.ctx, r.n_chunks,
      static_cast<long long>(r.scored_tokens), r.ppl, r.ppl_error,
      static_cast<long long>(r.kv_bytes), r.kv_bits_per_element, r.seconds, r.tokens_per_s);
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<PerplexityCliOptions>();
  CLI::App* sub = app.add_subcommand(
      "perplexity", "Perplexity of a GGUF model over a text (llama.cpp's windowed protocol)");
  sub->add_option("-m,--model", o->model,
                  "GGUF model file (default: SmolLM2-135M-Instruct, fetched on first use)");
  sub->add_option("-f,--file", o->file, "Text file (UTF-8)")->required()->check(CLI::ExistingFile);
  sub->add_option("-c,--ctx", o->ctx, "Tokens per window (the second half is scored)")
      ->check(CLI::Range(4, 1 << 20));
  sub->add_option("--chunks", o->chunks, "Windows to score at most (-1: all)");
  sub->add_option("-b,--batch", o->batch, "Tokens per forward pass within a window")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("-t,--threads", o->threads, "CPU threads (0: the default)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("-o,--output", o->output, "Output format")->check(CLI::IsMember({"md", "json"}));
  sub->add_flag("--no-progress", o->no_progress, "No progress on stderr");
  sub->add_option("--kv-policy", o->kv_policy,
                  "KV policy or '+' chain (int8, int4, q8_0, q4_0, kivi2, kivi4, qokv, full, ...): "
                  "prefill the first half of each window, then the policy, then the rest in "
                  "--kv-step steps");
  sub->add_option("--kv-calibration", o->kv_calibration,
                  "Calibration file of the policy, or NAME=FILE[,NAME=FILE] per chain member");
  sub->add_option("--kv-set", o->kv_set, "Policy setting key=value (repeatable)");
  sub->add_option("--kv-step", o->kv_step, "Tokens per step after the prefill (with --kv-policy)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--kv-window", o->kv_window, "Observed query window of the policy")
      ->check(CLI::Range(1, 1 << 20));
  add_decode_option(sub, o->decode)
      ->description(
          "Arithmetic of single-token forwards (-b 1, --kv-step 1): int8 (the default) rounds "
          "activations to int8 blocks as llama.cpp decodes; f32 is the reference. Longer "
          "forwards compute in f32 either way");
  return Command{sub, [o] { return run_perplexity(*o); }};
});

}  // namespace
}  // namespace tandem::cli
