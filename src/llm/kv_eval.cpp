// SPDX-License-Identifier: Apache-2.0
// run_kv_eval: the fidelity and needle sweeps over policies x budgets (kv_eval.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <span>

#include "core/clock.h"
#include "llm/kv_eval_internal.h"
#include "tandem/core/error.h"
#include "tandem/llm/chat_template.h"
#include "tandem/llm/sampler.h"
#include "tandem/llm/vocab.h"

namespace tandem::llm {
namespace {

using namespace kv_eval_detail;

struct Run {
  std::string policy;
  KvBudget budget;
  bool budgeted = true;  // false for "full"
  bool fixed = false;    // a quantization-only spec: built once, without a budget
  std::string label() const { return budgeted && !fixed ? budget.label() : "-"; }
};

// Whether a policy spec needs a budget: eviction policies refuse to be built without one, while
// quantization-only specs (int8, qokv, ...) build and then run once, not once per budget.
bool takes_budget(const std::string& spec, const KvEvalConfig& c) {
  KvPolicyOptions o;
  o.window = c.window;
  o.extra = c.extra;
  try {
    make_kv_policy(spec, o, KvCacheShape{.n_layers = 1, .n_kv_heads = 1, .head_dim = 64});
    return false;
  } catch (const InvalidArgument&) {
    return true;
  }
}

std::vector<Run> runs_of(const KvEvalConfig& c) {
  std::vector<Run> runs;
  for (const std::string& p : c.policies) {
    if (p == "full") {
      runs.push_back({p, {}, false});
      continue;
    }
    if (!takes_budget(p, c)) {
      runs.push_back({p, {}, true, /*fixed=*/true});
      continue;
    }
    for (const KvBudget& b : c.budgets) runs.push_back({p, b, true});
  }
  return runs;
}

std::shared_ptr<KvPolicy> build(const Model& model, const KvEvalConfig& c, const Run& r) {
  KvPolicyOptions o;
  o.budget_tokens = r.budget.tokens;
  o.budget_ratio = r.budget.ratio;
  o.window = c.window;
  if (!c.calibration_path.empty()) set_kv_calibration(o, c.calibration_path);
  o.seed = c.seed;
  o.extra = c.extra;
  if (!r.budgeted) return std::make_shared<FullCachePolicy>();
  return make_kv_policy(r.policy, o, model.make_cache().shape());
}

// The prompt of about `target` tokens: the task's intro, a prefix of the haystack with the task's
// inserts planted in it, the question, in the model's chat template.
std::vector<int32_t> planted_prompt(const Tokenizer& tok, const std::string& haystack,
                                    int64_t target, const RulerTask& task) {
  const auto chat = ChatTemplate::detect(tok.vocab().chat_template, /*fallback_to_chatml=*/true);
  auto build = [&](size_t chars) {
    const std::string h = haystack.substr(0, std::min(chars, haystack.size()));
    const std::string msg = task.intro + plant_inserts(h, task.inserts) + task.question;
    return tok.encode(chat.apply({{"user", msg}}, /*add_generation_prompt=*/true),
                      /*add_special=*/true, /*parse_special=*/true);
  };
  int64_t chars = target * 4;
  std::vector<int32_t> ids = build(static_cast<size_t>(chars));
  for (int i = 0; i < 16 && static_cast<int64_t>(ids.size()) > target && chars > 0; ++i) {
    const double per_token = static_cast<double>(chars) / static_cast<double>(ids.size());
    const int64_t excess = static_cast<int64_t>(ids.size()) - target;
    chars = std::max<int64_t>(0, chars - static_cast<int64_t>(excess * per_token * 1.3) - 1);
    ids = build(static_cast<size_t>(chars));
  }
  if (static_cast<int64_t>(ids.size()) > target) {
    throw InvalidArgument(
        cat("kv-eval: cannot build a ", task.kind, " prompt of ", target, " tokens"));
  }
  if (static_cast<size_t>(chars) > haystack.size()) {
    throw InvalidArgument(cat("kv-eval: the haystack text (", haystack.size(),
                              " bytes) is too short for a ", target, "-token ", task.kind,
                              " prompt"));
  }
  return ids;
}

// kv-eval's needle: one passkey sentence at `depth`.
RulerTask passkey_task(const std::string& key, double depth) {
  RulerTask t;
  t.kind = "passkey";
  t.intro = "Read the text below. A pass key is hidden in it.\n\n";
  t.inserts = {{depth, "The pass key is " + key + ". Remember it. " + key + " is the pass key."}};
  t.question = "\n\nWhat is the pass key? Answer with the number only.";
  t.expected = {key};
  return t;
}

struct Answer {
  std::string text;
  double decode_s = 0;
  int steps = 0;
};

Answer greedy_answer(const Model& model, const Tokenizer& tok, KvCache& cache,
                     const std::vector<float>& first_logits, int32_t start, int max_tokens,
                     DecodeArithmetic decode) {
  Answer a;
  std::vector<int32_t> ids;
  int32_t next = argmax(first_logits);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < max_tokens; ++i) {
    if (tok.is_eog(next)) break;
    ids.push_back(next);
    if (i + 1 == max_tokens) break;
    const int32_t t[1] = {next}, p[1] = {start + i};
    const Tensor logits = model.forward(t, p, cache, {.last_only = true, .decode = decode});
    cache.policy().on_decode_step(cache);
    ++a.steps;
    next = argmax(std::span<const float>(logits.data<float>(), logits.numel()));
  }
  a.decode_s = seconds_since(t0);
  a.text = tok.decode(ids, /*render_special=*/false);
  return a;
}

// Per row of one context: the greedy decode and compression time summed over its prompts.
struct RetrievalTotals {
  std::vector<double> decode_s, compress_s, prefill_s;
  std::vector<int> steps, prompts;
  explicit RetrievalTotals(size_t n)
      : decode_s(n, 0), compress_s(n, 0), prefill_s(n, 0), steps(n, 0), prompts(n, 0) {}
};

// One retrieval prompt of `task` through every run: prefilled once, each run compresses a copy and
// answers greedily. Returns the answers in run order.
std::vector<std::string> answer_runs(const Model& model, const Tokenizer& tok,
                                     const KvEvalConfig& c, const std::vector<Run>& runs,
                                     const std::string& haystack, int64_t ctx,
                                     const RulerTask& task, int max_tokens, size_t first_row,
                                     RetrievalTotals& totals) {
  const auto prompt = planted_prompt(tok, haystack, ctx, task);
  Prefilled p = prefill_recorded(model, prompt, c.window, c.prefill_chunk);
  std::vector<std::string> answers;
  for (size_t i = 0; i < runs.size(); ++i) {
    Compressed comp = compress_copy(p, build(model, c, runs[i]));
    const Answer a = greedy_answer(model, tok, comp.cache, p.last_logits,
                                   static_cast<int32_t>(prompt.size()), max_tokens, c.decode);
    totals.decode_s[first_row + i] += a.decode_s;
    totals.steps[first_row + i] += a.steps;
    totals.compress_s[first_row + i] += comp.compress_s;
    totals.prefill_s[first_row + i] += p.prefill_s;
    ++totals.prompts[first_row + i];
    answers.push_back(a.text);
  }
  return answers;
}

// Fidelity rows of one context (teacher forcing against the full cache), filled in place.
void run_fidelity(const Model& model, const KvEvalConfig& c, const std::vector<Run>& runs,
                  std::span<const int32_t> ids, int64_t ctx, KvEvalRow* rows,
                  const std::function<void(const std::string&)>& say) {
  const auto context = ids.subspan(c.text_offset, ctx);
  const auto cont = ids.subspan(c.text_offset + ctx, c.continuation + 1);
  say(cat("context ", ctx, ": prefill"));
  Prefilled p = prefill_recorded(model, context, c.window, c.prefill_chunk);
  say(cat("context ", ctx, ": prefill ", p.prefill_s, " s; full-cache reference decode"));
  std::vector<std::vector<double>> full_lp;
  const int64_t full_bytes = p.cache.bytes();
  {
    KvCache ref = p.cache.clone();
    full_lp = teacher_forced_log_probs(model, ref, cont.first(c.continuation),
                                       static_cast<int32_t>(ctx), c.decode);
  }
  double full_nll = 0;
  for (int i = 0; i < c.continuation; ++i) full_nll -= full_lp[i][cont[i + 1]];
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    const Run& r = runs[ri];
    Compressed comp = compress_copy(p, build(model, c, r));
    KvCache shadow = p.cache.clone();
    comp.probe->set_shadow(&shadow);
    const auto lp = teacher_forced_log_probs(model, comp.cache, cont.first(c.continuation),
                                             static_cast<int32_t>(ctx), c.decode);
    KvEvalRow& row = rows[ri];
    row.kv_bytes = comp.bytes;
    row.kv_bytes_full = full_bytes;
    row.kv_tokens_per_head = comp.tokens_per_head;
    row.prefill_s = p.prefill_s;
    row.compress_s = comp.compress_s;
    double nll = 0, kl_sum = 0, kl_max = 0;
    int top1 = 0;
    for (int i = 0; i < c.continuation; ++i) {
      nll -= lp[i][cont[i + 1]];
      double kl = 0;
      for (size_t v = 0; v < lp[i].size(); ++v) {
        kl += std::exp(full_lp[i][v]) * (full_lp[i][v] - lp[i][v]);
      }
      kl = std::max(kl, 0.0);
      kl_sum += kl;
      kl_max = std::max(kl_max, kl);
      top1 += std::max_element(lp[i].begin(), lp[i].end()) - lp[i].begin() ==
              std::max_element(full_lp[i].begin(), full_lp[i].end()) - full_lp[i].begin();
    }
    row.ppl = std::exp(nll / c.continuation);
    row.ppl_full = std::exp(full_nll / c.continuation);
    row.kl_mean = kl_sum / c.continuation;
    row.kl_max = kl_max;
    row.top1 = static_cast<double>(top1) / c.continuation;
    row.attn_err_layer = comp.probe->attention_errors();
    say(cat("context ", ctx, " ", r.policy, " ", r.label(), ": KV ", comp.bytes / 1048576.0,
            " MiB (full ", full_bytes / 1048576.0, "), KL ", row.kl_mean, ", top-1 ", row.top1,
            ", ppl ", row.ppl, " (full ", row.ppl_full, "), compress ", comp.compress_s, " s"));
  }
}

void check_config(const Model& model, const KvEvalConfig& c) {
  if (c.contexts.empty() || c.continuation < 2 || c.window < 0 || c.prefill_chunk < 1) {
    throw InvalidArgument(cat("kv-eval: need contexts, continuation >= 2 (got ", c.continuation,
                              "), window >= 0, prefill_chunk >= 1"));
  }
  for (double depth : c.needle_depths) {
    if (!(depth >= 0 && depth <= 1))
      throw InvalidArgument(cat("kv-eval: needle depth ", depth, " is outside [0, 1]"));
  }
  if (!c.ruler_tasks.empty() && (c.ruler_samples < 1 || c.ruler_answer_tokens < 1)) {
    throw InvalidArgument(cat("kv-eval: RULER samples (", c.ruler_samples, ") and answer tokens (",
                              c.ruler_answer_tokens, ") must be >= 1"));
  }
  for (const std::string& kind : c.ruler_tasks) make_ruler_task(kind, c.seed, 0, c.ruler);
  check_kv_settings(c.policies, c.extra, "kv-eval: --kv-extra");
  const int answer =
      std::max(c.needle_answer_tokens, c.ruler_tasks.empty() ? 0 : c.ruler_answer_tokens);
  for (int64_t ctx : c.contexts) {
    if (ctx < 16 || ctx + c.continuation + answer > model.config().context_length) {
      throw InvalidArgument(cat("kv-eval: context ", ctx, " + continuation ", c.continuation,
                                " + answer ", answer, " tokens must lie in [16, ",
                                model.config().context_length, "] (the model's context)"));
    }
  }
}

}  // namespace

KvEvalResult run_kv_eval(const Model& model, const Tokenizer& tokenizer, const std::string& text,
                         const std::string& haystack, const KvEvalConfig& config_in) {
  KvEvalConfig c = config_in;
  if (c.budgets.empty()) {
    for (const char* b : {"128", "256", "512", "1024", "10%", "25%", "50%"}) {
      c.budgets.push_back(parse_kv_budget(b));
    }
  }
  check_config(model, c);
  auto say = [&](const std::string& s) {
    if (c.progress) c.progress(s);
  };
  KvEvalResult res;
  res.model = model.config().name;
  res.config = c;
  const std::vector<Run> runs = runs_of(c);
  for (const Run& r : runs) build(model, c, r);  // option errors before any long work
  for (int64_t ctx : c.contexts) {
    for (const Run& r : runs) {
      KvEvalRow row;
      row.context = ctx;
      row.policy = r.policy;
      row.budget = r.label();
      res.rows.push_back(row);
    }
  }

  if (c.fidelity) {
    // Fidelity text: tokens of a prefix of the text long enough for the largest context.
    const int64_t max_ctx = *std::max_element(c.contexts.begin(), c.contexts.end());
    const int64_t need = c.text_offset + max_ctx + c.continuation + 1;
    const std::vector<int32_t> ids = kv_eval_detail::encode_prefix(
        tokenizer, text, need, "kv-eval (offset + context + continuation)");
    for (size_t ci = 0; ci < c.contexts.size(); ++ci) {
      run_fidelity(model, c, runs, ids, c.contexts[ci], &res.rows[ci * runs.size()], say);
    }
  }

  // Needles and RULER tasks.
  std::mt19937_64 rng(c.seed);
  std::uniform_int_distribution<int> digits(10000, 99999);
  RetrievalTotals totals(res.rows.size());
  for (size_t ci = 0; ci < c.contexts.size(); ++ci) {
    const int64_t ctx = c.contexts[ci];
    const size_t first_row = ci * runs.size();
    for (double depth : c.needle_depths) {
      const RulerTask task = passkey_task(std::to_string(digits(rng)), depth);
      say(cat("needle ", ctx, " depth ", depth));
      const auto answers = answer_runs(model, tokenizer, c, runs, haystack, ctx, task,
                                       c.needle_answer_tokens, first_row, totals);
      std::string full_answer;
      int correct = 0;
      for (size_t i = 0; i < runs.size(); ++i) {
        KvEvalRow& row = res.rows[first_row + i];
        const bool ok = task.score(answers[i]) > 0;
        ++row.needle_trials;
        row.needle_correct += ok;
        correct += ok;
        row.needle_answers.push_back(answers[i]);
        if (!runs[i].budgeted) full_answer = answers[i];
        say(cat("  ", runs[i].policy, " ", runs[i].label(), ": '", answers[i], "'",
                ok ? "" : " (wrong)"));
      }
      res.full_needle_answers.push_back(full_answer);
      say(cat("needle ", ctx, " depth ", depth, " key ", task.expected[0],
              ": full cache answered '", full_answer, "'; ", correct, "/", runs.size(),
              " runs exact"));
    }
    for (const std::string& kind : c.ruler_tasks) {
      for (int sample = 0; sample < c.ruler_samples; ++sample) {
        const RulerTask task = make_ruler_task(kind, c.seed, sample, c.ruler);
        say(cat("ruler ", kind, " ", ctx, " sample ", sample));
        const auto answers = answer_runs(model, tokenizer, c, runs, haystack, ctx, task,
                                         c.ruler_answer_tokens, first_row, totals);
        for (size_t i = 0; i < runs.size(); ++i) {
          KvEvalRow::Ruler& r = res.rows[first_row + i].ruler[kind];
          const double score = task.score(answers[i]);
          ++r.trials;
          r.score += score;
          r.answers.push_back(answers[i]);
          say(cat("  ", runs[i].policy, " ", runs[i].label(), ": '", answers[i], "' score ",
                  score));
        }
      }
    }
  }
  for (size_t i = 0; i < res.rows.size(); ++i) {
    KvEvalRow& row = res.rows[i];
    if (totals.steps[i] > 0 && totals.decode_s[i] > 0) {
      row.decode_tok_s = totals.steps[i] / totals.decode_s[i];
    }
    if (totals.prompts[i] > 0) {
      row.compress_s = totals.compress_s[i] / totals.prompts[i];
      if (!c.fidelity) row.prefill_s = totals.prefill_s[i] / totals.prompts[i];
    }
    row.ttft_s = row.prefill_s + row.compress_s;
  }
  return res;
}

}  // namespace tandem::llm
