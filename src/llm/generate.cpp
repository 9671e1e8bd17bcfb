// SPDX-License-Identifier: Apache-2.0
// generate(): chunked prefill, then sampled decode; see generate.h.
#include "tandem/llm/generate.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "core/clock.h"
#include "tandem/core/error.h"

namespace tandem::llm {
GenerateResult generate(const Model& model, KvCache& cache, std::span<const int32_t> prompt,
                        const GenerateOptions& options) {
  if (prompt.empty()) throw InvalidArgument("generate: empty prompt");
  if (options.max_new_tokens < 0 || options.prefill_chunk < 1) {
    throw InvalidArgument(cat("generate: max_new_tokens ", options.max_new_tokens,
                              " and prefill_chunk ", options.prefill_chunk, " are out of range"));
  }
  const int64_t start = cache.next_position();
  const int64_t total = start + static_cast<int64_t>(prompt.size()) + options.max_new_tokens;
  if (total > model.config().context_length) {
    throw InvalidArgument(cat("generate: ", total, " positions exceed the context length ",
                              model.config().context_length));
  }
  GenerateResult r;
  GenerateStats& st = r.stats;
  st.prompt_tokens = static_cast<int64_t>(prompt.size());
  Sampler sampler(options.sampler);
  const auto t0 = std::chrono::steady_clock::now();

  const DecodeArithmetic decode = options.decode;
  Tensor logits;
  std::vector<int32_t> pos;
  for (size_t off = 0; off < prompt.size(); off += options.prefill_chunk) {
    const size_t n = std::min<size_t>(options.prefill_chunk, prompt.size() - off);
    pos.resize(n);
    std::iota(pos.begin(), pos.end(), static_cast<int32_t>(start + off));
    logits =
        model.forward(prompt.subspan(off, n), pos, cache, {.last_only = true, .decode = decode});
  }
  st.prefill_s = seconds_since(t0);
  cache.policy().on_prefill_done(cache);
  st.stop_reason = "length";
  if (options.max_new_tokens == 0) return r;

  const int64_t vocab = model.config().vocab_size;
  r.first_logits.assign(logits.data<float>(), logits.data<float>() + vocab);
  int32_t next = sampler.sample(r.first_logits);
  st.ttft_s = seconds_since(t0);
  const auto t1 = std::chrono::steady_clock::now();
  int32_t position = static_cast<int32_t>(start + prompt.size());
  while (true) {
    r.tokens.push_back(next);
    if (options.on_token && !options.on_token(next)) {
      st.stop_reason = "callback";
      break;
    }
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), next) !=
        options.stop_ids.end()) {
      st.stop_reason = "stop_id";
      break;
    }
    if (static_cast<int>(r.tokens.size()) >= options.max_new_tokens) break;
    const int32_t tok[1] = {next}, p[1] = {position++};
    logits = model.forward(tok, p, cache, {.last_only = true, .decode = decode});
    cache.policy().on_decode_step(cache);
    next = sampler.sample(std::span<const float>(logits.data<float>(), vocab));
  }
  st.decode_s = seconds_since(t1);
  st.generated_tokens = static_cast<int64_t>(r.tokens.size());
  if (st.prefill_s > 0) st.prefill_tokens_per_s = st.prompt_tokens / st.prefill_s;
  // Decode steps: one forward per token after the first (the first came from the prefill).
  if (st.decode_s > 0 && st.generated_tokens > 1) {
    st.decode_tokens_per_s = (st.generated_tokens - 1) / st.decode_s;
  }
  return r;
}

}  // namespace tandem::llm
