// SPDX-License-Identifier: Apache-2.0
// Model loading: ModelConfig from GGUF metadata (llama, gpt2) and the weights as zero-copy tensors;
// see model.h.
#include "tandem/llm/model.h"

#include <cmath>

#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"

namespace tandem::llm {
namespace {

int64_t require_int(const GgufFile& f, const std::string& key) {
  auto v = f.find_int(key);
  if (!v) throw NotFound(cat(f.path(), ": model metadata key '", key, "' is missing"));
  return *v;
}

int positive_int(const GgufFile& f, const std::string& key, int64_t v) {
  if (v <= 0 || v > (int64_t{1} << 30)) {
    throw ParseError(f.path(), -1, cat("metadata '", key, "' = ", v, " is out of range"));
  }
  return static_cast<int>(v);
}

// A float hyperparameter: finite and within [lo, hi] (an epsilon of inf or a RoPE base of 1e38
// would load and then compute garbage).
float float_in(const GgufFile& f, const std::string& key, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi)) {
    throw ParseError(f.path(), -1,
                     cat("metadata '", key, "' = ", v, " is outside [", lo, ", ", hi, "]"));
  }
  return static_cast<float>(v);
}

bool is_weight_dtype(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 ||
         t == DType::kQ4_0 || t == DType::kQ4_1 || dtype_is_k_quant(t);
}

Tensor weight(const GgufFile& f, const std::string& name, const Shape& shape, bool f32_only) {
  if (f.find_tensor(name) == nullptr) {
    throw NotFound(cat(f.path(), ": tensor '", name, "' is missing"));
  }
  Tensor t = f.tensor(name);
  if (t.shape() != shape) {
    throw ParseError(f.path(), -1,
                     cat("tensor '", name, "' has shape ", t.shape().to_string(), ", expected ",
                         shape.to_string()));
  }
  if (f32_only ? t.dtype() != DType::kF32 : !is_weight_dtype(t.dtype())) {
    throw Unsupported(cat(f.path(), ": tensor '", name, "' has dtype ", dtype_name(t.dtype()),
                          f32_only ? " (norm weights must be f32)" : " (not a weight dtype)"));
  }
  return t;
}

// {arch}.rope.scaling.* (llama): the scaling type, factor and YaRN parameters.
RopeScaling read_rope_scaling(const GgufFile& f, const std::string& a, int64_t context_length) {
  RopeScaling r;
  const std::string type = f.find_string(a + "rope.scaling.type").value_or("none");
  const auto factor = f.find_float(a + "rope.scaling.factor");
  const auto linear = f.find_float(a + "rope.scale_linear");  // the older key (a factor too)
  if (type == "none") {
    // llama.cpp: a scale_linear key alone implies linear scaling.
    if (!factor && linear && *linear != 1.0) r.type = RopeScalingType::kLinear;
  } else if (type == "linear") {
    r.type = RopeScalingType::kLinear;
  } else if (type == "yarn") {
    r.type = RopeScalingType::kYarn;
  } else {
    throw Unsupported(cat(f.path(), ": RoPE scaling '", type, "' (", a,
                          "rope.scaling.type) is not supported (supported: none, linear, yarn)"));
  }
  if (r.type == RopeScalingType::kNone) return r;
  r.factor = static_cast<float>(factor ? *factor : linear.value_or(1.0));
  if (r.factor == 0.0f) r.factor = 1.0f;  // llama.cpp reads 0 as "no scaling"
  r.orig_context = f.find_int(a + "rope.scaling.original_context_length").value_or(context_length);
  if (r.type == RopeScalingType::kYarn) {
    r.ext_factor = static_cast<float>(f.find_float(a + "rope.scaling.yarn_ext_factor").value_or(1));
    if (r.ext_factor < 0.0f) r.ext_factor = 1.0f;  // negative: "not set"
    r.beta_fast = static_cast<float>(f.find_float(a + "rope.scaling.yarn_beta_fast").value_or(32));
    r.beta_slow = static_cast<float>(f.find_float(a + "rope.scaling.yarn_beta_slow").value_or(1));
  }
  r.attn_factor =
      static_cast<float>(f.find_float(a + "rope.scaling.attn_factor").value_or(1.0) *
                         f.find_float(a + "rope.scaling.yarn_attn_factor").value_or(1.0));
  if (!(r.factor > 0.0f) || !std::isfinite(r.factor) || r.orig_context <= 0 ||
      !(r.attn_factor > 0.0f) || !std::isfinite(r.attn_factor) || !std::isfinite(r.ext_factor) ||
      !std::isfinite(r.beta_fast) || !std::isfinite(r.beta_slow) || !(r.beta_fast > 0.0f) ||
      !(r.beta_slow > 0.0f)) {
    throw ParseError(f.path(), -1,
                     cat("RoPE scaling: factor ", r.factor, ", original context ", r.orig_context,
                         ", attn_factor ", r.attn_factor, ", beta_fast ", r.beta_fast,
                         ", beta_slow ", r.beta_slow, " must be positive and finite"));
  }
  return r;
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  auto arch = f.find_string("general.architecture");
  if (!arch) throw NotFound(f.path() + ": metadata key 'general.architecture' is missing");
  c.arch = *arch;
  if (c.arch == "llama") {
    c.kind = ModelArch::kLlama;
  } else if (c.arch == "gpt2") {
    c.kind = ModelArch::kGpt2;
  } else {
    throw Unsupported(
        cat(f.path(), ": architecture '", c.arch, "' is not supported (supported: llama, gpt2)"));
  }
  c.name = f.find_string("general.name").value_or("");
  const std::string a = c.arch + ".";
  c.n_layers = positive_int(f, a + "block_count", require_int(f, a + "block_count"));
  c.d_model = positive_int(f, a + "embedding_length", require_int(f, a + "embedding_length"));
  c.d_ff = positive_int(f, a + "feed_forward_length", require_int(f, a + "feed_forward_length"));
  c.n_heads =
      positive_int(f, a + "attention.head_count", require_int(f, a + "attention.head_count"));
  c.n_kv_heads = positive_int(f, a + "attention.head_count_kv",
                              f.find_int(a + "attention.head_count_kv").value_or(c.n_heads));
  c.context_length = positive_int(f, a + "context_length", require_int(f, a + "context_length"));
  const std::string eps_key = c.kind == ModelArch::kLlama ? "attention.layer_norm_rms_epsilon"
                                                          : "attention.layer_norm_epsilon";
  auto eps = f.find_float(a + eps_key);
  if (!eps) {
    throw NotFound(cat(f.path(), ": model metadata key '", a, eps_key, "' is missing"));
  }
  (c.kind == ModelArch::kLlama ? c.rms_eps : c.layer_norm_eps) =
      float_in(f, a + eps_key, *eps, 1e-12, 1.0);
  c.rope_theta = float_in(f, a + "rope.freq_base",
                          f.find_float(a + "rope.freq_base").value_or(10000.0), 1.0, 1e10);
  if (c.d_model % c.n_heads != 0 || c.n_heads % c.n_kv_heads != 0) {
    throw ParseError(f.path(), -1,
                     cat("embedding_length ", c.d_model, ", head_count ", c.n_heads,
                         ", head_count_kv ", c.n_kv_heads, " do not divide evenly"));
  }
  c.head_dim = c.d_model / c.n_heads;
  if (c.kind == ModelArch::kLlama) {
    c.rope_dim = positive_int(f, a + "rope.dimension_count",
                              f.find_int(a + "rope.dimension_count").value_or(c.head_dim));
    if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
      throw ParseError(
          f.path(), -1,
          cat("rope.dimension_count ", c.rope_dim, " does not fit head_dim ", c.head_dim));
    }
    c.rope_scaling = read_rope_scaling(f, a, c.context_length);
  }
  if (!(c.rope_theta > 0.0f) || !(c.rms_eps > 0.0f) || !(c.layer_norm_eps > 0.0f)) {
    throw ParseError(
        f.path(), -1,
        cat("rope.freq_base ", c.rope_theta, " and norm epsilon ",
            c.kind == ModelArch::kLlama ? c.rms_eps : c.layer_norm_eps, " must be positive"));
  }
  // The embedding's rows are the model's vocabulary (some files pad it past the token list).
  if (const GgufTensorInfo* t = f.find_tensor("token_embd.weight");
      t != nullptr && t->shape.rank() == 2) {
    c.vocab_size = t->shape[0];
  } else if (f.has("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int64_t>(f.get_string_array("tokenizer.ggml.tokens").size());
  } else {
    throw NotFound(f.path() +
                   ": neither token_embd.weight nor tokenizer.ggml.tokens gives the "
                   "vocabulary size");
  }
  // The optional declared size must be an integer (get_int: ParseError for another type) that
  // agrees with the vocabulary found.
  if (const auto declared = f.find_int(a + "vocab_size"); declared && *declared != c.vocab_size) {
    throw ParseError(f.path(), -1,
                     cat("metadata '", a, "vocab_size' = ", *declared, " but the model has ",
                         c.vocab_size, " tokens"));
  }
  return c;
}

Model Model::load(const std::string& path) { return Model(std::make_shared<const GgufFile>(path)); }

Model::Model(std::shared_ptr<const GgufFile> file) : file_(std::move(file)) {
  TANDEM_CHECK(file_ != nullptr) << "Model: null GgufFile";
  const GgufFile& f = *file_;
  config_ = ModelConfig::from_gguf(f);
  const ModelConfig& c = config_;
  const int64_t d = c.d_model, q_dim = int64_t{c.n_heads} * c.head_dim,
                kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
  const bool gpt2 = c.kind == ModelArch::kGpt2;
  token_embd_ = weight(f, "token_embd.weight", {c.vocab_size, d}, false);
  output_norm_ = weight(f, "output_norm.weight", {d}, true);
  if (f.find_tensor("output.weight") != nullptr) {
    output_ = weight(f, "output.weight", {c.vocab_size, d}, false);
  } else {
    output_ = token_embd_;
    output_tied_ = true;
  }
  if (gpt2) {
    output_norm_b_ = weight(f, "output_norm.bias", {d}, true);
    position_embd_ = weight(f, "position_embd.weight", {c.context_length, d}, false);
  }
  layers_.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = cat("blk.", i, ".");
    LayerWeights& w = layers_[i];
    w.attn_norm = weight(f, p + "attn_norm.weight", {d}, true);
    w.wo = weight(f, p + "attn_output.weight", {d, q_dim}, false);
    w.ffn_norm = weight(f, p + "ffn_norm.weight", {d}, true);
    w.w_up = weight(f, p + "ffn_up.weight", {c.d_ff, d}, false);
    w.w_down = weight(f, p + "ffn_down.weight", {d, c.d_ff}, false);
    if (gpt2) {
      w.attn_norm_b = weight(f, p + "attn_norm.bias", {d}, true);
      w.wqkv = weight(f, p + "attn_qkv.weight", {q_dim + 2 * kv_dim, d}, false);
      w.bqkv = weight(f, p + "attn_qkv.bias", {q_dim + 2 * kv_dim}, true);
      w.bo = weight(f, p + "attn_output.bias", {d}, true);
      w.ffn_norm_b = weight(f, p + "ffn_norm.bias", {d}, true);
      w.b_up = weight(f, p + "ffn_up.bias", {c.d_ff}, true);
      w.b_down = weight(f, p + "ffn_down.bias", {d}, true);
    } else {
      w.wq = weight(f, p + "attn_q.weight", {q_dim, d}, false);
      w.wk = weight(f, p + "attn_k.weight", {kv_dim, d}, false);
      w.wv = weight(f, p + "attn_v.weight", {kv_dim, d}, false);
      w.w_gate = weight(f, p + "ffn_gate.weight", {c.d_ff, d}, false);
    }
  }
  if (!gpt2) {
    // llama3-style per-pair frequency divisors (llama.cpp's rope_freqs tensor).
    std::vector<float> factors;
    if (f.find_tensor("rope_freqs.weight") != nullptr) {
      factors = weight(f, "rope_freqs.weight", {c.rope_dim / 2}, true).to_float_vector();
      for (size_t i = 0; i < factors.size(); ++i) {
        if (!(factors[i] > 0.0f) || !std::isfinite(factors[i])) {
          throw ParseError(f.path(), -1,
                           cat("rope_freqs.weight[", i, "] = ", factors[i], " must be positive"));
        }
      }
    }
    rope_freqs_ = rope_pair_frequencies(c, factors);
    rope_mscale_ = rope_pair_magnitude(c);
    plain_rope_ = factors.empty() && c.rope_scaling.type == RopeScalingType::kNone;
  }
}

int64_t Model::weight_bytes() const {
  int64_t n = token_embd_.nbytes() + output_norm_.nbytes() + (output_tied_ ? 0 : output_.nbytes());
  for (const Tensor* t : {&output_norm_b_, &position_embd_}) {
    if (t->defined()) n += t->nbytes();
  }
  for (const LayerWeights& w : layers_) {
    for (const Tensor* t :
         {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.ffn_norm, &w.w_gate, &w.w_up, &w.w_down,
          &w.attn_norm_b, &w.ffn_norm_b, &w.wqkv, &w.bqkv, &w.bo, &w.b_up, &w.b_down}) {
      if (t->defined()) n += t->nbytes();
    }
  }
  return n;
}

KvCache Model::make_cache(std::shared_ptr<KvPolicy> policy, int block_tokens,
                          DType kv_dtype) const {
  KvCacheShape s;
  s.n_layers = config_.n_layers;
  s.n_kv_heads = config_.n_kv_heads;
  s.head_dim = config_.head_dim;
  s.block_tokens = block_tokens;
  s.device = device_;
  s.dtype = kv_dtype;
  return KvCache(s, std::move(policy));
}

}  // namespace tandem::llm
