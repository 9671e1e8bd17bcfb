// SPDX-License-Identifier: Apache-2.0
// generate(): prompt in, tokens out. The prompt is prefilled in chunks (prefill_chunk tokens per
// Model::forward; only the last chunk's last row of logits is computed), the cache policy is told
// the prefill is done, then tokens are decoded one at a time until max_new_tokens or a stop id
// (end-of-generation). Each new token is reported to a callback as soon as it is sampled; the
// callback may return false to stop. Positions continue from the cache's next_position(), so a
// second call on the same cache continues the conversation.
//
//   auto model = tandem::llm::Model::load(path);
//   auto cache = model.make_cache();
//   tandem::llm::GenerateOptions o{.max_new_tokens = 32, .stop_ids = tokenizer.eog_ids()};
//   o.on_token = [&](int32_t id) { std::cout << detok.push(id) << std::flush; return true; };
//   auto r = tandem::llm::generate(model, cache, prompt_ids, o);
//   r.stats.decode_tokens_per_s;
//
// generate_batch() serves several sequences at once (continuous batching over forward_batch()):
// every step stacks one prefill chunk of each sequence still reading its prompt and the pending
// token of each decoding one, so the weight GEMMs run once per step for all of them; each sequence
// has its own cache, sampler (seeded by its options), stop ids, callback and length, and drops out
// of the batch when it stops. Its tokens equal those of generate() on that sequence alone (up to
// float rounding in near-ties).
//
//   std::vector<tandem::llm::BatchRequest> reqs(2);
//   reqs[0] = {.cache = &cache_a, .prompt = ids_a, .options = o};
//   reqs[1] = {.cache = &cache_b, .prompt = ids_b, .options = o};
//   auto results = tandem::llm::generate_batch(model, reqs);   // one GenerateResult each
//
// Timing is wall-clock (steady_clock): TTFT = prefill plus the first sampling (for a batch, from
// the start of the batch).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tandem/export.h"
#include "tandem/llm/model.h"
#include "tandem/llm/sampler.h"

namespace tandem::llm {

struct GenerateOptions {
  int max_new_tokens = 64;
  int prefill_chunk = 128;        // tokens per prefill forward
  SamplerOptions sampler;         // greedy by default
  std::vector<int32_t> stop_ids;  // generation ends after sampling one of these (it is reported)
  std::function<bool(int32_t)> on_token;  // per new token; false stops
  // Single-token forwards (decode): int8 activations by default, kF32 for reference runs (see
  // DecodeArithmetic in model.h). generate_batch uses kF32 for a step when any request asks.
  DecodeArithmetic decode = DecodeArithmetic::kInt8;
};

struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_s = 0.0;
  double decode_s = 0.0;  // the forward passes after the first token
  double ttft_s = 0.0;    // prompt in -> first token sampled
  double prefill_tokens_per_s = 0.0;
  double decode_tokens_per_s = 0.0;
  std::string stop_reason;  // "length", "stop_id", "callback"
};

struct GenerateResult {
  std::vector<int32_t> tokens;      // the new tokens
  std::vector<float> first_logits;  // logits that chose the first new token
  GenerateStats stats;
};

// InvalidArgument for an empty prompt, max_new_tokens < 0 or prefill_chunk < 1, or a sequence
// longer than the model's context length.
TANDEM_API GenerateResult generate(const Model& model, KvCache& cache,
                                   std::span<const int32_t> prompt,
                                   const GenerateOptions& options = {});

// One sequence of a batched generation.
struct BatchRequest {
  KvCache* cache = nullptr;     // its own cache (empty, or holding an earlier turn)
  std::vector<int32_t> prompt;  // continues from cache->next_position()
  GenerateOptions options;      // per sequence: length, chunk, sampler and seed, stops, callback
};

struct BatchStats {
  int64_t steps = 0;             // forward_batch calls
  int64_t prompt_tokens = 0;     // over all sequences
  int64_t generated_tokens = 0;  // over all sequences
  double wall_s = 0.0;
  double tokens_per_s = 0.0;  // generated tokens / wall time (the batch's decode throughput)
};

// Generates for every request (see above); results in request order. InvalidArgument as
// generate() (naming the request), for a null cache or one shared by two requests.
TANDEM_API std::vector<GenerateResult> generate_batch(const Model& model,
                                                      std::span<BatchRequest> requests,
                                                      BatchStats* stats = nullptr);

}  // namespace tandem::llm
