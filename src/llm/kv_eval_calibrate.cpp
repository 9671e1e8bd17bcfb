// SPDX-License-Identifier: Apache-2.0
// calibrate_clusterattn: DBAC grid profiling on a fraction of a profiling set (kv_eval.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "llm/kv_eval_internal.h"
#include "tandem/core/error.h"

namespace tandem::llm {

using namespace kv_eval_detail;

KvCalibrationResult calibrate_clusterattn(const Model& model, const Tokenizer& tokenizer,
                                          const std::string& text, const KvCalibrationConfig& c) {
  if (c.segments < 1 || !(c.fraction > 0 && c.fraction <= 1) || c.continuation < 2 ||
      c.context < 16 || c.eps.empty() || c.rho.empty() || c.min_len.empty() || c.pool.empty()) {
    throw InvalidArgument(cat("kv-calibrate: segments ", c.segments, ", fraction ", c.fraction,
                              ", continuation ", c.continuation, ", context ", c.context,
                              " and a non-empty grid are required"));
  }
  if (c.context + c.continuation > model.config().context_length) {
    throw InvalidArgument(cat("kv-calibrate: context ", c.context, " exceeds the model's ",
                              model.config().context_length));
  }
  auto say = [&](const std::string& s) {
    if (c.progress) c.progress(s);
  };
  const int used = std::max(1, static_cast<int>(std::ceil(c.fraction * c.segments - 1e-9)));
  const int64_t seg = c.context + c.continuation + 1;
  const int64_t need = seg * used;
  const std::vector<int32_t> ids = kv_eval_detail::encode_prefix(
      tokenizer, text, need, cat("kv-calibrate (", used, " profiling segments)"));
  KvCalibrationResult res;
  res.segments_used = used;
  std::vector<ClusterAttnParams> grid;
  for (int pool : c.pool) {
    for (int eps : c.eps) {
      for (double rho : c.rho) {
        for (int ml : c.min_len) {
          ClusterAttnParams p;
          p.window = c.window;
          p.pool = pool;
          p.dbac = DbacParams{.eps = eps, .rho = rho, .min_len = ml};
          p.fill = c.fill;
          grid.push_back(p);
        }
      }
    }
  }
  std::vector<double> kl(grid.size(), 0), kept(grid.size(), 0);
  for (int s = 0; s < used; ++s) {
    const std::span<const int32_t> all(ids);
    const auto context = all.subspan(s * seg, c.context);
    const auto cont = all.subspan(s * seg + c.context, c.continuation);
    say(cat("segment ", s + 1, "/", used, ": prefill ", c.context, " tokens"));
    Prefilled p = prefill_recorded(model, context, c.window, c.prefill_chunk);
    std::vector<std::vector<double>> full;
    {
      KvCache ref = p.cache.clone();
      full = teacher_forced_log_probs(model, ref, cont, static_cast<int32_t>(c.context));
    }
    for (size_t g = 0; g < grid.size(); ++g) {
      KvPolicyOptions o;
      o.budget_tokens = c.budget.tokens;
      o.budget_ratio = c.budget.ratio;
      o.window = c.window;
      o.extra = {{"pool", std::to_string(grid[g].pool)},
                 {"eps", std::to_string(grid[g].dbac.eps)},
                 {"rho", std::to_string(grid[g].dbac.rho)},
                 {"min_len", std::to_string(grid[g].dbac.min_len)},
                 {"fill", grid[g].fill ? "1" : "0"}};
      Compressed comp = compress_copy(p, make_kv_policy("clusterattn", o, p.cache.shape()));
      const auto lp =
          teacher_forced_log_probs(model, comp.cache, cont, static_cast<int32_t>(c.context));
      double sum = 0;
      for (size_t i = 0; i < lp.size(); ++i) {
        double k = 0;
        for (size_t v = 0; v < lp[i].size(); ++v)
          k += std::exp(full[i][v]) * (full[i][v] - lp[i][v]);
        sum += std::max(k, 0.0);
      }
      kl[g] += sum / static_cast<double>(lp.size()) / used;
      const int64_t budget = resolve_kv_budget(o, c.context, "clusterattn");
      kept[g] += comp.tokens_per_head / static_cast<double>(budget) / used;
    }
    say(cat("segment ", s + 1, ": ", grid.size(), " grid points scored"));
  }
  res.best_kl = std::numeric_limits<double>::infinity();
  for (size_t g = 0; g < grid.size(); ++g) {
    res.grid.push_back({grid[g], kl[g], kept[g]});
    if (kl[g] < res.best_kl) {
      res.best_kl = kl[g];
      res.best = grid[g];
    }
  }
  return res;
}

}  // namespace tandem::llm
