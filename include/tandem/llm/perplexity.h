// SPDX-License-Identifier: Apache-2.0
// Perplexity of a model over a token stream, with llama.cpp's protocol (llama-perplexity's default,
// tools/perplexity/perplexity.cpp) so that the two numbers can be compared:
//   - the text is tokenized once, with BOS prepended when the vocabulary asks for it;
//   - it is cut into n_chunks = min(--chunks, n_tokens / ctx) non-overlapping windows of ctx
//     tokens (the tail that does not fill a window is dropped); a text shorter than 2 * ctx tokens
//     is refused, as llama.cpp does;
//   - each window is run from an empty cache at positions 0..ctx-1, its first token replaced by
//     BOS when the vocabulary adds BOS;
//   - only the second half is scored: for j in [ctx/2, ctx-2], -log softmax(logits[j])[token j+1],
//     so every scored token has at least ctx/2 tokens of context; ctx - ctx/2 - 1 per window;
//   - PPL = exp(mean NLL) and its error estimate PPL * sqrt((E[nll^2] - E[nll]^2) / (n - 1)).
// The log-softmax is llama.cpp's: float max, double sum of expf(logit - max).
//
//   auto model = tandem::llm::Model::load(path);
//   tandem::llm::Tokenizer tok(tandem::llm::load_vocab(model.file()));
//   auto ids = tok.encode(text, /*add_special=*/true, /*parse_special=*/false);
//   auto r = tandem::llm::perplexity(model, ids, {.ctx = 512, .bos_id = tok.add_bos() ?
//                                                   tok.bos_id() : -1});
//   std::printf("PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_error);
//
// Departures from llama.cpp: windows are run one at a time (llama.cpp packs n_batch / ctx windows
// into one batch of several sequences; the result is the same up to rounding), and the KV cache
// keeps f32 where llama.cpp's default keeps f16. Thread-safety: perplexity() only reads the model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "tandem/export.h"
#include "tandem/llm/model.h"

namespace tandem::llm {

struct PerplexityOptions {
  int ctx = 512;        // tokens per window (llama-perplexity -c)
  int chunks = -1;      // windows to score at most; -1: all that fit (llama-perplexity --chunks)
  int batch = 512;      // tokens per Model::forward within a window (llama-perplexity -b)
  int32_t bos_id = -1;  // written over each window's first token; -1: none (vocab without add_bos)
  // Called after each window with its index (0-based), the window count and the running PPL;
  // return false to stop early (the result then covers the windows done).
  std::function<bool(int chunk, int n_chunks, double running_ppl)> on_chunk;
  // A KV policy (eviction or quantization, kv_policy_registry.h) changes the protocol so that
  // every scored token reads the policy's cache: each window's first half [0, ctx/2) is a prefill
  // (the policy sees the queries of its last query_window() rows, then on_prefill_done), and the
  // second half runs in steps of kv_step tokens, each followed by on_decode_step. Scoring is
  // unchanged (rows ctx/2 .. ctx-2). Null: the plain protocol above.
  std::shared_ptr<KvPolicy> kv_policy;
  int kv_step = 32;
  // Forwards of a single token (batch or kv_step 1, or a one-token remainder): int8 activations by
  // default, kF32 for reference runs (DecodeArithmetic in model.h). Longer forwards compute in f32.
  DecodeArithmetic decode = DecodeArithmetic::kInt8;
};

struct PerplexityResult {
  double ppl = 0.0;                  // exp(mean NLL)
  double ppl_error = 0.0;            // one standard error of ppl (llama.cpp's "+/-")
  double mean_nll = 0.0;             // nats per scored token
  int64_t text_tokens = 0;           // tokens of the whole input
  int n_chunks = 0;                  // windows scored
  int64_t scored_tokens = 0;         // n_chunks * (ctx - ctx/2 - 1)
  std::vector<double> chunk_ppl;     // running PPL after each window (llama.cpp's "[i]x.xxxx")
  double seconds = 0.0;              // wall time of the forward passes and scoring
  double tokens_per_s = 0.0;         // window tokens run per second
  int64_t kv_bytes = 0;              // cache bytes at the end of the last window
  double kv_bits_per_element = 0.0;  // kv_bytes * 8 / (2 * held tokens * head_dim, all heads)
};

// InvalidArgument for ctx < 4, batch < 1, chunks == 0 or < -1, a ctx beyond the model's context
// length, fewer than 2 * ctx tokens, or token ids outside the vocabulary.
TANDEM_API PerplexityResult perplexity(const Model& model, std::span<const int32_t> tokens,
                                       const PerplexityOptions& options = {});

// -log softmax(logits)[target] as llama.cpp computes it (float max, double sum of expf).
// InvalidArgument for an out-of-range target.
TANDEM_API double token_nll(std::span<const float> logits, int32_t target);

}  // namespace tandem::llm
