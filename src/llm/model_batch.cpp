// SPDX-License-Identifier: Apache-2.0
// Model::forward_batch: several sequences through the decoder stack at once (see model.h). The
// rows of every chunk are stacked into one [N, d] activation, so each norm and weight GEMM runs
// once for the whole batch (a quantized weight is dequantized once per GEMM tile, not once per
// sequence); RoPE takes per-row positions; only the cache append and the attention go chunk by
// chunk, each over its own KvCache. Both architectures (llama with any RoPE scaling, gpt2) run
// here; Model::forward of a gpt2 or scaled-RoPE llama model is a batch of one.
#include <algorithm>
#include <cstring>
#include <exception>
#include <set>

#include "llm/decode_gemm.h"
#include "llm/kv_policies/observe.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/llm/model.h"
#include "tandem/ops/ops.h"

namespace tandem::llm {
namespace {

// Row offset of every chunk in the stacked activations (offsets.back() = total rows).
std::vector<int64_t> row_offsets(std::span<const SequenceChunk> chunks) {
  std::vector<int64_t> off(chunks.size() + 1, 0);
  for (size_t i = 0; i < chunks.size(); ++i) {
    off[i + 1] = off[i] + static_cast<int64_t>(chunks[i].tokens.size());
  }
  return off;
}

// Appends every chunk's K/V rows to its cache, then runs its attention. Attention of chunks that
// are single decode tokens is spread over threads (one chunk each); longer chunks are parallel
// inside cache_attention.
void attend(std::span<const SequenceChunk> chunks, const std::vector<int64_t>& off, int layer,
            Tensor& q3, Tensor& k3, Tensor& v3, Tensor& a3) {
  const int64_t n = static_cast<int64_t>(chunks.size());
  for (int64_t i = 0; i < n; ++i) {
    chunks[i].cache->append(layer, k3.slice(0, off[i], off[i + 1]), v3.slice(0, off[i], off[i + 1]),
                            chunks[i].positions);
  }
  const bool decode = off.back() == n && q3.device().is_cpu();  // host threads for CPU caches
  const int threads = static_cast<int>(std::min<int64_t>(n, cpu_num_threads()));
  std::exception_ptr error;
  auto attend_one = [&](int64_t i) {
    try {
      Tensor out = a3.slice(0, off[i], off[i + 1]);
      cache_attention(q3.slice(0, off[i], off[i + 1]), chunks[i].positions, *chunks[i].cache, layer,
                      out);
    } catch (...) {
#pragma omp critical(tandem_forward_batch_error)
      if (!error) error = std::current_exception();
    }
  };
  if (decode && threads > 1) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) attend_one(i);
  } else {
    // No parallel region at all here (not even an inactive one, `if(false)`): cache_attention's
    // own region must stay at the top level, where libgomp reuses its pooled threads. Nested
    // under an inactive region it started a new team per call (threads created per layer, and
    // the pooled ones spinning beside them): 9 instead of 92-107 tokens/s for one sequence at
    // -t 2 (SmolLM2 through tandem serve).
    for (int64_t i = 0; i < n; ++i) attend_one(i);
  }
  if (error) std::rethrow_exception(error);
  for (int64_t i = 0; i < n; ++i) {
    observe_policy_queries(*chunks[i].cache, layer, q3.slice(0, off[i], off[i + 1]),
                           chunks[i].positions);
  }
}

// Copies the Q, K and V column blocks of the fused qkv rows [N, q_dim + 2 kv_dim] apart (strided
// copies through the backend, so device rows stay on the device).
void split_qkv(const Tensor& qkv, Tensor& q, Tensor& k, Tensor& v) {
  const int64_t qd = q.size(1), kd = k.size(1);
  q.copy_from(qkv.slice(1, 0, qd));
  k.copy_from(qkv.slice(1, qd, qd + kd));
  v.copy_from(qkv.slice(1, qd + kd, qd + 2 * kd));
}

}  // namespace

std::vector<Tensor> Model::forward_batch(std::span<const SequenceChunk> chunks,
                                         const ForwardOptions& options) const {
  const ModelConfig& c = config_;
  const bool gpt2 = c.kind == ModelArch::kGpt2;
  if (chunks.empty()) throw InvalidArgument("Model::forward_batch: no chunks");
  std::set<const KvCache*> caches;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SequenceChunk& ch = chunks[i];
    if (ch.tokens.empty() || ch.positions.size() != ch.tokens.size() || ch.cache == nullptr) {
      throw InvalidArgument(cat("Model::forward_batch: chunk ", i, " has ", ch.tokens.size(),
                                " tokens, ", ch.positions.size(), " positions and ",
                                ch.cache ? "a" : "no",
                                " cache (need the same non-zero count "
                                "and a cache)"));
    }
    if (!caches.insert(ch.cache).second) {
      throw InvalidArgument(cat("Model::forward_batch: chunk ", i,
                                " uses the cache of an earlier chunk (one cache per sequence)"));
    }
    const KvCacheShape& cs = ch.cache->shape();
    if (cs.device != device_) {
      throw InvalidArgument(cat("Model::forward_batch: chunk ", i, ": cache on ",
                                cs.device.to_string(), ", model on ", device_.to_string()));
    }
    if (cs.n_layers != c.n_layers || cs.n_kv_heads != c.n_kv_heads || cs.head_dim != c.head_dim) {
      throw InvalidArgument(cat("Model::forward_batch: chunk ", i, ": cache shaped for ",
                                cs.n_layers, " layers, ", cs.n_kv_heads, " kv heads, head_dim ",
                                cs.head_dim, "; the model has ", c.n_layers, ", ", c.n_kv_heads,
                                ", ", c.head_dim));
    }
    for (size_t j = 0; j < ch.positions.size(); ++j) {
      const int32_t p = ch.positions[j];
      if (p < 0 || (gpt2 && p >= c.context_length)) {
        throw InvalidArgument(
            cat("Model::forward_batch: chunk ", i, ": position ", p, " at ", j,
                gpt2 ? cat(" is outside the learned positions [0, ", c.context_length, ")")
                     : std::string(" is negative")));
      }
    }
  }
  const std::vector<int64_t> off = row_offsets(chunks);
  const int64_t t = off.back();
  const int64_t d = c.d_model, hd = c.head_dim, q_dim = int64_t{c.n_heads} * hd,
                kv_dim = int64_t{c.n_kv_heads} * hd;
  std::vector<int32_t> all_ids, all_pos;
  all_ids.reserve(static_cast<size_t>(t));
  all_pos.reserve(static_cast<size_t>(t));
  for (const SequenceChunk& ch : chunks) {
    all_ids.insert(all_ids.end(), ch.tokens.begin(), ch.tokens.end());
    all_pos.insert(all_pos.end(), ch.positions.begin(), ch.positions.end());
  }
  const Device dev = device_;
  for (size_t i = 0; i < all_ids.size(); ++i) {  // a device embedding kernel cannot report them
    if (all_ids[i] < 0 || all_ids[i] >= c.vocab_size) {
      throw InvalidArgument(cat("Model::forward_batch: token id ", all_ids[i], " at row ", i,
                                " outside the vocabulary [0, ", c.vocab_size, ")"));
    }
  }
  Tensor ids = Tensor::from_vector(all_ids, {t}, DType::kI32).to(dev);
  Tensor pos = Tensor::from_vector(all_pos, {t}, DType::kI32).to(dev);
  Tensor x = Tensor::empty({t, d}, DType::kF32, dev);
  ops::embedding(token_embd_, ids, x);
  if (gpt2) {
    Tensor pe = Tensor::empty({t, d}, DType::kF32, dev);
    ops::embedding(position_embd_, pos, pe);
    ops::add(x, pe, x);
  }

  Tensor h = Tensor::empty({t, d}, DType::kF32, dev);
  Tensor q = Tensor::empty({t, q_dim}, DType::kF32, dev);
  Tensor k = Tensor::empty({t, kv_dim}, DType::kF32, dev);
  Tensor v = Tensor::empty({t, kv_dim}, DType::kF32, dev);
  Tensor attn = Tensor::empty({t, q_dim}, DType::kF32, dev);
  Tensor up = Tensor::empty({t, c.d_ff}, DType::kF32, dev);
  Tensor gate = gpt2 ? Tensor() : Tensor::empty({t, c.d_ff}, DType::kF32, dev);
  Tensor qkv = gpt2 ? Tensor::empty({t, q_dim + 2 * kv_dim}, DType::kF32, dev) : Tensor();
  Tensor q3 = q.reshape({t, int64_t{c.n_heads}, hd});
  Tensor k3 = k.reshape({t, int64_t{c.n_kv_heads}, hd});
  Tensor v3 = v.reshape({t, int64_t{c.n_kv_heads}, hd});
  Tensor attn3 = attn.reshape({t, int64_t{c.n_heads}, hd});
  Tensor qkv_out[] = {q, k, v}, gate_up_out[] = {gate, up};  // gemm_group's outputs
  // A decode step (one token per sequence) takes the decode arithmetic for every row, so a sequence
  // computes the same logits batched as alone; a step with a prefill chunk stays f32.
  const bool decode_step = t == static_cast<int64_t>(chunks.size());
  const ops::GemmParams tb = decode_gemm_params(options.decode, decode_step);
  const ops::GemmParams tb_acc = decode_gemm_params(options.decode, decode_step, 1.0f);
  const ops::NormParams rms{.eps = c.rms_eps};
  const ops::NormParams ln{.eps = c.layer_norm_eps};
  const ops::RopeParams rope{.theta = c.rope_theta, .rotary_dim = c.rope_dim, .neox = false};

  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = layers_[l];
    if (gpt2) {
      ops::layer_norm(x, w.attn_norm, w.attn_norm_b, h, ln);
      ops::gemm(h, w.wqkv, qkv, tb);
      ops::add(qkv, w.bqkv, qkv);
      split_qkv(qkv, q, k, v);
    } else {
      ops::rms_norm(x, w.attn_norm, h, rms);
      const Tensor qkv_w[] = {w.wq, w.wk, w.wv};
      ops::gemm_group(h, qkv_w, qkv_out, tb);
      if (plain_rope_) {
        ops::rope(q3, pos, q3, rope);
        ops::rope(k3, pos, k3, rope);
      } else {
        for (Tensor* r : {&q3, &k3}) {  // a host kernel: device rows take a round trip
          Tensor host = dev.is_cpu() ? *r : r->to(Device::cpu());
          rope_with_frequencies(host, all_pos, rope_freqs_, rope_mscale_);
          if (!dev.is_cpu()) r->copy_from(host);
        }
      }
    }
    attend(chunks, off, l, q3, k3, v3, attn3);
    ops::gemm(attn, w.wo, x, tb_acc);
    if (gpt2) {
      ops::add(x, w.bo, x);
      ops::layer_norm(x, w.ffn_norm, w.ffn_norm_b, h, ln);
      ops::gemm(h, w.w_up, up, tb);
      ops::add(up, w.b_up, up);
      ops::gelu(up, up);
      ops::gemm(up, w.w_down, x, tb_acc);
      ops::add(x, w.b_down, x);
    } else {
      ops::rms_norm(x, w.ffn_norm, h, rms);
      const Tensor gate_up_w[] = {w.w_gate, w.w_up};
      ops::gemm_group(h, gate_up_w, gate_up_out, tb);
      ops::silu(gate, gate);
      ops::mul(gate, up, gate);
      ops::gemm(gate, w.w_down, x, tb_acc);
    }
  }

  // The rows that need logits: every row, or the last row of each chunk.
  const int64_t n = static_cast<int64_t>(chunks.size());
  Tensor last = x;
  if (options.last_only) {
    last = Tensor::empty({n, d}, DType::kF32, dev);
    for (int64_t i = 0; i < n; ++i) {
      last.slice(0, i, i + 1).copy_from(x.slice(0, off[i + 1] - 1, off[i + 1]));
    }
  }
  const int64_t rows = last.size(0);
  Tensor normed = Tensor::empty({rows, d}, DType::kF32, dev);
  if (gpt2) {
    ops::layer_norm(last, output_norm_, output_norm_b_, normed, ln);
  } else {
    ops::rms_norm(last, output_norm_, normed, rms);
  }
  Tensor logits = Tensor::empty({rows, c.vocab_size}, DType::kF32, dev);
  ops::gemm(normed, output_, logits, tb);
  if (!dev.is_cpu()) logits = logits.to(Device::cpu());
  std::vector<Tensor> out;
  out.reserve(chunks.size());
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(options.last_only ? logits.slice(0, i, i + 1)
                                    : logits.slice(0, off[i], off[i + 1]));
  }
  return out;
}

}  // namespace tandem::llm
