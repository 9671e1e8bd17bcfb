// SPDX-License-Identifier: Apache-2.0
// Model: a decoder-only transformer run from a GGUF file, weights used in place (zero-copy views
// of the mapped file; quantized matrices are dequantized on the fly inside the GEMM). Two
// architectures, picked by general.architecture:
//
// llama (LLaMA 1-3, Mistral, TinyLlama, SmolLM2). Forward of a chunk of T tokens at positions p:
//   x = embed(tokens)
//   per layer: h = rms_norm(x) ; q,k,v = h Wq^T, h Wk^T, h Wv^T ; rope(q), rope(k) (interleaved
//              pairs: GGUF stores llama's Q/K rows permuted for llama.cpp's LLAMA_ROPE_TYPE_NORM) ;
//              append k, v to the KvCache ; a = attention(q over the cached keys, causal by
//              position, GQA) ; x += a Wo^T ; h = rms_norm(x) ; x += (silu(h Wg^T) * h Wu^T) Wd^T
//   logits = rms_norm(x) Wout^T   (Wout = token_embd when the file has no output.weight)
// RoPE scaling as llama.cpp reads it from {arch}.rope.scaling.*: linear (frequencies / factor),
// YaRN (per-pair blend of interpolated and original frequencies over the ramp between the
// beta_fast and beta_slow correction dims, cos/sin scaled by attn_factor * (1 + 0.1 ln factor)),
// and llama3-style per-pair frequency divisors from a rope_freqs.weight tensor.
//
// gpt2 (the GPT-2/GPT-3 family): x = embed(tokens) + position_embd(p) ; per layer:
//   h = layer_norm(x) ; qkv = h Wqkv^T + b (fused, rows Q | K | V) ; attention as above, no RoPE ;
//   x += a Wo^T + bo ; h = layer_norm(x) ; x += gelu_tanh(h Wu^T + bu) Wd^T + bd
//   logits = layer_norm(x) Wout^T   (tied to token_embd when output.weight is absent)
//
//   auto model = tandem::llm::Model::load("SmolLM2-135M-Instruct.Q4_1.gguf");
//   auto cache = model.make_cache();
//   std::vector<int32_t> ids = {1, 2, 3}, pos = {0, 1, 2};
//   tandem::Tensor logits = model.forward(ids, pos, cache);   // f32 [3, vocab]
//
// Several sequences run together with forward_batch(): their rows are stacked so every weight
// GEMM runs once over all of them, attention runs per sequence over its own KvCache.
//
// Thread-safety: forward() only reads the model; one KvCache per concurrent sequence.
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

enum class ModelArch : uint8_t { kLlama, kGpt2 };

enum class RopeScalingType : uint8_t { kNone, kLinear, kYarn };

// RoPE context extension ({arch}.rope.scaling.* keys, llama.cpp's meaning and defaults).
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.0f;       // rope.scaling.factor (or 1/rope.scale_linear): frequencies / it
  int64_t orig_context = 0;  // rope.scaling.original_context_length (= context_length)
  float ext_factor = 0.0f;   // rope.scaling.yarn_ext_factor (1 for yarn when absent)
  float attn_factor = 1.0f;  // rope.scaling.attn_factor * rope.scaling.yarn_attn_factor
  float beta_fast = 32.0f;   // rope.scaling.yarn_beta_fast
  float beta_slow = 1.0f;    // rope.scaling.yarn_beta_slow
};

// Hyper-parameters from the GGUF metadata ({arch}.* keys).
struct ModelConfig {
  std::string arch;                    // general.architecture ("llama" or "gpt2")
  ModelArch kind = ModelArch::kLlama;  // arch as an enum
  std::string name;                    // general.name (may be empty)
  int n_layers = 0;                    // {arch}.block_count
  int d_model = 0;                     // {arch}.embedding_length
  int d_ff = 0;                        // {arch}.feed_forward_length
  int n_heads = 0;                     // {arch}.attention.head_count
  int n_kv_heads = 0;                  // {arch}.attention.head_count_kv (= n_heads when absent)
  int head_dim = 0;                    // d_model / n_heads
  int rope_dim = 0;                    // {arch}.rope.dimension_count (= head_dim; 0 for gpt2)
  int64_t vocab_size = 0;              // token_embd rows, else the tokenizer.ggml.tokens length
  int64_t context_length = 0;          // {arch}.context_length
  float rms_eps = 1e-5f;               // {arch}.attention.layer_norm_rms_epsilon (llama)
  float layer_norm_eps = 1e-5f;        // {arch}.attention.layer_norm_epsilon (gpt2)
  float rope_theta = 10000.0f;         // {arch}.rope.freq_base (10000 when absent)
  RopeScaling rope_scaling;            // llama only

  // NotFound naming the key when a required key is missing; Unsupported for architectures other
  // than llama and gpt2 (the message lists them) and unknown RoPE scaling types; ParseError for
  // inconsistent values.
  static ModelConfig from_gguf(const GgufFile& file);
};

struct LayerWeights {
  Tensor attn_norm;             // f32 [d_model]
  Tensor wq, wk, wv, wo;        // llama: [n_heads*head_dim, d], [n_kv*head_dim, d] x2; both: wo
                                // [d, n_heads*hd]
  Tensor ffn_norm;              // f32 [d_model]
  Tensor w_gate, w_up, w_down;  // [d_ff, d] (llama only), [d_ff, d], [d, d_ff]
  // gpt2 only (undefined for llama): LayerNorm biases, the fused QKV projection and its bias, and
  // the biases of the other projections (all f32).
  Tensor attn_norm_b, ffn_norm_b;  // [d_model]
  Tensor wqkv, bqkv;               // [(n_heads + 2 n_kv) head_dim, d], [(n_heads + 2 n_kv) hd]
  Tensor bo, b_up, b_down;         // [d_model], [d_ff], [d_model]
};

// The arithmetic of the weight products of a decode step: a forward of one token, or a batch of
// sequences one token each (on the CPU, up to 16 sequences, every row then computes what it would
// alone, bit for bit; larger batches take the f32 GEMM, which is faster there). Other
// forwards (prefill, its one-row head with last_only included, a batch step holding a prefill
// chunk) always use f32 activations.
enum class DecodeArithmetic : uint8_t {
  // The default: on the CPU, the row is rounded to int8 per 32-element block (d = max|x| / 127)
  // and multiplied with integer dot products (AVX-512 VNNI) by q8_0/q4_0/q4_1 matrices, the way
  // llama.cpp decodes (ops::GemmParams::int8_activations). About 3x the decode speed of kF32 on
  // SmolLM2; logits differ from kF32 by the 8-bit rounding of every matrix input (about 1/254 of
  // a block's largest value per element). Other weight dtypes, hosts without VNNI and other
  // devices compute as kF32.
  kInt8,
  kF32,  // f32 activations throughout: the reference arithmetic, as prefill computes
};

// "int8" / "f32".
TANDEM_API const char* decode_arithmetic_name(DecodeArithmetic a);

struct ForwardOptions {
  bool last_only = false;                             // logits only for the last token: [1, vocab]
  DecodeArithmetic decode = DecodeArithmetic::kInt8;  // see DecodeArithmetic
};

// One sequence's part of a batched forward: its tokens, their positions and its own cache.
struct SequenceChunk {
  std::span<const int32_t> tokens;
  std::span<const int32_t> positions;
  KvCache* cache = nullptr;
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
  const Tensor& output_norm_bias() const { return output_norm_b_; }  // gpt2
  const Tensor& position_embd() const { return position_embd_; }     // gpt2 [ctx, d]
  bool output_tied() const { return output_tied_; }
  // RoPE rotation frequency of each pair (radians per position, after scaling and rope_freqs)
  // and the cos/sin magnitude (YaRN); empty / 1 for gpt2.
  const std::vector<double>& rope_frequencies() const { return rope_freqs_; }
  double rope_magnitude() const { return rope_mscale_; }
  // Bytes of all weights (as stored).
  int64_t weight_bytes() const;

  // Where the weights live and forward() computes (the CPU for a loaded model).
  Device device() const { return device_; }
  // A copy of this model with every weight copied to `device` (e.g. Device::cuda(0)), in its
  // stored dtype; the GGUF file stays shared. Its caches (make_cache) live on that device too.
  // NotFound / Unsupported when the device does not exist.
  Model to(Device device) const;

  // An empty cache shaped for this model, on the model's device; kv_dtype kF16 halves its bytes.
  KvCache make_cache(std::shared_ptr<KvPolicy> policy = nullptr, int block_tokens = 32,
                     DType kv_dtype = DType::kF32) const;

  // Runs T tokens at the given positions (each larger than every position already in the cache
  // for causal use), appending their K/V to `cache`. Returns f32 logits [T, vocab] (or [1, vocab]
  // with last_only), on the CPU whatever the model's device. InvalidArgument for bad ids,
  // mismatched lengths or a cache of another shape or device.
  Tensor forward(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                 KvCache& cache, const ForwardOptions& options = {}) const;

  // Runs several sequences in one pass: rows of all chunks are stacked for the norms and weight
  // GEMMs; each chunk appends to and attends over its own cache. Returns one logits tensor per
  // chunk ([T_i, vocab], or [1, vocab] with last_only), equal to what forward() gives for that
  // chunk alone up to float rounding; except that a one-token chunk alone decodes with
  // options.decode while the stacked rows of several compute in f32 (equal with kF32). Chunks may
  // differ in length and position; each needs a distinct cache. InvalidArgument as forward()
  // (naming the chunk), or for a repeated cache.
  std::vector<Tensor> forward_batch(std::span<const SequenceChunk> chunks,
                                    const ForwardOptions& options = {}) const;

  // Layer-range forward (pipeline stages, HPipe): runs decoder layers [first_layer, last_layer) on
  // one slice of a sequence. `input` is I32 token ids [T] when options.embed (the embedding runs
  // first), else F32 hidden states [T, d_model] from the previous stage. Returns F32 logits
  // [T, vocab] ([1, vocab] with last_only) when options.head (final norm + output projection run
  // last), else the hidden states [T, d_model]; always on the CPU. `cache` is shaped for the whole
  // model; only layers [first_layer, last_layer) are appended to. Chaining ranges that cover
  // [0, n_layers) over the same slices gives forward()'s logits up to float rounding
  // (model_layers.cpp). llama models with plain RoPE only (Unsupported otherwise); InvalidArgument
  // for bad ranges, shapes, ids or positions.
  struct LayerRangeOptions {
    bool embed = false;      // input is token ids; run the embedding first
    bool head = false;       // run the final norm and the output projection after the layers
    bool last_only = false;  // with head: logits of the last row only
    DecodeArithmetic decode = DecodeArithmetic::kInt8;  // a one-row slice: as ForwardOptions
  };
  Tensor forward_layers(const Tensor& input, std::span<const int32_t> positions, KvCache& cache,
                        int first_layer, int last_layer, const LayerRangeOptions& options) const;

 private:
  // Decoder layers [first, last) of a plain-RoPE llama over x f32 [T, d_model] in place (x's
  // rows at `positions`, pos the same on the device): the loop forward() and forward_layers()
  // share (model_forward.cpp). Appends K/V to the cache and hands queries to its policy.
  void llama_layers(Tensor& x, const Tensor& pos, std::span<const int32_t> positions,
                    KvCache& cache, int first, int last, DecodeArithmetic decode) const;

  std::shared_ptr<const GgufFile> file_;
  ModelConfig config_;
  Tensor token_embd_, output_norm_, output_;
  Tensor output_norm_b_, position_embd_;  // gpt2
  bool output_tied_ = false;
  bool plain_rope_ = true;  // llama without scaling or rope_freqs: ops::rope suffices
  std::vector<double> rope_freqs_;
  double rope_mscale_ = 1.0;
  std::vector<LayerWeights> layers_;
  Device device_ = Device::cpu();
};

// RoPE pair frequencies for a config: theta^(-2i/rope_dim) / freq_factors[i], then linear or YaRN
// scaling as llama.cpp's ggml_rope_ext computes them; `freq_factors` is empty or rope_dim/2 long.
// The second function gives the magnitude YaRN applies to cos and sin (1 otherwise).
TANDEM_API std::vector<double> rope_pair_frequencies(const ModelConfig& config,
                                                     std::span<const float> freq_factors = {});
TANDEM_API double rope_pair_magnitude(const ModelConfig& config);

// Rotates the leading rotary_dim dims of every head of x f32 [T, H, D] (contiguous, in place) by
// positions[t] * freqs[i] for interleaved pair i, scaling cos/sin by `magnitude`.
TANDEM_API void rope_with_frequencies(Tensor& x, std::span<const int32_t> positions,
                                      std::span<const double> freqs, double magnitude);

// Attention of T queries over the cached keys of one layer: q f32 [T, n_heads, head_dim], query
// positions [T]; out f32 [T, n_heads, head_dim]. Query head h reads KV head h / (n_heads /
// n_kv_heads); a query at position p sees the cached slots whose position is <= p. Softmax is
// computed online per block (running max), parallel over (token, KV head) pairs with OpenMP (a GQA
// group's query heads share each K/V read). A query that sees no key gets zeros.
TANDEM_API void cache_attention(const Tensor& q, std::span<const int32_t> positions,
                                const KvCache& cache, int layer, Tensor& out, float scale = 0.0f);

}  // namespace tandem::llm
