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
#include <memory>
#include <span>
#include <string>
#include <utility>
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
  double policy_s = 0.0;      // seconds in the KV policies' hooks (on_prefill_done, on_decode_step)
};

// Generates for every request (see above); results in request order. InvalidArgument as
// generate() (naming the request), for a null cache or one shared by two requests. A loop over a
// BatchRunner: add every request, step() until none is active.
TANDEM_API std::vector<GenerateResult> generate_batch(const Model& model,
                                                      std::span<BatchRequest> requests,
                                                      BatchStats* stats = nullptr);

// BatchRunner: the step loop of generate_batch as an object, so that sequences join and leave the
// running batch between steps (continuous batching for a server). add() validates a request and
// queues it for the next step; step() runs one forward_batch over every active sequence (a prefill
// chunk of each one still reading its prompt, the pending token of each decoding one), samples,
// calls the callbacks, and returns the sequences that finished in it; cancel() drops a sequence at
// once, after which the runner never touches its cache again (its owner may free or clear it).
// A sequence's tokens do not depend on when it joined or who it shares steps with (with f32
// decode; int8 decode of a lone row differs by rounding, see DecodeArithmetic). TTFT counts from
// add().
//
//   tandem::llm::BatchRunner runner(model);
//   const uint64_t a = runner.add({&cache_a, ids_a, o});
//   while (runner.active() > 0) {
//     for (auto& [id, result] : runner.step()) use(id, result);
//     if (more_work()) runner.add({&cache_b, ids_b, o});   // joins at the next step
//   }
//
// Thread-safety: not thread-safe; one thread owns the runner (the callbacks run on it inside
// step()). The model and the caches must outlive the sequences that use them.
class TANDEM_API BatchRunner {
 public:
  explicit BatchRunner(const Model& model);
  ~BatchRunner();
  BatchRunner(const BatchRunner&) = delete;
  BatchRunner& operator=(const BatchRunner&) = delete;

  // Queues a sequence for the next step and returns its id (1, 2, ...). InvalidArgument as
  // generate_batch, also for a cache an active sequence already uses.
  uint64_t add(BatchRequest request);
  // One step over all active sequences; the ones that finished in it, with their results (none
  // when nothing is active). A callback that throws propagates out of step() with the runner
  // still consistent: that sequence is dropped as if cancelled.
  std::vector<std::pair<uint64_t, GenerateResult>> step();
  // Drops an active sequence (its result is discarded); false when the id is not active.
  bool cancel(uint64_t id);
  // Sequences added and not yet finished or cancelled.
  size_t active() const;
  // Cumulative over the runner's life: steps, prompt and generated tokens of finished sequences
  // (wall_s and tokens_per_s are left 0: the caller owns the clock).
  BatchStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::llm
