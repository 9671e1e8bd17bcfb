// SPDX-License-Identifier: Apache-2.0
// Model::forward: one chunk of tokens through the LLaMA decoder stack (see model.h). gpt2 models
// and llama models with scaled RoPE run through forward_batch (model_batch.cpp) as a batch of one.
#include <algorithm>

#include "llm/decode_gemm.h"
#include "llm/kv_policies/observe.h"
#include "tandem/core/error.h"
#include "tandem/llm/model.h"
#include "tandem/ops/ops.h"

namespace tandem::llm {

const char* decode_arithmetic_name(DecodeArithmetic a) {
  return a == DecodeArithmetic::kInt8 ? "int8" : "f32";
}

ops::GemmParams decode_gemm_params(DecodeArithmetic decode, bool decode_step, float beta) {
  return {.trans_b = true,
          .beta = beta,
          .int8_activations = decode == DecodeArithmetic::kInt8 && decode_step};
}

Tensor Model::forward(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                      KvCache& cache, const ForwardOptions& options) const {
  if (config_.kind != ModelArch::kLlama || !plain_rope_) {
    const SequenceChunk one{tokens, positions, &cache};
    return forward_batch(std::span(&one, 1), options).front();
  }
  const ModelConfig& c = config_;
  const int64_t t = static_cast<int64_t>(tokens.size());
  if (t == 0 || positions.size() != tokens.size()) {
    throw InvalidArgument(cat("Model::forward: ", tokens.size(), " tokens and ", positions.size(),
                              " positions (need the same non-zero count)"));
  }
  const KvCacheShape& cs = cache.shape();
  if (cs.n_layers != c.n_layers || cs.n_kv_heads != c.n_kv_heads || cs.head_dim != c.head_dim) {
    throw InvalidArgument(cat("Model::forward: cache shaped for ", cs.n_layers, " layers, ",
                              cs.n_kv_heads, " kv heads, head_dim ", cs.head_dim,
                              "; the model has ", c.n_layers, ", ", c.n_kv_heads, ", ",
                              c.head_dim));
  }
  for (int64_t i = 0; i < t; ++i) {
    if (positions[i] < 0) {
      throw InvalidArgument(cat("Model::forward: negative position ", positions[i], " at ", i));
    }
  }
  if (cs.device != device_) {
    throw InvalidArgument(cat("Model::forward: cache on ", cs.device.to_string(), ", model on ",
                              device_.to_string()));
  }
  const int64_t d = c.d_model;
  const Device dev = device_;
  for (int64_t i = 0; i < t; ++i) {  // checked here: a device embedding kernel cannot report them
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      throw InvalidArgument(cat("Model::forward: token id ", tokens[i], " at ", i,
                                " outside the vocabulary [0, ", c.vocab_size, ")"));
    }
  }
  Tensor ids =
      Tensor::from_vector(std::vector<int32_t>(tokens.begin(), tokens.end()), {t}, DType::kI32)
          .to(dev);
  Tensor pos = Tensor::from_vector(std::vector<int32_t>(positions.begin(), positions.end()), {t},
                                   DType::kI32)
                   .to(dev);
  Tensor x = Tensor::empty({t, d}, DType::kF32, dev);
  ops::embedding(token_embd_, ids, x);

  llama_layers(x, pos, positions, cache, 0, c.n_layers, options.decode);

  Tensor last = options.last_only ? x.slice(0, t - 1, t).contiguous() : x;
  const int64_t rows = last.size(0);
  Tensor normed = Tensor::empty({rows, d}, DType::kF32, dev);
  ops::rms_norm(last, output_norm_, normed, ops::NormParams{.eps = c.rms_eps});
  Tensor logits = Tensor::empty({rows, c.vocab_size}, DType::kF32, dev);
  ops::gemm(normed, output_, logits, decode_gemm_params(options.decode, t == 1));
  return dev.is_cpu() ? logits : logits.to(Device::cpu());
}

void Model::llama_layers(Tensor& x, const Tensor& pos, std::span<const int32_t> positions,
                         KvCache& cache, int first, int last, DecodeArithmetic decode) const {
  if (last <= first) return;
  const ModelConfig& c = config_;
  const Device dev = device_;
  const int64_t t = x.size(0), d = c.d_model, hd = c.head_dim, q_dim = int64_t{c.n_heads} * hd,
                kv_dim = int64_t{c.n_kv_heads} * hd;
  Tensor h = Tensor::empty({t, d}, DType::kF32, dev);
  Tensor q = Tensor::empty({t, q_dim}, DType::kF32, dev);
  Tensor k = Tensor::empty({t, kv_dim}, DType::kF32, dev);
  Tensor v = Tensor::empty({t, kv_dim}, DType::kF32, dev);
  Tensor attn = Tensor::empty({t, q_dim}, DType::kF32, dev);
  Tensor gate = Tensor::empty({t, c.d_ff}, DType::kF32, dev);
  Tensor up = Tensor::empty({t, c.d_ff}, DType::kF32, dev);
  Tensor q3 = q.reshape({t, int64_t{c.n_heads}, hd});
  Tensor k3 = k.reshape({t, int64_t{c.n_kv_heads}, hd});
  Tensor v3 = v.reshape({t, int64_t{c.n_kv_heads}, hd});
  Tensor attn3 = attn.reshape({t, int64_t{c.n_heads}, hd});
  Tensor qkv_out[] = {q, k, v}, gate_up_out[] = {gate, up};  // gemm_group's outputs
  const ops::GemmParams tb = decode_gemm_params(decode, t == 1);
  const ops::GemmParams tb_acc = decode_gemm_params(decode, t == 1, 1.0f);  // x += a W^T
  const ops::NormParams norm{.eps = c.rms_eps};
  const ops::RopeParams rope{.theta = c.rope_theta, .rotary_dim = c.rope_dim, .neox = false};

  for (int l = first; l < last; ++l) {
    const LayerWeights& w = layers_[l];
    ops::rms_norm(x, w.attn_norm, h, norm);
    const Tensor qkv_w[] = {w.wq, w.wk, w.wv};
    ops::gemm_group(h, qkv_w, qkv_out, tb);
    ops::rope(q3, pos, q3, rope);
    ops::rope(k3, pos, k3, rope);
    cache.append(l, k3, v3, positions);
    cache_attention(q3, positions, cache, l, attn3);
    observe_policy_queries(cache, l, q3, positions);
    ops::gemm(attn, w.wo, x, tb_acc);
    ops::rms_norm(x, w.ffn_norm, h, norm);
    const Tensor gate_up_w[] = {w.w_gate, w.w_up};
    ops::gemm_group(h, gate_up_w, gate_up_out, tb);
    ops::silu(gate, gate);
    ops::mul(gate, up, gate);
    ops::gemm(gate, w.w_down, x, tb_acc);
  }
}

}  // namespace tandem::llm
