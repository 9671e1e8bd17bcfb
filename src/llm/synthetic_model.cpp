// SPDX-License-Identifier: Apache-2.0
// Synthetic LLaMA GGUF files (see synthetic_model.h).
#include "tandem/llm/synthetic_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/tensor.h"
#include "tandem/llm/gguf.h"
#include "tandem/ops/ops.h"

namespace tandem::llm {
namespace {

// SplitMix64 per tensor: reproducible for a (seed, name) pair, fast enough for 10^9 values.
uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t name_hash(const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Uniform values in [offset - scale, offset + scale], converted to `dtype` (the K-quants, which
// have no quantizer here: random_kquant of that scale).
Tensor noise(const std::string& name, const Shape& shape, float scale, float offset, DType dtype,
             uint64_t seed) {
  if (dtype_is_k_quant(dtype)) return random_kquant(shape, dtype, scale, seed ^ name_hash(name));
  Tensor f = Tensor::empty(shape, DType::kF32);
  float* p = f.data<float>();
  uint64_t s = seed ^ name_hash(name);
  for (int64_t i = 0, n = f.numel(); i < n; ++i) {
    const double u = static_cast<double>(splitmix(s) >> 11) * 0x1.0p-53;  // [0, 1)
    p[i] = offset + scale * static_cast<float>(2.0 * u - 1.0);
  }
  if (dtype == DType::kF32) return f;
  Tensor q = Tensor::empty(shape, dtype);
  ops::convert(f, q);
  return q;
}

// A SentencePiece ("llama") vocabulary of n tokens, so that tokenizers (tandem's, llama.cpp's)
// accept the file: <unk>, <s>, </s>, the 256 byte-fallback tokens <0x00>..<0xFF>, then filler
// pieces "▁w<i>" with falling scores. Needs n >= 259; smaller vocabularies get none.
void add_vocabulary(GgufWriter& w, int64_t n) {
  constexpr int64_t kFixed = 3 + 256;
  if (n < kFixed) return;
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int64_t> types = {2, 3, 3};  // unknown, control, control
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    tokens.emplace_back(hex);
    types.push_back(6);  // byte
  }
  for (int64_t i = kFixed; i < n; ++i) {
    tokens.push_back("\xe2\x96\x81w" + std::to_string(i - kFixed));
    types.push_back(1);  // normal
  }
  std::vector<double> scores(static_cast<size_t>(n), 0.0);
  for (int64_t i = kFixed; i < n; ++i) scores[i] = -static_cast<double>(i - kFixed);
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_float_array("tokenizer.ggml.scores", scores);
  w.set_int_array("tokenizer.ggml.token_type", types);
  w.set_int("tokenizer.ggml.unknown_token_id", 0, GgufType::kU32);
  w.set_int("tokenizer.ggml.bos_token_id", 1, GgufType::kU32);
  w.set_int("tokenizer.ggml.eos_token_id", 2, GgufType::kU32);
}

}  // namespace

Tensor random_kquant(const Shape& shape, DType dtype, float scale, uint64_t seed) {
  if (!dtype_is_k_quant(dtype) || shape.rank() != 2 || shape[1] % 256 != 0)
    throw InvalidArgument(cat("random_kquant: ", dtype_name(dtype), " ", shape.to_string(),
                              " (Q4_K or Q6_K, rows a multiple of 256)"));
  Tensor t = Tensor::empty(shape, dtype);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  uint64_t s = seed;
  for (int64_t i = 0; i < t.nbytes(); i += 8) {
    const uint64_t r = splitmix(s);
    std::memcpy(p + i, &r, static_cast<size_t>(std::min<int64_t>(8, t.nbytes() - i)));
  }
  // Q4_K: value = d * sc * q - dmin * m, sc and m random 6-bit, q random 4-bit: d = scale / 472
  // keeps |value| within about 2 scale, and dmin = 7.5 d centres it. Q6_K: value = d * sc * (q -
  // 32), sc a random int8, q random 6-bit: d = scale / 2048.
  const int64_t bb = dtype_block_bytes(dtype);
  const uint16_t d = f32_to_f16(scale / (dtype == DType::kQ4_K ? 472.0f : 2048.0f));
  const uint16_t dmin = f32_to_f16(7.5f * scale / 472.0f);
  for (int64_t b = 0; b < t.nbytes() / bb; ++b) {
    uint8_t* blk = p + b * bb;
    if (dtype == DType::kQ4_K) {
      std::memcpy(blk, &d, 2);
      std::memcpy(blk + 2, &dmin, 2);
    } else {
      std::memcpy(blk + bb - 2, &d, 2);  // Q6_K: d is the block's last two bytes
    }
  }
  return t;
}

std::vector<std::string> synthetic_preset_names() {
  return {"llama7b", "mistral7b", "tinyllama", "smollm2-135m"};
}

SyntheticLlamaConfig synthetic_preset(const std::string& name) {
  SyntheticLlamaConfig c;
  c.name = name;
  if (name == "llama7b") {  // LLaMA-2-7B
    c.n_layers = 32, c.d_model = 4096, c.d_ff = 11008, c.n_heads = 32, c.n_kv_heads = 32;
    c.vocab_size = 32000, c.context_length = 4096;
  } else if (name == "mistral7b") {  // Mistral-7B-v0.1
    c.n_layers = 32, c.d_model = 4096, c.d_ff = 14336, c.n_heads = 32, c.n_kv_heads = 8;
    c.vocab_size = 32000, c.context_length = 32768, c.rope_theta = 1000000.0f;
  } else if (name == "tinyllama") {  // TinyLlama-1.1B
    c.n_layers = 22, c.d_model = 2048, c.d_ff = 5632, c.n_heads = 32, c.n_kv_heads = 4;
    c.vocab_size = 32000, c.context_length = 2048;
  } else if (name == "smollm2-135m") {
    c.n_layers = 30, c.d_model = 576, c.d_ff = 1536, c.n_heads = 9, c.n_kv_heads = 3;
    c.vocab_size = 49152, c.context_length = 8192, c.rope_theta = 100000.0f;
  } else {
    std::string known;
    for (const std::string& n : synthetic_preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw NotFound(cat("synthetic model preset '", name, "' (known: ", known, ")"));
  }
  return c;
}

void write_synthetic_llama(const SyntheticLlamaConfig& c, const std::string& path) {
  if (c.n_layers < 1 || c.d_model < 1 || c.d_ff < 1 || c.n_heads < 1 || c.n_kv_heads < 1 ||
      c.vocab_size < 1 || c.d_model % c.n_heads != 0 || c.n_heads % c.n_kv_heads != 0) {
    throw InvalidArgument(cat("synthetic llama: ", c.n_layers, " layers, d ", c.d_model, ", ff ",
                              c.d_ff, ", heads ", c.n_heads, "/", c.n_kv_heads, ", vocab ",
                              c.vocab_size, " (sizes must be positive, heads must divide d and ",
                              "kv heads must divide heads)"));
  }
  const int64_t block = dtype_block_size(c.weight_dtype);
  if (c.d_model % block != 0 || c.d_ff % block != 0) {
    throw InvalidArgument(cat("synthetic llama: ", dtype_name(c.weight_dtype),
                              " rows need a multiple of ", block, " elements; d ", c.d_model,
                              ", ff ", c.d_ff));
  }
  const int64_t d = c.d_model, ff = c.d_ff, hd = d / c.n_heads, kv = hd * c.n_kv_heads;
  const DType wt = c.weight_dtype;
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", c.name + " (synthetic weights)");
  w.set_int("llama.block_count", c.n_layers, GgufType::kU32);
  w.set_int("llama.embedding_length", d, GgufType::kU32);
  w.set_int("llama.feed_forward_length", ff, GgufType::kU32);
  w.set_int("llama.attention.head_count", c.n_heads, GgufType::kU32);
  w.set_int("llama.attention.head_count_kv", c.n_kv_heads, GgufType::kU32);
  w.set_int("llama.context_length", c.context_length, GgufType::kU32);
  w.set_int("llama.rope.dimension_count", hd, GgufType::kU32);
  w.set_float("llama.attention.layer_norm_rms_epsilon", 1e-5);
  w.set_float("llama.rope.freq_base", c.rope_theta);
  add_vocabulary(w, c.vocab_size);
  const auto fan_in = [](int64_t k) { return static_cast<float>(std::sqrt(3.0 / k)); };
  w.add_tensor("token_embd.weight", noise("token_embd", {c.vocab_size, d}, 1.0f, 0, wt, c.seed));
  w.add_tensor("output_norm.weight", noise("output_norm", {d}, 0.1f, 1.0f, DType::kF32, c.seed));
  w.add_tensor("output.weight", noise("output", {c.vocab_size, d}, fan_in(d), 0, wt, c.seed));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.add_tensor(p + "attn_norm.weight",
                 noise(p + "attn_norm", {d}, 0.1f, 1.0f, DType::kF32, c.seed));
    w.add_tensor(p + "attn_q.weight", noise(p + "attn_q", {d, d}, fan_in(d), 0, wt, c.seed));
    w.add_tensor(p + "attn_k.weight", noise(p + "attn_k", {kv, d}, fan_in(d), 0, wt, c.seed));
    w.add_tensor(p + "attn_v.weight", noise(p + "attn_v", {kv, d}, fan_in(d), 0, wt, c.seed));
    w.add_tensor(p + "attn_output.weight",
                 noise(p + "attn_output", {d, d}, fan_in(d), 0, wt, c.seed));
    w.add_tensor(p + "ffn_norm.weight",
                 noise(p + "ffn_norm", {d}, 0.1f, 1.0f, DType::kF32, c.seed));
    w.add_tensor(p + "ffn_gate.weight", noise(p + "ffn_gate", {ff, d}, fan_in(d), 0, wt, c.seed));
    w.add_tensor(p + "ffn_up.weight", noise(p + "ffn_up", {ff, d}, fan_in(d), 0, wt, c.seed));
    w.add_tensor(p + "ffn_down.weight", noise(p + "ffn_down", {d, ff}, fan_in(ff), 0, wt, c.seed));
  }
  w.write(path);
}

}  // namespace tandem::llm
