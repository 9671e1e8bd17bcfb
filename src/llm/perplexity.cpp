// SPDX-License-Identifier: Apache-2.0
// perplexity(): llama.cpp's windowed perplexity protocol over Model::forward (see perplexity.h).
#include "tandem/llm/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_quant.h"

namespace tandem::llm {

double token_nll(std::span<const float> logits, int32_t target) {
  if (target < 0 || static_cast<size_t>(target) >= logits.size()) {
    throw InvalidArgument(
        cat("token_nll: target id ", target, " outside a vocabulary of ", logits.size()));
  }
  float max_logit = logits[0];
  for (float v : logits) max_logit = std::max(max_logit, v);
  double sum_exp = 0.0;
  for (float v : logits) sum_exp += std::exp(v - max_logit);
  return -(static_cast<double>(logits[target] - max_logit) - std::log(sum_exp));
}

PerplexityResult perplexity(const Model& model, std::span<const int32_t> tokens,
                            const PerplexityOptions& o) {
  const ModelConfig& c = model.config();
  if (o.ctx < 4) throw InvalidArgument(cat("perplexity: ctx ", o.ctx, " (need at least 4)"));
  if (o.batch < 1) throw InvalidArgument(cat("perplexity: batch ", o.batch, " (need >= 1)"));
  if (o.chunks == 0 || o.chunks < -1) {
    throw InvalidArgument(cat("perplexity: chunks ", o.chunks, " (need -1 for all, or >= 1)"));
  }
  if (c.context_length > 0 && o.ctx > c.context_length) {
    throw InvalidArgument(
        cat("perplexity: ctx ", o.ctx, " exceeds the model's context length ", c.context_length));
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2 * int64_t{o.ctx}) {
    throw InvalidArgument(cat("perplexity: the text has ", n, " tokens; a context of ", o.ctx,
                              " needs at least ", 2 * int64_t{o.ctx}));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      throw InvalidArgument(cat("perplexity: token id ", tokens[i], " at index ", i,
                                " outside the vocabulary of ", c.vocab_size));
    }
  }
  if (o.kv_policy && o.kv_step < 1) {
    throw InvalidArgument(cat("perplexity: kv_step ", o.kv_step, " (need >= 1)"));
  }
  if (o.bos_id >= c.vocab_size) {
    throw InvalidArgument(
        cat("perplexity: bos_id ", o.bos_id, " outside the vocabulary of ", c.vocab_size));
  }

  const int64_t n_chunk_max = n / o.ctx;
  const int n_chunks =
      static_cast<int>(o.chunks < 0 ? n_chunk_max : std::min<int64_t>(o.chunks, n_chunk_max));
  const int first = o.ctx / 2;
  const int64_t vocab = c.vocab_size;
  const int threads = std::max(1, cpu_num_threads());

  PerplexityResult r;
  r.text_tokens = n;
  double nll = 0.0, nll2 = 0.0;
  int64_t count = 0;
  KvCache cache = model.make_cache(o.kv_policy);
  KvPolicy* policy = o.kv_policy ? &cache.policy() : nullptr;
  std::vector<int32_t> window(static_cast<size_t>(o.ctx)), positions(static_cast<size_t>(o.ctx));
  for (int j = 0; j < o.ctx; ++j) positions[j] = j;
  std::vector<double> row_nll(static_cast<size_t>(o.ctx));
  const auto t0 = std::chrono::steady_clock::now();

  for (int chunk = 0; chunk < n_chunks; ++chunk) {
    const int64_t start = int64_t{chunk} * o.ctx;
    std::copy(tokens.begin() + start, tokens.begin() + start + o.ctx, window.begin());
    if (o.bos_id >= 0) window[0] = o.bos_id;  // llama.cpp: BOS starts every window
    cache.clear();
    // Forward passes: [0, ctx) in batches (plain), or with a policy the prefill [0, first) in
    // batches, then [first, ctx) in steps of kv_step (see PerplexityOptions::kv_policy).
    std::vector<std::pair<int, int>> steps;
    const int prefill_end = policy != nullptr ? first : o.ctx;
    for (int b = 0; b < prefill_end; b += o.batch) {
      steps.emplace_back(b, std::min(o.batch, prefill_end - b));
    }
    for (int b = prefill_end; b < o.ctx; b += o.kv_step) {
      steps.emplace_back(b, std::min(o.kv_step, o.ctx - b));
    }
    for (const auto& step : steps) {
      // Not a structured binding: clang 14 cannot use one inside the OpenMP loop below.
      const int b = step.first, len = step.second;
      const bool last_prefill = policy != nullptr && b + len == prefill_end;
      const auto tok = std::span<const int32_t>(window).subspan(b, len);
      const auto pos = std::span<const int32_t>(positions).subspan(b, len);
      // The model hands the policy each batch's last query_window() queries (observe_queries).
      const Tensor logits = model.forward(tok, pos, cache, {.decode = o.decode});
      if (policy != nullptr) {
        if (last_prefill) {
          policy->on_prefill_done(cache);
        } else if (b >= prefill_end) {
          policy->on_decode_step(cache);
        }
      }
      const float* rows = logits.data<float>();
      // Rows j of this batch with first <= j <= ctx - 2 predict window token j + 1.
      const int lo = std::max(b, first), hi = std::min(b + len, o.ctx - 1);
#pragma omp parallel for schedule(static) num_threads(threads)
      for (int j = lo; j < hi; ++j) {
        const std::span<const float> row(rows + static_cast<int64_t>(j - b) * vocab,
                                         static_cast<size_t>(vocab));
        row_nll[j] = token_nll(row, tokens[start + j + 1]);
      }
    }
    const KvStorageStats st = kv_storage_stats(cache);
    r.kv_bytes = st.bytes;
    r.kv_bits_per_element = st.bits_per_element;
    for (int j = first; j < o.ctx - 1; ++j) {
      nll += row_nll[j];
      nll2 += row_nll[j] * row_nll[j];
    }
    count += o.ctx - 1 - first;
    r.chunk_ppl.push_back(std::exp(nll / static_cast<double>(count)));
    r.n_chunks = chunk + 1;
    if (o.on_chunk && !o.on_chunk(chunk, n_chunks, r.chunk_ppl.back())) break;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.tokens_per_s = r.seconds > 0 ? static_cast<double>(r.n_chunks) * o.ctx / r.seconds : 0.0;
  r.scored_tokens = count;
  const double mean = nll / static_cast<double>(count);
  r.mean_nll = mean;
  r.ppl = std::exp(mean);
  const double var = nll2 / static_cast<double>(count) - mean * mean;
  r.ppl_error =
      (var > 0 && count > 1) ? r.ppl * std::sqrt(var / static_cast<double>(count - 1)) : 0.0;
  return r;
}

}  // namespace tandem::llm
