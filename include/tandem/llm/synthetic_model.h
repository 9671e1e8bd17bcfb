// SPDX-License-Identifier: Apache-2.0
// Synthetic LLaMA models: GGUF files with the layer shapes of a real model (LLaMA-2-7B, Mistral-7B,
// TinyLlama-1.1B, SmolLM2-135M) but few layers and generated weights, so speed per layer can be
// measured at 7B shapes on a machine that cannot hold (or fetch) 7B weights. The weights are
// uniform noise scaled by 1/sqrt(fan-in), quantized to the chosen GGUF type; the text they produce
// is meaningless, the memory traffic and arithmetic are those of the real layer. A vocabulary of
// placeholder pieces (with byte fallback) makes the files loadable by tokenizers, tandem's and
// llama.cpp's alike, so both can run the same file.
//
//   auto cfg = tandem::llm::synthetic_preset("llama7b");   // d 4096, ff 11008, 32 heads, vocab
//   32000 cfg.n_layers = 2; tandem::llm::write_synthetic_llama(cfg, "llama7b-2l.gguf"); auto model
//   = tandem::llm::Model::load("llama7b-2l.gguf");
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/core/dtype.h"
#include "tandem/core/tensor.h"
#include "tandem/export.h"

namespace tandem::llm {

struct SyntheticLlamaConfig {
  std::string name = "synthetic";
  int n_layers = 2;
  int d_model = 4096;
  int d_ff = 11008;
  int n_heads = 32;
  int n_kv_heads = 32;
  int64_t vocab_size = 32000;
  int64_t context_length = 4096;
  float rope_theta = 10000.0f;
  DType weight_dtype = DType::kQ4_1;  // projections; token_embd and output use it too (Q4_K and
                                      // Q6_K: random_kquant blocks, there is no quantizer)
  uint64_t seed = 1;
};

// The presets by name: "llama7b", "mistral7b", "tinyllama", "smollm2-135m" (layer count of the
// real model; set n_layers to what fits). NotFound listing the names for anything else.
TANDEM_API SyntheticLlamaConfig synthetic_preset(const std::string& name);
TANDEM_API std::vector<std::string> synthetic_preset_names();

// Random GGUF K-quant weights [rows, cols] (Q4_K or Q6_K, cols a multiple of 256): random codes
// and sub-block scales, each super-block's d (and Q4_K's dmin) set so that values lie within
// about 2 x `scale` around 0. Deterministic for a seed. For benchmarks and tests of the K-quant
// kernels and for synthetic models: tandem has no K-quant quantizer. InvalidArgument for another
// dtype or shape.
TANDEM_API Tensor random_kquant(const Shape& shape, DType dtype, float scale, uint64_t seed);

// Writes the model (IoError when the file cannot be written; InvalidArgument for shapes the
// architecture does not allow, such as heads that do not divide d_model or a block-quantized type
// with a row length not a multiple of 32).
TANDEM_API void write_synthetic_llama(const SyntheticLlamaConfig& config, const std::string& path);

}  // namespace tandem::llm
