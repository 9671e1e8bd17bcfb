// SPDX-License-Identifier: Apache-2.0
// kv-eval: the fidelity harness for KV-cache policies (eviction, and whatever else is registered
// in kv_policy_registry.h), on a real model and real text. It is what `tandem kv-eval` runs.
//
// Why: an eviction policy is only as good as what the model still computes with the smaller
// cache, and the freed memory is only real if the allocator says so. The harness measures both on
// the same prompts for every policy and budget:
//   fidelity  a context of N tokens of real text is prefilled ONCE (the last `window` queries of
//             every layer recorded); per policy x budget the cache is copied, the policy gets the
//             same recorded queries and compresses it, then the next tokens of the text are fed
//             one by one (teacher forcing): perplexity of those tokens, KL(full || policy) of the
//             next-token distribution and top-1 agreement against the full cache at every step,
//             and the relative attention-output error ||o - o'|| / ||o|| of every layer (the same
//             decode query against the full and the compressed cache).
//   needle    a passkey sentence planted at depths 0.1..0.9 of real text, the question at the end
//             (chat template), greedy answer, exact match of the number; also decode tokens/s.
//   ruler     RULER-style retrieval (kv_ruler.h): multi-key needles and variable tracking,
//             `ruler_samples` seeded prompts per task and context, the same greedy answer per
//             policy x budget, mean score per task (the full cache's row is the ceiling).
//   memory    KV bytes after compression (the allocator's live-byte change, equal to
//             KvCache::bytes()), compression time (scoring + clustering + retain) apart from the
//             prefill, TTFT = prefill + compression.
//
//   llm::KvEvalConfig cfg;
//   cfg.contexts = {2048};
//   cfg.policies = {"full", "snapkv", "clusterattn"};
//   cfg.budgets = {llm::parse_kv_budget("256"), llm::parse_kv_budget("20%")};
//   llm::KvEvalResult r = llm::run_kv_eval(model, tokenizer, text, haystack, cfg);
//   std::cout << r.table();  r.to_json();
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/export.h"
#include "tandem/llm/kv_policies.h"
#include "tandem/llm/kv_ruler.h"
#include "tandem/llm/model.h"
#include "tandem/llm/tokenizer.h"

namespace tandem::llm {

// A budget as tokens ("256") or a fraction of the prompt ("10%", or "0.1").
struct KvBudget {
  int64_t tokens = 0;
  double ratio = 0;
  TANDEM_API std::string label() const;
};
// InvalidArgument naming the text for anything else (zero, negative, over 100%).
TANDEM_API KvBudget parse_kv_budget(const std::string& text);

struct KvEvalConfig {
  std::vector<int64_t> contexts = {2048, 4096};  // prompt tokens of the fidelity and needle runs
  int continuation = 32;                         // teacher-forced decode steps scored
  std::vector<std::string> policies = {"full",      "streamingllm", "h2o",    "snapkv",
                                       "pyramidkv", "adakv",        "random", "clusterattn"};
  std::vector<KvBudget> budgets;  // empty: 128, 256, 512, 1024 tokens and 10%, 25%, 50%
  int window = 32;                // observation window / recent tokens of every policy
  std::string calibration_path;   // a file or NAME=FILE,... (set_kv_calibration; empty: defaults)
  std::map<std::string, std::string> extra;  // KvPolicyOptions::extra for every policy
  std::vector<double> needle_depths = {0.1, 0.3, 0.5, 0.7, 0.9};  // empty: no needle test
  int needle_answer_tokens = 12;
  bool fidelity = true;                  // false: no fidelity runs (the needle / RULER only)
  std::vector<std::string> ruler_tasks;  // kinds of kv_ruler.h (empty: none)
  int ruler_samples = 2;                 // prompts per task and context
  RulerTaskOptions ruler;                // keys, hops
  int ruler_answer_tokens = 32;          // greedy tokens per RULER answer
  int64_t text_offset = 0;               // token offset of the fidelity context in the text
  int prefill_chunk = 512;
  // The teacher-forced and greedy decode steps (full and compressed caches alike): int8
  // activations by default, kF32 for reference runs (DecodeArithmetic in model.h).
  DecodeArithmetic decode = DecodeArithmetic::kInt8;
  uint64_t seed = 1;
  std::function<void(const std::string&)> progress;  // one line per step (may be empty)
};

// One (context, policy, budget).
struct KvEvalRow {
  int64_t context = 0;
  std::string policy;
  std::string budget;
  // memory
  int64_t kv_bytes = 0;           // allocator live bytes of the compressed cache
  int64_t kv_bytes_full = 0;      // the full cache of the same prompt
  double kv_tokens_per_head = 0;  // mean tokens per (layer, KV head) after compression
  // fidelity
  double ppl = 0, ppl_full = 0;
  double kl_mean = 0, kl_max = 0;
  double top1 = 0;                     // fraction of steps whose argmax equals the full cache's
  std::vector<double> attn_err_layer;  // mean relative attention-output error per layer
  // needle
  int needle_trials = 0, needle_correct = 0;
  std::vector<std::string> needle_answers;  // greedy answers, in depth order
  // RULER tasks by kind: samples run, summed score (mean = score / trials), answers by sample.
  struct Ruler {
    int trials = 0;
    double score = 0;
    std::vector<std::string> answers;
  };
  std::map<std::string, Ruler> ruler;
  // time
  double prefill_s = 0;     // shared full prefill of this context (no fidelity: the prompts')
  double compress_s = 0;    // policy's on_prefill_done (score, cluster, retain), mean over runs
  double ttft_s = 0;        // prefill_s + compress_s
  double decode_tok_s = 0;  // greedy decode in the needle and RULER runs (no probes attached)
};

struct KvEvalResult {
  std::string model;
  std::string text_name, haystack_name;
  KvEvalConfig config;
  std::vector<KvEvalRow> rows;
  std::vector<std::string> full_needle_answers;  // per context x depth, the full cache's answer
  TANDEM_API nlohmann::json to_json() const;
  TANDEM_API std::string table() const;        // markdown (with ruler_table() after it)
  TANDEM_API std::string ruler_table() const;  // RULER mean scores per row ("" without tasks)
};

// text: the fidelity text (context + continuation taken from it at config.text_offset);
// haystack: the text the needles are planted in (may be the same). InvalidArgument when the text
// is too short for the largest context or a context exceeds the model's context length.
TANDEM_API KvEvalResult run_kv_eval(const Model& model, const Tokenizer& tokenizer,
                                    const std::string& text, const std::string& haystack,
                                    const KvEvalConfig& config);

// ClusterAttn calibration (spec 2.2: parameters profiled on about 20% of the data): the text is
// cut into `segments` consecutive pieces of context + continuation tokens (the profiling set) and
// the first ceil(fraction * segments) are used. Every (eps, rho, min_len, pool) of the grid runs
// ClusterAttn at `budget` on them; the parameters with the lowest mean KL against the full cache
// win.
struct KvCalibrationConfig {
  int64_t context = 2048;
  int continuation = 16;
  int segments = 10;
  double fraction = 0.2;
  KvBudget budget{.tokens = 256};
  int window = 32;
  std::vector<int> eps = {1, 2, 4, 8};
  std::vector<double> rho = {0.5, 1.0, 1.5, 2.0};
  std::vector<int> min_len = {1, 4, 8};
  std::vector<int> pool = {5};
  bool fill = false;  // ClusterAttnParams::fill for every grid point (and in the result)
  int prefill_chunk = 512;
  std::function<void(const std::string&)> progress;
};
struct KvCalibrationResult {
  ClusterAttnParams best;
  double best_kl = 0;
  struct Point {
    ClusterAttnParams params;
    double kl_mean = 0;
    double kept_fraction = 0;  // kept tokens / budget, mean
  };
  std::vector<Point> grid;
  int segments_used = 0;
};
TANDEM_API KvCalibrationResult calibrate_clusterattn(const Model& model, const Tokenizer& tokenizer,
                                                     const std::string& text,
                                                     const KvCalibrationConfig& config);

}  // namespace tandem::llm
