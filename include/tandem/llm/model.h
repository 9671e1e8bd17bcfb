// SPDX-License-Identifier: Apache-2.0
// Model: a LLaMA-architecture decoder (LLaMA 1-3, Mistral, TinyLlama, SmolLM2) run from a GGUF
// file, weights used in place (zero-copy views of the mapped file; quantized matrices are
// dequantized on the fly inside the GEMM).
//
// Forward of a chunk of T tokens at positions p (a prefill chunk, or T = 1 for a decode step):
//   x = embed(tokens)
//   per layer: h = rms_norm(x) ; q,k,v = h Wq^T, h Wk^T, h Wv^T ; rope(q), rope(k) (interleaved
//              pairs: GGUF stores llama's Q/K rows permuted for llama.cpp's LLAMA_ROPE_TYPE_NORM) ;
//              append k, v to the KvCache ; a = attention(q over the cached keys, causal by
//              position, GQA) ; x += a Wo^T ; h = rms_norm(x) ; x += (silu(h Wg^T) * h Wu^T) Wd^T
//   logits = rms_norm(x) Wout^T   (Wout = token_embd when the file has no output.weight)
//
//   auto model = tandem::llm::Model::load("SmolLM2-135M-Instruct.Q4_1.gguf");
//   auto cache = model.make_cache();
//   std::vector<int32_t> ids = {1, 2, 3}, pos = {0, 1, 2};
//   tandem::Tensor logits = model.forward(ids, pos, cache);   // f32 [3, vocab]
//
// Departures: RoPE scaling (linear, YaRN) is unsupported so far: files that ask for it raise
// Unsupported. Thread-safety: forward() only reads the model; one KvCache per concurrent sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/export.h"
#include "tandem/llm/kv_cache.h"

namespace tandem::llm {

class GgufFile;

// Hyper-parameters from the GGUF metadata ({arch}.* keys).
struct ModelConfig {
  std::string arch;             // general.architecture ("llama")
  std::string name;             // general.name (may be empty)
  int n_layers = 0;             // {arch}.block_count
  int d_model = 0;              // {arch}.embedding_length
  int d_ff = 0;                 // {arch}.feed_forward_length
  int n_heads = 0;              // {arch}.attention.head_count
  int n_kv_heads = 0;           // {arch}.attention.head_count_kv (= n_heads when absent)
  int head_dim = 0;             // d_model / n_heads
  int rope_dim = 0;             // {arch}.rope.dimension_count (= head_dim when absent)
  int64_t vocab_size = 0;       // token_embd rows, else the tokenizer.ggml.tokens length
  int64_t context_length = 0;   // {arch}.context_length
  float rms_eps = 1e-5f;        // {arch}.attention.layer_norm_rms_epsilon
  float rope_theta = 10000.0f;  // {arch}.rope.freq_base (10000 when absent)

  // NotFound naming the key when a required key is missing; Unsupported for architectures other
  // than llama (and RoPE scaling); ParseError for inconsistent values.
  static ModelConfig from_gguf(const GgufFile& file);
};

struct LayerWeights {
  Tensor attn_norm;             // f32 [d_model]
  Tensor wq, wk, wv, wo;        // [n_heads*head_dim, d], [n_kv*head_dim, d] x2, [d, n_heads*hd]
  Tensor ffn_norm;              // f32 [d_model]
  Tensor w_gate, w_up, w_down;  // [d_ff, d], [d_ff, d], [d, d_ff]
};

struct ForwardOptions {
  bool last_only = false;  // logits only for the last token: [1, vocab]
  // Single-token steps (decode) on the CPU: round activations to int8 blocks for the quantized
  // matrices and use integer dot products, as llama.cpp does (ops::GemmParams; logits then differ
  // from the f32 path by ~1e-3 relative).
  bool int8_activations = false;
};

class TANDEM_API Model {
 public:
  // Opens and validates a GGUF file (shapes and dtypes of every weight against the config).
  static Model load(const std::string& path);
  explicit Model(std::shared_ptr<const GgufFile> file);

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return *file_; }
  const LayerWeights& layer(int i) const { return layers_.at(static_cast<size_t>(i)); }
  const Tensor& token_embd() const { return token_embd_; }
  const Tensor& output_norm() const { return output_norm_; }
  const Tensor& output() const { return output_; }
  bool output_tied() const { return output_tied_; }
  // Bytes of all weights (as stored).
  int64_t weight_bytes() const;

  // An empty cache shaped for this model.
  KvCache make_cache(std::shared_ptr<KvPolicy> policy = nullptr, int block_tokens = 32) const;

  // Runs T tokens at the given positions (each larger than every position already in the cache
  // for causal use), appending their K/V to `cache`. Returns f32 logits [T, vocab] (or [1, vocab]
  // with last_only). InvalidArgument for bad ids, mismatched lengths or a cache of another shape.
  Tensor forward(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                 KvCache& cache, const ForwardOptions& options = {}) const;

 private:
  std::shared_ptr<const GgufFile> file_;
  ModelConfig config_;
  Tensor token_embd_, output_norm_, output_;
  bool output_tied_ = false;
  std::vector<LayerWeights> layers_;
};

// Attention of T queries over the cached keys of one layer: q f32 [T, n_heads, head_dim], query
// positions [T]; out f32 [T, n_heads, head_dim]. Query head h reads KV head h / (n_heads /
// n_kv_heads); a query at position p sees the cached slots whose position is <= p. Softmax is
// computed online per block (running max), parallel over (token, KV head) pairs with OpenMP (a GQA
// group's query heads share each K/V read). A query that sees no key gets zeros.
TANDEM_API void cache_attention(const Tensor& q, std::span<const int32_t> positions,
                                const KvCache& cache, int layer, Tensor& out, float scale = 0.0f);

}  // namespace tandem::llm
