// SPDX-License-Identifier: Apache-2.0
// Model::forward_layers: a contiguous range of decoder layers over one slice of a sequence, the
// unit a pipeline stage runs (HPipe, src/llm/hpipe). The layers run through the loop
// Model::forward runs (Model::llama_layers in model_forward.cpp), so a chain of ranges over the
// same slices reproduces the single-device logits up to float rounding (GEMM blocking may differ
// with the row count).
#include <string>
#include <vector>

#include "llm/decode_gemm.h"
#include "tandem/core/error.h"
#include "tandem/llm/model.h"
#include "tandem/ops/ops.h"

namespace tandem::llm {

Tensor Model::forward_layers(const Tensor& input, std::span<const int32_t> positions,
                             KvCache& cache, int first_layer, int last_layer,
                             const LayerRangeOptions& options) const {
  const ModelConfig& c = config_;
  if (c.kind != ModelArch::kLlama || !plain_rope_) {
    throw Unsupported(cat("Model::forward_layers: '", c.arch,
                          "' model with scaled RoPE or a non-llama architecture; layer ranges run "
                          "llama models with plain RoPE only"));
  }
  if (first_layer < 0 || last_layer > c.n_layers || first_layer > last_layer) {
    throw InvalidArgument(cat("Model::forward_layers: layer range [", first_layer, ", ", last_layer,
                              ") outside the model's ", c.n_layers, " layers"));
  }
  const int64_t t = static_cast<int64_t>(positions.size());
  const int64_t d = c.d_model;
  if (t == 0) throw InvalidArgument("Model::forward_layers: no positions (empty slice)");
  if (options.embed) {
    if (input.dtype() != DType::kI32 || input.rank() != 1 || input.size(0) != t) {
      throw InvalidArgument(
          cat("Model::forward_layers: with embed the input must be I32 token ids [", t, "], got ",
              dtype_name(input.dtype()), " ", input.shape().to_string()));
    }
  } else if (input.dtype() != DType::kF32 || input.rank() != 2 || input.size(0) != t ||
             input.size(1) != d) {
    throw InvalidArgument(cat("Model::forward_layers: the input must be F32 hidden states [", t,
                              ", ", d, "], got ", dtype_name(input.dtype()), " ",
                              input.shape().to_string()));
  }
  const KvCacheShape& cs = cache.shape();
  if (cs.n_layers != c.n_layers || cs.n_kv_heads != c.n_kv_heads || cs.head_dim != c.head_dim ||
      cs.device != device_) {
    throw InvalidArgument(cat("Model::forward_layers: cache shaped for ", cs.n_layers, " layers, ",
                              cs.n_kv_heads, " kv heads, head_dim ", cs.head_dim, " on ",
                              cs.device.to_string(), "; the model has ", c.n_layers, ", ",
                              c.n_kv_heads, ", ", c.head_dim, " on ", device_.to_string()));
  }
  for (int64_t i = 0; i < t; ++i) {
    if (positions[i] < 0) {
      throw InvalidArgument(
          cat("Model::forward_layers: negative position ", positions[i], " at ", i));
    }
  }
  const Device dev = device_;
  Tensor pos = Tensor::from_vector(std::vector<int32_t>(positions.begin(), positions.end()), {t},
                                   DType::kI32)
                   .to(dev);
  Tensor x;
  if (options.embed) {
    Tensor ids = input.contiguous();
    const int32_t* p = ids.data<int32_t>();
    for (int64_t i = 0; i < t; ++i) {
      if (p[i] < 0 || p[i] >= c.vocab_size) {
        throw InvalidArgument(cat("Model::forward_layers: token id ", p[i], " at ", i,
                                  " outside the vocabulary [0, ", c.vocab_size, ")"));
      }
    }
    x = Tensor::empty({t, d}, DType::kF32, dev);
    ops::embedding(token_embd_, ids.to(dev), x);
  } else {
    x = input.to(dev).clone();  // the layers update x in place; the caller's tensor stays intact
  }

  llama_layers(x, pos, positions, cache, first_layer, last_layer, options.decode);
  if (!options.head) return dev.is_cpu() ? x : x.to(Device::cpu());

  Tensor last = options.last_only ? x.slice(0, t - 1, t).contiguous() : x;
  const int64_t rows = last.size(0);
  Tensor normed = Tensor::empty({rows, d}, DType::kF32, dev);
  ops::rms_norm(last, output_norm_, normed, ops::NormParams{.eps = c.rms_eps});
  Tensor logits = Tensor::empty({rows, c.vocab_size}, DType::kF32, dev);
  ops::gemm(normed, output_, logits, decode_gemm_params(options.decode, t == 1));
  return dev.is_cpu() ? logits : logits.to(Device::cpu());
}

}  // namespace tandem::llm
