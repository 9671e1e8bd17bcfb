// SPDX-License-Identifier: Apache-2.0
// generate_batch(): continuous batching of several sequences over Model::forward_batch; see
// generate.h. Each sequence follows generate()'s steps exactly (prefill chunks, policy hooks,
// sample, report, stop checks, feed the token back), only interleaved with the others.
#include <algorithm>
#include <chrono>
#include <numeric>
#include <set>

#include "tandem/core/error.h"
#include "tandem/llm/generate.h"

namespace tandem::llm {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct SequenceState {
  explicit SequenceState(const SamplerOptions& o) : sampler(o) {}
  Sampler sampler;
  size_t prefilled = 0;  // prompt tokens already forwarded
  bool done = false;
  int32_t pending = 0;   // the sampled token to feed next (decode phase)
  int32_t position = 0;  // position of the next token fed
  int32_t start = 0;     // cache position the prompt starts at
  Clock::time_point first_token;
  std::vector<int32_t> chunk_pos;  // positions of the chunk in flight
};

}  // namespace

std::vector<GenerateResult> generate_batch(const Model& model, std::span<BatchRequest> requests,
                                           BatchStats* stats) {
  const int64_t vocab = model.config().vocab_size;
  std::set<const KvCache*> caches;
  for (size_t i = 0; i < requests.size(); ++i) {
    const BatchRequest& r = requests[i];
    const GenerateOptions& o = r.options;
    if (r.cache == nullptr || !caches.insert(r.cache).second) {
      throw InvalidArgument(cat("generate_batch: request ", i, " has ",
                                r.cache ? "the cache of an earlier request" : "no cache"));
    }
    if (r.prompt.empty())
      throw InvalidArgument(cat("generate_batch: request ", i, ": empty prompt"));
    if (o.max_new_tokens < 0 || o.prefill_chunk < 1) {
      throw InvalidArgument(cat("generate_batch: request ", i, ": max_new_tokens ",
                                o.max_new_tokens, " and prefill_chunk ", o.prefill_chunk,
                                " are out of range"));
    }
    const int64_t total =
        r.cache->next_position() + static_cast<int64_t>(r.prompt.size()) + o.max_new_tokens;
    if (total > model.config().context_length) {
      throw InvalidArgument(cat("generate_batch: request ", i, ": ", total,
                                " positions exceed the context length ",
                                model.config().context_length));
    }
  }
  const size_t n = requests.size();
  std::vector<GenerateResult> results(n);
  std::vector<SequenceState> st;
  st.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    st.emplace_back(requests[i].options.sampler);
    st[i].start = st[i].position = requests[i].cache->next_position();
    results[i].stats.prompt_tokens = static_cast<int64_t>(requests[i].prompt.size());
    results[i].stats.stop_reason = "length";
  }
  BatchStats total;
  const auto t0 = Clock::now();

  // Records a sampled token; false when the sequence stops with it.
  auto take = [&](size_t i, int32_t tok) {
    const GenerateOptions& o = requests[i].options;
    GenerateResult& r = results[i];
    r.tokens.push_back(tok);
    if (o.on_token && !o.on_token(tok)) {
      r.stats.stop_reason = "callback";
      return false;
    }
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), tok) != o.stop_ids.end()) {
      r.stats.stop_reason = "stop_id";
      return false;
    }
    if (static_cast<int>(r.tokens.size()) >= o.max_new_tokens) return false;
    st[i].pending = tok;
    return true;
  };
  auto finish = [&](size_t i) {
    st[i].done = true;
    GenerateStats& s = results[i].stats;
    s.generated_tokens = static_cast<int64_t>(results[i].tokens.size());
    if (s.generated_tokens > 0) s.decode_s = seconds(st[i].first_token, Clock::now());
    if (s.prefill_s > 0) s.prefill_tokens_per_s = s.prompt_tokens / s.prefill_s;
    if (s.decode_s > 0 && s.generated_tokens > 1) {
      s.decode_tokens_per_s = (s.generated_tokens - 1) / s.decode_s;
    }
  };

  std::vector<SequenceChunk> chunks;
  std::vector<size_t> owner;
  while (true) {
    chunks.clear();
    owner.clear();
    for (size_t i = 0; i < n; ++i) {
      SequenceState& s = st[i];
      if (s.done) continue;
      const BatchRequest& r = requests[i];
      std::span<const int32_t> toks;
      if (s.prefilled < r.prompt.size()) {
        const size_t len = std::min<size_t>(r.options.prefill_chunk, r.prompt.size() - s.prefilled);
        toks = std::span<const int32_t>(r.prompt).subspan(s.prefilled, len);
      } else {
        toks = std::span<const int32_t>(&s.pending, 1);
      }
      s.chunk_pos.resize(toks.size());
      std::iota(s.chunk_pos.begin(), s.chunk_pos.end(), s.position);
      chunks.push_back({toks, s.chunk_pos, r.cache});
      owner.push_back(i);
    }
    if (chunks.empty()) break;
    // One row in all (a single sequence decoding) takes the decode arithmetic of the requests,
    // f32 when any of them asks for it; stacked rows of several compute in f32 anyway.
    DecodeArithmetic decode = DecodeArithmetic::kInt8;
    for (size_t i : owner) {
      if (requests[i].options.decode == DecodeArithmetic::kF32) decode = DecodeArithmetic::kF32;
    }
    const std::vector<Tensor> logits =
        model.forward_batch(chunks, {.last_only = true, .decode = decode});
    ++total.steps;
    for (size_t c = 0; c < chunks.size(); ++c) {
      const size_t i = owner[c];
      SequenceState& s = st[i];
      const BatchRequest& r = requests[i];
      KvCache& cache = *r.cache;
      const std::span<const float> row(logits[c].data<float>(), static_cast<size_t>(vocab));
      s.position += static_cast<int32_t>(chunks[c].tokens.size());
      int32_t tok = 0;
      if (s.prefilled < r.prompt.size()) {
        s.prefilled += chunks[c].tokens.size();
        if (s.prefilled < r.prompt.size()) continue;
        results[i].stats.prefill_s = seconds(t0, Clock::now());
        cache.policy().on_prefill_done(cache);
        if (r.options.max_new_tokens == 0) {
          finish(i);
          continue;
        }
        results[i].first_logits.assign(row.begin(), row.end());
        tok = s.sampler.sample(results[i].first_logits);
        s.first_token = Clock::now();
        results[i].stats.ttft_s = seconds(t0, s.first_token);
      } else {
        cache.policy().on_decode_step(cache);
        tok = s.sampler.sample(row);
      }
      if (!take(i, tok)) finish(i);
    }
  }
  total.wall_s = seconds(t0, Clock::now());
  for (const GenerateResult& r : results) {
    total.prompt_tokens += r.stats.prompt_tokens;
    total.generated_tokens += r.stats.generated_tokens;
  }
  if (total.wall_s > 0) total.tokens_per_s = total.generated_tokens / total.wall_s;
  if (stats) *stats = total;
  return results;
}

}  // namespace tandem::llm
