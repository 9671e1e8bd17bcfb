// SPDX-License-Identifier: Apache-2.0
// kv-eval budgets, JSON and the markdown table (kv_eval.h).
#include <cmath>
#include <cstdio>
#include <sstream>

#include "tandem/core/error.h"
#include "tandem/llm/kv_eval.h"

namespace tandem::llm {

std::string KvBudget::label() const {
  if (tokens > 0) return std::to_string(tokens);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%%", ratio * 100.0);
  return buf;
}

namespace {
constexpr double kMaxKvBudgetTokens = double(int64_t{1} << 40);  // far past any context length
}  // namespace

KvBudget parse_kv_budget(const std::string& text) {
  const bool percent = !text.empty() && text.back() == '%';
  const std::string num = percent ? text.substr(0, text.size() - 1) : text;
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(num, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (num.empty() || used != num.size() || !(v > 0)) {
    throw InvalidArgument("KV budget '" + text + "': expected tokens (256) or a ratio (10%, 0.1)");
  }
  KvBudget b;
  if (percent || v < 1.0) {
    b.ratio = percent ? v / 100.0 : v;
    if (b.ratio > 1.0) throw InvalidArgument("KV budget '" + text + "' is over 100%");
  } else {
    if (v != std::floor(v)) {
      throw InvalidArgument("KV budget '" + text + "': a token budget must be a whole number");
    }
    if (v > kMaxKvBudgetTokens) {
      throw InvalidArgument(cat("KV budget '", text, "' exceeds the limit of ",
                                static_cast<int64_t>(kMaxKvBudgetTokens), " tokens"));
    }
    b.tokens = static_cast<int64_t>(v);
  }
  return b;
}

nlohmann::json KvEvalResult::to_json() const {
  nlohmann::json j;
  j["model"] = model;
  j["text"] = text_name;
  j["haystack"] = haystack_name;
  j["config"] = {{"contexts", config.contexts},
                 {"continuation", config.continuation},
                 {"policies", config.policies},
                 {"window", config.window},
                 {"calibration", config.calibration_path},
                 {"needle_depths", config.needle_depths},
                 {"needle_answer_tokens", config.needle_answer_tokens},
                 {"fidelity", config.fidelity},
                 {"ruler_tasks", config.ruler_tasks},
                 {"ruler_samples", config.ruler_samples},
                 {"ruler_keys", config.ruler.keys},
                 {"ruler_hops", config.ruler.hops},
                 {"ruler_answer_tokens", config.ruler_answer_tokens},
                 {"text_offset", config.text_offset},
                 {"decode", decode_arithmetic_name(config.decode)},
                 {"seed", config.seed}};
  nlohmann::json budgets = nlohmann::json::array();
  for (const KvBudget& b : config.budgets) budgets.push_back(b.label());
  j["config"]["budgets"] = budgets;
  j["full_needle_answers"] = full_needle_answers;
  nlohmann::json rows = nlohmann::json::array();
  for (const KvEvalRow& r : this->rows) {
    nlohmann::json ruler = nlohmann::json::object();
    for (const auto& [kind, x] : r.ruler) {
      ruler[kind] = {{"trials", x.trials},
                     {"score", x.score},
                     {"mean", x.trials > 0 ? x.score / x.trials : 0.0},
                     {"answers", x.answers}};
    }
    rows.push_back({{"context", r.context},
                    {"policy", r.policy},
                    {"budget", r.budget},
                    {"kv_bytes", r.kv_bytes},
                    {"kv_bytes_full", r.kv_bytes_full},
                    {"kv_tokens_per_head", r.kv_tokens_per_head},
                    {"ppl", r.ppl},
                    {"ppl_full", r.ppl_full},
                    {"kl_mean", r.kl_mean},
                    {"kl_max", r.kl_max},
                    {"top1", r.top1},
                    {"attn_err_layer", r.attn_err_layer},
                    {"needle_trials", r.needle_trials},
                    {"needle_correct", r.needle_correct},
                    {"needle_answers", r.needle_answers},
                    {"ruler", ruler},
                    {"prefill_s", r.prefill_s},
                    {"compress_s", r.compress_s},
                    {"ttft_s", r.ttft_s},
                    {"decode_tok_s", r.decode_tok_s}});
  }
  j["rows"] = rows;
  return j;
}

std::string KvEvalResult::ruler_table() const {
  if (config.ruler_tasks.empty()) return "";
  std::ostringstream os;
  os << "\n| ctx | policy | budget |";
  for (const std::string& k : config.ruler_tasks)
    os << " " << k << " (mean of " << config.ruler_samples << ") |";
  os << "\n|---|---|---|";
  for (size_t i = 0; i < config.ruler_tasks.size(); ++i) os << "---|";
  os << "\n";
  char buf[64];
  for (const KvEvalRow& r : rows) {
    os << "| " << r.context << " | " << r.policy << " | " << r.budget << " |";
    for (const std::string& k : config.ruler_tasks) {
      const auto it = r.ruler.find(k);
      const double mean = it == r.ruler.end() || it->second.trials == 0
                              ? 0.0
                              : it->second.score / it->second.trials;
      std::snprintf(buf, sizeof buf, " %.3f |", mean);
      os << buf;
    }
    os << "\n";
  }
  return os.str();
}

std::string KvEvalResult::table() const {
  std::ostringstream os;
  if (!config.fidelity) {  // no fidelity or memory figures were measured
    os << "| ctx | policy | budget | needle | compress ms | TTFT s | decode tok/s |\n"
       << "|---|---|---|---|---|---|---|\n";
    for (const KvEvalRow& r : rows) {
      char line[256];
      std::snprintf(line, sizeof line, "| %lld | %s | %s | %d/%d | %.1f | %.2f | %.1f |\n",
                    static_cast<long long>(r.context), r.policy.c_str(), r.budget.c_str(),
                    r.needle_correct, r.needle_trials, r.compress_s * 1e3, r.ttft_s,
                    r.decode_tok_s);
      os << line;
    }
    return os.str() + ruler_table();
  }
  os << "| ctx | policy | budget | tokens/head | KV MiB | KV % | KL mean | KL max | top-1 | PPL "
        "(full) | attn err | needle | compress ms | TTFT s | decode tok/s |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  char buf[512];
  for (const KvEvalRow& r : rows) {
    double err = 0;
    for (double e : r.attn_err_layer) err += e;
    if (!r.attn_err_layer.empty()) err /= static_cast<double>(r.attn_err_layer.size());
    std::snprintf(buf, sizeof buf,
                  "| %lld | %s | %s | %.0f | %.2f | %.1f | %.4f | %.3f | %.3f | %.2f (%.2f) | "
                  "%.3f | %d/%d | %.1f | %.2f | %.1f |\n",
                  static_cast<long long>(r.context), r.policy.c_str(), r.budget.c_str(),
                  r.kv_tokens_per_head, r.kv_bytes / 1048576.0,
                  r.kv_bytes_full > 0 ? 100.0 * r.kv_bytes / r.kv_bytes_full : 0.0, r.kl_mean,
                  r.kl_max, r.top1, r.ppl, r.ppl_full, err, r.needle_correct, r.needle_trials,
                  r.compress_s * 1e3, r.ttft_s, r.decode_tok_s);
    os << buf;
  }
  return os.str() + ruler_table();
}

}  // namespace tandem::llm
