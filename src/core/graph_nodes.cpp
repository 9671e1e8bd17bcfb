// SPDX-License-Identifier: Apache-2.0
// Cost helpers of the graph IR: OpNodes with FLOPs and bytes filled from op shapes, and the op keys
// that name them in profiled latency tables (graph.h documents the conventions).
#include <map>
#include <string_view>

#include "tandem/core/error.h"
#include "tandem/core/graph.h"
#include "tandem/ops/ops.h"

namespace tandem {
namespace {

constexpr double kF32Bytes = 4.0;

void need_positive(const char* op, const std::string& name, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims)
    if (d <= 0) throw InvalidArgument(cat(op, " node '", name, "': dimensions must be positive"));
}

double f32_bytes(int64_t numel) { return kF32Bytes * static_cast<double>(numel); }

double dims_product(std::initializer_list<int64_t> dims) {
  double p = 1;
  for (int64_t d : dims) p *= static_cast<double>(d);
  return p;
}

OpNode base_node(const std::string& name, const std::string& kind, std::vector<int> inputs) {
  OpNode n;
  n.name = name;
  n.kind = kind;
  n.inputs = std::move(inputs);
  return n;
}

void set_conv_attrs(OpNode& n, const Shape& x, const ops::Conv2dParams& p) {
  n.attrs["n"] = x[0];
  n.attrs["c"] = x[1];
  n.attrs["h"] = x[2];
  n.attrs["w"] = x[3];
  n.attrs["stride_h"] = p.stride_h;
  n.attrs["stride_w"] = p.stride_w;
  n.attrs["pad_top"] = p.pad_top;
  n.attrs["pad_left"] = p.pad_left;
  n.attrs["pad_bottom"] = p.pad_bottom;
  n.attrs["pad_right"] = p.pad_right;
  n.attrs["dilation_h"] = p.dilation_h;
  n.attrs["dilation_w"] = p.dilation_w;
}

double unary_flops_per_element(const std::string& kind) {
  if (kind == "silu") return 4;
  if (kind == "gelu") return 9;
  if (kind == "gelu_erf") return 5;
  if (kind == "relu" || kind == "exp") return 1;
  return -1;
}

}  // namespace

OpNode make_input_node(const std::string& name, const Shape& shape, DType dtype,
                       std::vector<int> inputs) {
  OpNode n = base_node(name, "input", std::move(inputs));
  n.output_shapes = {shape};
  n.dtype = dtype;
  return n;
}

OpNode make_gemm_node(const std::string& name, int64_t m, int64_t n, int64_t k,
                      std::vector<int> inputs, DType weight, bool b_is_param) {
  need_positive("gemm", name, {m, n, k});
  OpNode node = base_node(name, "gemm", std::move(inputs));
  node.output_shapes = {Shape{m, n}};
  node.flops = 2.0 * dims_product({m, n, k});
  const double b_bytes = static_cast<double>(dtype_row_bytes(weight, k)) * static_cast<double>(n);
  node.bytes_read = f32_bytes(m * k) + b_bytes;
  node.bytes_written = f32_bytes(m * n);
  node.param_bytes = b_is_param ? b_bytes : 0.0;
  node.attrs["m"] = m;
  node.attrs["n"] = n;
  node.attrs["k"] = k;
  node.attrs["weight"] = std::string(dtype_name(weight));
  return node;
}

OpNode make_batched_gemm_node(const std::string& name, int64_t batch, int64_t m, int64_t n,
                              int64_t k, std::vector<int> inputs) {
  need_positive("batched_gemm", name, {batch, m, n, k});
  OpNode node = base_node(name, "batched_gemm", std::move(inputs));
  node.output_shapes = {Shape{batch, m, n}};
  node.flops = 2.0 * dims_product({batch, m, n, k});
  node.bytes_read = kF32Bytes * (dims_product({batch, m, k}) + dims_product({batch, k, n}));
  node.bytes_written = kF32Bytes * dims_product({batch, m, n});
  node.attrs["batch"] = batch;
  node.attrs["m"] = m;
  node.attrs["n"] = n;
  node.attrs["k"] = k;
  return node;
}

OpNode make_conv2d_node(const std::string& name, const Shape& x, const Shape& w,
                        const ops::Conv2dParams& p, bool bias, std::vector<int> inputs) {
  Shape y;
  try {
    y = ops::conv2d_output_shape(x, w, p);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(cat("conv2d node '", name, "': ", e.what()));
  }
  OpNode node = base_node(name, "conv2d", std::move(inputs));
  node.output_shapes = {y};
  const double out = static_cast<double>(y.numel());
  node.flops = 2.0 * out * dims_product({w[1], w[2], w[3]}) + (bias ? out : 0.0);
  const double params = f32_bytes(w.numel()) + (bias ? f32_bytes(w[0]) : 0.0);
  node.bytes_read = f32_bytes(x.numel()) + params;
  node.bytes_written = f32_bytes(y.numel());
  node.param_bytes = params;
  set_conv_attrs(node, x, p);
  node.attrs["cout"] = w[0];
  node.attrs["kh"] = w[2];
  node.attrs["kw"] = w[3];
  node.attrs["groups"] = p.groups;
  node.attrs["bias"] = bias;
  return node;
}

OpNode make_attention_node(const std::string& name, const AttentionDims& d,
                           std::vector<int> inputs) {
  const int64_t dv = d.v_head_dim > 0 ? d.v_head_dim : d.head_dim;
  need_positive("attention", name, {d.tq, d.tk, d.hq, d.hkv, d.head_dim, dv});
  if (d.hq % d.hkv != 0)
    throw InvalidArgument(
        cat("attention node '", name, "': hq ", d.hq, " is not a multiple of hkv ", d.hkv));
  if (d.causal && d.tq > d.tk)
    throw InvalidArgument(
        cat("attention node '", name, "': causal with tq ", d.tq, " > tk ", d.tk));
  const double tq = static_cast<double>(d.tq), tk = static_cast<double>(d.tk);
  const double pairs_per_head = d.causal ? tq * (tk - tq) + tq * (tq + 1) / 2 : tq * tk;
  const double pairs = static_cast<double>(d.hq) * pairs_per_head;
  OpNode node = base_node(name, "attention", std::move(inputs));
  node.output_shapes = {Shape{d.tq, d.hq, dv}};
  node.flops =
      pairs * (2.0 * static_cast<double>(d.head_dim) + 2.0 * static_cast<double>(dv) + 5.0);
  const double kv_rows = static_cast<double>(d.tk * d.hkv);
  node.bytes_read = f32_bytes(d.tq * d.hq * d.head_dim) +
                    kv_rows * static_cast<double>(dtype_row_bytes(d.kv_dtype, d.head_dim) +
                                                  dtype_row_bytes(d.kv_dtype, dv));
  node.bytes_written = f32_bytes(d.tq * d.hq * dv);
  node.attrs["tq"] = d.tq;
  node.attrs["tk"] = d.tk;
  node.attrs["hq"] = d.hq;
  node.attrs["hkv"] = d.hkv;
  node.attrs["d"] = d.head_dim;
  node.attrs["dv"] = dv;
  node.attrs["causal"] = d.causal;
  node.attrs["kv"] = std::string(dtype_name(d.kv_dtype));
  return node;
}

OpNode make_unary_node(const std::string& name, const std::string& kind, const Shape& shape,
                       std::vector<int> inputs) {
  const double per = unary_flops_per_element(kind);
  if (per < 0)
    throw InvalidArgument(cat("unary node '", name, "': unknown kind '", kind,
                              "' (silu, gelu, gelu_erf, relu, exp)"));
  OpNode node = base_node(name, kind, std::move(inputs));
  node.output_shapes = {shape};
  const int64_t numel = shape.numel();
  node.flops = per * static_cast<double>(numel);
  node.bytes_read = f32_bytes(numel);
  node.bytes_written = f32_bytes(numel);
  node.attrs["numel"] = numel;
  return node;
}

OpNode make_binary_node(const std::string& name, const std::string& kind, const Shape& a,
                        const Shape& b, std::vector<int> inputs) {
  if (kind != "add" && kind != "mul" && kind != "sub")
    throw InvalidArgument(
        cat("binary node '", name, "': unknown kind '", kind, "' (add, mul, sub)"));
  const int64_t na = a.numel(), nb = b.numel();
  if (nb == 0 || (na % nb) != 0)
    throw InvalidArgument(cat("binary node '", name, "': ", b.to_string(),
                              " does not broadcast over ", a.to_string()));
  OpNode node = base_node(name, kind, std::move(inputs));
  node.output_shapes = {a};
  node.flops = static_cast<double>(na);
  node.bytes_read = f32_bytes(na) + f32_bytes(nb);
  node.bytes_written = f32_bytes(na);
  node.attrs["numel"] = na;
  node.attrs["b_numel"] = nb;
  return node;
}

OpNode make_norm_node(const std::string& name, const std::string& kind, const Shape& shape,
                      std::vector<int> inputs) {
  if (kind != "rms_norm" && kind != "layer_norm")
    throw InvalidArgument(
        cat("norm node '", name, "': unknown kind '", kind, "' (rms_norm, layer_norm)"));
  if (shape.rank() < 1 || shape[-1] <= 0)
    throw InvalidArgument(cat("norm node '", name, "': bad shape ", shape.to_string()));
  const int64_t dim = shape[-1], numel = shape.numel(), rows = numel / dim;
  OpNode node = base_node(name, kind, std::move(inputs));
  node.output_shapes = {shape};
  const bool ln = kind == "layer_norm";
  node.flops = (ln ? 7.0 : 4.0) * static_cast<double>(numel);
  node.param_bytes = f32_bytes(dim) * (ln ? 2 : 1);
  node.bytes_read = f32_bytes(numel) + node.param_bytes;
  node.bytes_written = f32_bytes(numel);
  node.attrs["rows"] = rows;
  node.attrs["dim"] = dim;
  return node;
}

OpNode make_softmax_node(const std::string& name, const Shape& shape, std::vector<int> inputs) {
  if (shape.rank() < 1 || shape[-1] <= 0)
    throw InvalidArgument(cat("softmax node '", name, "': bad shape ", shape.to_string()));
  const int64_t cols = shape[-1], numel = shape.numel();
  OpNode node = base_node(name, "softmax", std::move(inputs));
  node.output_shapes = {shape};
  node.flops = 5.0 * static_cast<double>(numel);
  node.bytes_read = f32_bytes(numel);
  node.bytes_written = f32_bytes(numel);
  node.attrs["rows"] = numel / cols;
  node.attrs["cols"] = cols;
  return node;
}

OpNode make_pool2d_node(const std::string& name, const std::string& kind, const Shape& x,
                        int64_t kh, int64_t kw, const ops::Conv2dParams& p,
                        std::vector<int> inputs) {
  if (kind != "max_pool" && kind != "avg_pool")
    throw InvalidArgument(
        cat("pool node '", name, "': unknown kind '", kind, "' (max_pool, avg_pool)"));
  if (x.rank() != 4 || kh <= 0 || kw <= 0 || x[1] <= 0)
    throw InvalidArgument(cat("pool node '", name,
                              "': needs NCHW input and a positive window, got ", x.to_string(),
                              " window ", kh, "x", kw));
  ops::Conv2dParams q = p;
  q.groups = static_cast<int>(x[1]);
  Shape y;
  try {
    y = ops::conv2d_output_shape(x, Shape{x[1], 1, kh, kw}, q);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(cat("pool node '", name, "': ", e.what()));
  }
  OpNode node = base_node(name, kind, std::move(inputs));
  node.output_shapes = {y};
  const double out = static_cast<double>(y.numel());
  node.flops = out * dims_product({kh, kw}) + (kind == "avg_pool" ? out : 0.0);
  node.bytes_read = f32_bytes(x.numel());
  node.bytes_written = f32_bytes(y.numel());
  set_conv_attrs(node, x, p);
  node.attrs["kh"] = kh;
  node.attrs["kw"] = kw;
  return node;
}

OpNode make_embedding_node(const std::string& name, int64_t tokens, int64_t dim, int64_t rows,
                           DType table, std::vector<int> inputs) {
  need_positive("embedding", name, {tokens, dim, rows});
  OpNode node = base_node(name, "embedding", std::move(inputs));
  node.output_shapes = {Shape{tokens, dim}};
  const double row_bytes = static_cast<double>(dtype_row_bytes(table, dim));
  node.param_bytes = row_bytes * static_cast<double>(rows);
  // Only the gathered rows are read, but the whole table is resident model state.
  node.bytes_read = row_bytes * static_cast<double>(tokens) + 4.0 * static_cast<double>(tokens);
  node.bytes_written = f32_bytes(tokens * dim);
  node.attrs["tokens"] = tokens;
  node.attrs["dim"] = dim;
  node.attrs["rows"] = rows;
  node.attrs["table"] = std::string(dtype_name(table));
  return node;
}

// ---- op keys ----

std::string op_key(const OpNode& node) {
  std::string params;
  for (const auto& [k, v] : node.attrs) {
    std::string text;
    if (v.is_boolean()) {
      text = v.get<bool>() ? "1" : "0";
    } else if (v.is_number_integer()) {
      text = v.dump();
    } else if (v.is_string()) {
      text = v.get<std::string>();
    } else {
      continue;  // floats, arrays and objects do not name a measurement
    }
    params += cat(params.empty() ? "" : ",", k, "=", text);
  }
  return params.empty() ? node.kind : cat(node.kind, ":", params);
}

namespace {

// Parameters of a key, with typed accessors that name the key in errors.
class KeyParams {
 public:
  explicit KeyParams(const std::string& key) : key_(key) {
    const size_t colon = key.find(':');
    kind_ = key.substr(0, colon);
    if (colon == std::string::npos) return;
    std::string_view rest(key);
    rest.remove_prefix(colon + 1);
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      const size_t eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0)
        throw InvalidArgument(cat("op key '", key_, "': malformed parameter '", item, "'"));
      values_[std::string(item.substr(0, eq))] = std::string(item.substr(eq + 1));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  const std::string& kind() const { return kind_; }
  int64_t i(const char* name) const {
    const std::string& s = str(name);
    int64_t v = 0;
    size_t used = 0;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != s.size() || s.empty())
      throw InvalidArgument(
          cat("op key '", key_, "': parameter ", name, "='", s, "' is not an integer"));
    return v;
  }
  int i_or(const char* name, int def) const {
    return values_.count(name) ? static_cast<int>(i(name)) : def;
  }
  DType dtype(const char* name, DType def) const {
    if (!values_.count(name)) return def;
    try {
      return parse_dtype(str(name));
    } catch (const InvalidArgument&) {
      throw InvalidArgument(
          cat("op key '", key_, "': parameter ", name, "='", str(name), "' is not a dtype"));
    }
  }
  const std::string& str(const char* name) const {
    auto it = values_.find(name);
    if (it == values_.end())
      throw InvalidArgument(cat("op key '", key_, "': missing parameter ", name));
    return it->second;
  }

 private:
  std::string key_;
  std::string kind_;
  std::map<std::string, std::string> values_;
};

ops::Conv2dParams conv_params(const KeyParams& k) {
  ops::Conv2dParams p;
  p.stride_h = k.i_or("stride_h", 1);
  p.stride_w = k.i_or("stride_w", 1);
  p.pad_top = k.i_or("pad_top", 0);
  p.pad_left = k.i_or("pad_left", 0);
  p.pad_bottom = k.i_or("pad_bottom", 0);
  p.pad_right = k.i_or("pad_right", 0);
  p.dilation_h = k.i_or("dilation_h", 1);
  p.dilation_w = k.i_or("dilation_w", 1);
  p.groups = k.i_or("groups", 1);
  return p;
}

}  // namespace

OpNode node_from_op_key(const std::string& key) {
  const KeyParams k(key);
  const std::string& kind = k.kind();
  if (kind == "gemm")
    return make_gemm_node(key, k.i("m"), k.i("n"), k.i("k"), {}, k.dtype("weight", DType::kF32));
  if (kind == "batched_gemm")
    return make_batched_gemm_node(key, k.i("batch"), k.i("m"), k.i("n"), k.i("k"));
  if (kind == "conv2d") {
    const ops::Conv2dParams p = conv_params(k);
    const Shape x{k.i("n"), k.i("c"), k.i("h"), k.i("w")};
    const int64_t cin_per_group = p.groups > 0 ? k.i("c") / p.groups : 0;
    return make_conv2d_node(key, x, Shape{k.i("cout"), cin_per_group, k.i("kh"), k.i("kw")}, p,
                            k.i_or("bias", 1) != 0);
  }
  if (kind == "attention") {
    AttentionDims d;
    d.tq = k.i("tq");
    d.tk = k.i("tk");
    d.hq = k.i("hq");
    d.hkv = k.i("hkv");
    d.head_dim = k.i("d");
    d.v_head_dim = k.i_or("dv", 0);
    d.causal = k.i_or("causal", 1) != 0;
    d.kv_dtype = k.dtype("kv", DType::kF32);
    return make_attention_node(key, d);
  }
  if (unary_flops_per_element(kind) >= 0) return make_unary_node(key, kind, Shape{k.i("numel")});
  if (kind == "add" || kind == "mul" || kind == "sub")
    return make_binary_node(key, kind, Shape{k.i("numel")}, Shape{k.i("b_numel")});
  if (kind == "rms_norm" || kind == "layer_norm")
    return make_norm_node(key, kind, Shape{k.i("rows"), k.i("dim")});
  if (kind == "softmax") return make_softmax_node(key, Shape{k.i("rows"), k.i("cols")});
  if (kind == "max_pool" || kind == "avg_pool")
    return make_pool2d_node(key, kind, Shape{k.i("n"), k.i("c"), k.i("h"), k.i("w")}, k.i("kh"),
                            k.i("kw"), conv_params(k));
  if (kind == "embedding")
    return make_embedding_node(key, k.i("tokens"), k.i("dim"), k.i("rows"),
                               k.dtype("table", DType::kF32));
  throw InvalidArgument(cat("op key '", key, "': unknown op kind '", kind, "'"));
}

}  // namespace tandem
