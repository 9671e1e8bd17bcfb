// SPDX-License-Identifier: Apache-2.0
// ONNX ModelProto -> cnn::Graph (see tandem/cnn/onnx_import.h).
#include "tandem/cnn/onnx_import.h"

#include <onnx/onnx_pb.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include "cnn/onnx_tensor.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/core/log.h"

namespace tandem::cnn {

namespace {

namespace op = ::onnx;

// Opsets of the default domain this importer reads: a later one may change what an op means.
constexpr int kMaxOpset = 22;
// Before opset 7 some ops meant something else (Add and Mul broadcast only by attribute, Reshape
// took its shape as an attribute, Dropout trained by default, Gemm's C broadcast by attribute):
// below it only the ops whose opset-1 definition is the one implemented here are read (ONNX
// Runtime, too, still runs such models; the ONNX node tests of GlobalAveragePool are opset 1).
constexpr int kModernOpset = 7;
bool unchanged_since_opset1(const std::string& op_type) {
  static const std::set<std::string> ops = {
      "Constant", "Identity",  "Conv",    "MaxPool", "AveragePool", "GlobalAveragePool",
      "Relu",     "LeakyRelu", "Sigmoid", "Clip",    "Flatten",     "Softmax"};
  return ops.count(op_type) != 0;
}

// Bytes a run may use: the stated cap, else the host's memory, lowered by an address-space limit.
int64_t memory_cap(const ImportOptions& opts) {
  if (opts.max_memory_bytes > 0) return opts.max_memory_bytes;
  int64_t cap = BackendRegistry::global().get(Device::cpu()).device_info(0).memory_bytes;
  if (cap <= 0) cap = INT64_MAX;
  rlimit lim{};
  if (getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    cap = std::min<int64_t>(cap, static_cast<int64_t>(std::min<rlim_t>(lim.rlim_cur, INT64_MAX)));
  return cap;
}

// Refuses a graph that cannot run within memory_cap(): every plan holds the weights and, at each
// node, the node's inputs and outputs at once (f32 activations; a rank-4 one with its channels
// padded to 16, as the executor's blocked layout stores them). Checked before anything runs, so a
// tiny file declaring a huge batch fails here instead of in the allocator.
void check_fits_memory(const Graph& g, const ImportOptions& opts, const std::string& source) {
  const int64_t cap = memory_cap(opts), weights = g.weight_bytes();
  auto bytes = [&](int t) {
    const Shape& s = g.tensor(t).shape;
    if (s.rank() != 4) return s.numel() * int64_t{4};
    return s[0] * ((s[1] + 15) / 16 * 16) * s[2] * s[3] * int64_t{4};
  };
  for (const Node& n : g.nodes()) {
    int64_t live = weights;
    for (int t : n.inputs) live += bytes(t);
    for (int t : n.outputs) live += bytes(t);
    if (live <= cap) continue;
    const int out = n.outputs.empty() ? n.inputs.front() : n.outputs.front();
    throw Infeasible(cat(source, ": node '", n.name, "' needs ", live, " bytes (its output '",
                         g.tensor(out).name, "' ", g.tensor(out).shape.to_string(), " is ",
                         bytes(out), " bytes, weights ", weights, ") but at most ", cap,
                         " bytes are available"));
  }
}

// What an ONNX value name refers to while importing: a graph tensor (activation) or a constant.
struct Value {
  int tensor = -1;  // graph tensor id, or -1
  Tensor constant;  // decoded initializer / Constant node output
  DecodedType type = DecodedType::kFloat;
};

class Importer {
 public:
  Importer(std::string source, std::filesystem::path dir, const ImportOptions& opts)
      : source_(std::move(source)), dir_(std::move(dir)), opts_(opts) {}

  Graph run(const op::ModelProto& model) {
    if (!model.has_graph()) throw ParseError(source_, -1, "the model has no graph");
    opset_ = 0;
    for (const auto& o : model.opset_import())
      if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = static_cast<int>(o.version());
    if (opset_ == 0) opset_ = 13;
    if (opset_ < 1 || opset_ > kMaxOpset)
      throw Unsupported(cat(source_, ": opset ", opset_,
                            " of the default domain is outside the 1..", kMaxOpset,
                            " this importer reads"));
    const op::GraphProto& gp = model.graph();
    for (const auto& init : gp.initializer()) {
      Value v;
      v.constant = decode(init, &v.type);
      values_[init.name()] = std::move(v);
    }
    for (const auto& in : gp.input()) {
      if (values_.count(in.name())) continue;  // an initializer also listed as input
      add_graph_input(in);
    }
    if (g_.inputs().empty()) throw ParseError(source_, -1, "the graph has no (non-constant) input");
    for (int id : topo_order(gp)) convert(gp.node(id), id);
    std::set<std::string> output_names;
    for (const auto& out : gp.output()) {
      if (!output_names.insert(out.name()).second)
        throw ParseError(source_, -1, cat("graph output '", out.name(), "' is listed twice"));
      auto it = values_.find(out.name());
      if (it == values_.end() || it->second.tensor < 0)
        throw ParseError(source_, -1,
                         cat("graph output '", out.name(), "' is not produced by any node"));
      g_.add_output(it->second.tensor);
    }
    if (g_.outputs().empty()) throw ParseError(source_, -1, "the graph has no output");
    try {
      g_.infer_shapes();
    } catch (const InvalidArgument& e) {
      throw ParseError(source_, -1, e.what());
    }
    if (opts_.fuse) fuse_graph(g_);
    return std::move(g_);
  }

 private:
  Tensor decode(const op::TensorProto& t, DecodedType* type) {
    TensorSource src{source_, dir_};
    return decode_tensor(t, src, type);
  }

  void add_graph_input(const op::ValueInfoProto& in) {
    if (!in.type().has_tensor_type())
      throw ParseError(source_, -1, cat("graph input '", in.name(), "' is not a tensor"));
    const auto& tt = in.type().tensor_type();
    if (tt.elem_type() != op::TensorProto::FLOAT)
      throw Unsupported(cat(source_, ": graph input '", in.name(), "' has element type ",
                            tt.elem_type(), "; only float (1) inputs are supported"));
    std::vector<int64_t> dims;
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
      const auto& d = tt.shape().dim(i);
      int64_t v = d.has_dim_value() ? d.dim_value() : 0;
      if (v <= 0 && i == 0) v = opts_.batch;
      if (v <= 0)
        throw Unsupported(cat(source_, ": graph input '", in.name(), "' dimension ", i,
                              " is symbolic or non-positive; static shapes are required"));
      dims.push_back(v);
    }
    if (dims.empty() || dims.size() > 4)
      throw Unsupported(cat(source_, ": graph input '", in.name(), "' has rank ", dims.size(),
                            "; ranks 1-4 are supported"));
    const int t = g_.add_tensor(in.name(), Shape(dims));
    g_.add_input(t);
    values_[in.name()].tensor = t;
  }

  // Kahn's algorithm over value names; rejects dangling inputs and cycles.
  std::vector<int> topo_order(const op::GraphProto& gp) {
    const int n = gp.node_size();
    std::unordered_map<std::string, int> producer;
    for (int i = 0; i < n; ++i)
      for (const auto& o : gp.node(i).output())
        if (!o.empty()) {
          if (values_.count(o) || !producer.emplace(o, i).second)
            throw ParseError(
                source_, -1,
                cat("node '", node_name(gp.node(i), i), "': value '", o, "' is produced twice"));
        }
    std::vector<int> pending(n, 0);
    std::vector<std::vector<int>> users(n);
    for (int i = 0; i < n; ++i) {
      for (const auto& in : gp.node(i).input()) {
        if (in.empty() || values_.count(in)) continue;
        auto it = producer.find(in);
        if (it == producer.end())
          throw ParseError(
              source_, -1,
              cat("node '", node_name(gp.node(i), i), "' (", gp.node(i).op_type(), "): input '", in,
                  "' is not produced by any node, initializer or graph input"));
        ++pending[i];
        users[it->second].push_back(i);
      }
    }
    std::vector<int> order, ready;
    for (int i = n - 1; i >= 0; --i)
      if (pending[i] == 0) ready.push_back(i);
    while (!ready.empty()) {
      const int i = ready.back();
      ready.pop_back();
      order.push_back(i);
      for (int u : users[i])
        if (--pending[u] == 0) ready.push_back(u);
    }
    if (static_cast<int>(order.size()) != n) {
      for (int i = 0; i < n; ++i)
        if (pending[i] > 0)
          throw ParseError(source_, -1,
                           cat("node '", node_name(gp.node(i), i),
                               "' is part of a cycle (the graph is not a DAG)"));
    }
    return order;
  }

  static std::string node_name(const op::NodeProto& n, int index) {
    return n.name().empty() ? cat(n.op_type(), "#", index) : n.name();
  }

  // --- attributes -------------------------------------------------------------------------------
  const op::AttributeProto* attr(const op::NodeProto& n, const char* name) {
    for (const auto& a : n.attribute())
      if (a.name() == name) return &a;
    return nullptr;
  }
  int64_t attr_int(const op::NodeProto& n, const char* name, int64_t dflt) {
    const auto* a = attr(n, name);
    if (!a) return dflt;
    if (a->type() != op::AttributeProto::INT) bad(n, cat("attribute '", name, "' is not an int"));
    return a->i();
  }
  float attr_float(const op::NodeProto& n, const char* name, float dflt) {
    const auto* a = attr(n, name);
    if (!a) return dflt;
    if (a->type() != op::AttributeProto::FLOAT)
      bad(n, cat("attribute '", name, "' is not a float"));
    return a->f();
  }
  std::string attr_string(const op::NodeProto& n, const char* name, const std::string& dflt) {
    const auto* a = attr(n, name);
    if (!a) return dflt;
    if (a->type() != op::AttributeProto::STRING)
      bad(n, cat("attribute '", name, "' is not a string"));
    return a->s();
  }
  std::vector<int64_t> attr_ints(const op::NodeProto& n, const char* name) {
    const auto* a = attr(n, name);
    if (!a) return {};
    if (a->type() != op::AttributeProto::INTS)
      bad(n, cat("attribute '", name, "' is not a list of ints"));
    return {a->ints().begin(), a->ints().end()};
  }
  std::vector<float> attr_floats(const op::NodeProto& n, const char* name) {
    const auto* a = attr(n, name);
    if (!a) return {};
    if (a->type() != op::AttributeProto::FLOATS)
      bad(n, cat("attribute '", name, "' is not a list of floats"));
    return {a->floats().begin(), a->floats().end()};
  }

  [[noreturn]] void bad(const op::NodeProto& n, const std::string& what) {
    throw ParseError(source_, -1, cat("node '", cur_name_, "' (", n.op_type(), "): ", what));
  }
  [[noreturn]] void unsupported(const op::NodeProto& n, const std::string& what) {
    throw Unsupported(cat(source_, ": node '", cur_name_, "' (", n.op_type(), "): ", what));
  }

  // --- operands ---------------------------------------------------------------------------------
  const Value& value(const op::NodeProto& n, int i) {
    if (i >= n.input_size() || n.input(i).empty()) bad(n, cat("input ", i, " is missing"));
    auto it = values_.find(n.input(i));
    if (it == values_.end()) bad(n, cat("input '", n.input(i), "' is not defined"));
    return it->second;
  }
  bool has_input(const op::NodeProto& n, int i) {
    return i < n.input_size() && !n.input(i).empty();
  }
  int activation(const op::NodeProto& n, int i) {
    const Value& v = value(n, i);
    if (v.tensor < 0)
      unsupported(n, cat("input '", n.input(i), "' is a constant; an activation is expected"));
    return v.tensor;
  }
  Tensor constant(const op::NodeProto& n, int i) {
    const Value& v = value(n, i);
    if (v.tensor >= 0)
      unsupported(n, cat("input '", n.input(i),
                         "' is computed at run time; a constant (initializer) is expected"));
    return v.constant;
  }
  std::vector<int64_t> constant_ints(const op::NodeProto& n, int i) {
    const Value& v = value(n, i);
    if (v.tensor >= 0) unsupported(n, cat("input '", n.input(i), "' must be a constant"));
    if (v.type != DecodedType::kInt64)
      bad(n, cat("input '", n.input(i), "' must be an int64 tensor"));
    const int64_t* p = static_cast<const int64_t*>(v.constant.raw_data());
    return {p, p + v.constant.numel()};
  }
  std::vector<float> constant_floats(const op::NodeProto& n, int i) {
    const Tensor t = constant(n, i);
    if (value(n, i).type != DecodedType::kFloat)
      bad(n, cat("input '", n.input(i), "' must be a float tensor"));
    const float* p = t.data<float>();
    return {p, p + t.numel()};
  }

  int output(const op::NodeProto& n, int i) {
    if (i >= n.output_size() || n.output(i).empty()) bad(n, cat("output ", i, " is missing"));
    const int t = g_.add_tensor(n.output(i));
    values_[n.output(i)].tensor = t;
    return t;
  }

  // Window attributes of Conv and pools (2-D only).
  Window window(const op::NodeProto& n, const Tensor* weight) {
    Window w;
    std::vector<int64_t> k = attr_ints(n, "kernel_shape");
    if (k.empty() && weight) k = {weight->size(2), weight->size(3)};
    if (k.size() != 2) unsupported(n, "only 2-D kernels are supported");
    const auto s = attr_ints(n, "strides"), d = attr_ints(n, "dilations"), p = attr_ints(n, "pads");
    if (!s.empty() && s.size() != 2) bad(n, "strides must have 2 values");
    if (!d.empty() && d.size() != 2) bad(n, "dilations must have 2 values");
    if (!p.empty() && p.size() != 4) bad(n, "pads must have 4 values");
    auto small = [&](int64_t v, const char* what, int64_t lo) {
      if (v < lo || v > 4096) bad(n, cat(what, " value ", v, " is out of range"));
      return static_cast<int>(v);
    };
    w.kh = small(k[0], "kernel", 1);
    w.kw = small(k[1], "kernel", 1);
    if (!s.empty()) w.sh = small(s[0], "stride", 1), w.sw = small(s[1], "stride", 1);
    if (!d.empty()) w.dh = small(d[0], "dilation", 1), w.dw = small(d[1], "dilation", 1);
    if (!p.empty()) {
      w.pt = small(p[0], "pad", 0);
      w.pl = small(p[1], "pad", 0);
      w.pb = small(p[2], "pad", 0);
      w.pr = small(p[3], "pad", 0);
    }
    const std::string ap = attr_string(n, "auto_pad", "NOTSET");
    if (ap == "SAME_UPPER") {
      w.same_pad = 1;
    } else if (ap == "SAME_LOWER") {
      w.same_pad = 2;
    } else if (ap == "VALID") {
      w.pt = w.pl = w.pb = w.pr = 0;
    } else if (ap != "NOTSET") {
      bad(n, cat("auto_pad '", ap, "' is not valid"));
    }
    return w;
  }

  // A pool's padding must be smaller than its kernel (ONNX Runtime refuses it too): a window that
  // lies wholly in the padding has no input to take.
  void check_pool_pads(const op::NodeProto& n, const Window& w) {
    if (w.pt >= w.kh || w.pb >= w.kh || w.pl >= w.kw || w.pr >= w.kw)
      bad(n, cat("pads [", w.pt, ", ", w.pl, ", ", w.pb, ", ", w.pr,
                 "] must be smaller than the kernel ", w.kh, "x", w.kw));
  }

  // --- conversion -------------------------------------------------------------------------------
  void convert(const op::NodeProto& np, int index) {
    cur_name_ = node_name(np, index);
    const std::string& t = np.op_type();
    if (!np.domain().empty() && np.domain() != "ai.onnx")
      unsupported(np, cat("domain '", np.domain(), "' is not supported"));
    if (opset_ < kModernOpset && !unchanged_since_opset1(t))
      unsupported(np, cat("opset ", opset_, ": this op's definition before opset ", kModernOpset,
                          " is not supported"));
    Node n;
    n.name = cur_name_;
    if (t == "Constant") {
      const auto* a = attr(np, "value");
      if (!a || a->type() != op::AttributeProto::TENSOR)
        unsupported(np, "only the 'value' tensor form is supported");
      Value v;
      v.constant = decode(a->t(), &v.type);
      values_[np.output(0)] = std::move(v);
      return;
    }
    if (t == "Identity" || t == "Dropout") {
      if (np.output_size() > 1 && !np.output(1).empty()) unsupported(np, "mask output");
      values_[np.output(0)] = value(np, 0);
      return;
    }
    if (t == "Conv") {
      n.op = OpKind::kConv;
      n.inputs = {activation(np, 0)};
      n.weight = constant(np, 1);
      if (n.weight.rank() != 4) unsupported(np, "only 2-D convolution (rank-4 weight)");
      if (has_input(np, 2)) n.bias = constant(np, 2);
      n.window = window(np, &n.weight);
      const int64_t g = attr_int(np, "group", 1);
      if (g < 1 || g > (1 << 20)) bad(np, cat("group ", g, " is out of range"));
      n.groups = static_cast<int>(g);
    } else if (t == "MaxPool" || t == "AveragePool") {
      n.op = t == "MaxPool" ? OpKind::kMaxPool : OpKind::kAveragePool;
      if (np.output_size() > 1 && !np.output(1).empty()) unsupported(np, "the indices output");
      n.inputs = {activation(np, 0)};
      n.window = window(np, nullptr);
      n.window.ceil_mode = attr_int(np, "ceil_mode", 0) != 0;
      n.window.count_include_pad = attr_int(np, "count_include_pad", 0) != 0;
      check_pool_pads(np, n.window);
      if (attr_int(np, "storage_order", 0) != 0) unsupported(np, "storage_order 1");
    } else if (t == "GlobalAveragePool") {
      n.op = OpKind::kGlobalAveragePool;
      n.inputs = {activation(np, 0)};
    } else if (t == "Add" || t == "Mul") {
      n.op = t == "Add" ? OpKind::kAdd : OpKind::kMul;
      const Value& a = value(np, 0);
      const Value& b = value(np, 1);
      if (a.tensor >= 0 && b.tensor >= 0) {
        n.inputs = {a.tensor, b.tensor};
      } else if (a.tensor >= 0 || b.tensor >= 0) {
        n.inputs = {a.tensor >= 0 ? a.tensor : b.tensor};
        n.weight = a.tensor >= 0 ? b.constant : a.constant;
        if ((a.tensor >= 0 ? b.type : a.type) != DecodedType::kFloat)
          unsupported(np, "a non-float constant operand");
      } else {
        unsupported(np, "both operands are constants (constant folding is not supported)");
      }
    } else if (t == "Concat") {
      n.op = OpKind::kConcat;
      if (!attr(np, "axis")) bad(np, "attribute 'axis' is required");
      n.axis = static_cast<int>(attr_int(np, "axis", 1));
      for (int i = 0; i < np.input_size(); ++i) n.inputs.push_back(activation(np, i));
    } else if (t == "Resize" || t == "Upsample") {
      n.op = OpKind::kResize;
      n.inputs = {activation(np, 0)};
      const std::string mode = attr_string(np, "mode", "nearest");
      if (mode != "nearest") unsupported(np, cat("mode '", mode, "' (nearest only)"));
      std::vector<float> scales;
      std::vector<int64_t> sizes;
      if (t == "Upsample") {
        scales = has_input(np, 1) ? constant_floats(np, 1) : attr_floats(np, "scales");
      } else if (opset_ < 11) {
        scales = constant_floats(np, 1);
      } else {
        if (has_input(np, 2) && constant(np, 2).numel() > 0) scales = constant_floats(np, 2);
        if (has_input(np, 3)) sizes = constant_ints(np, 3);
        const std::string ct = attr_string(np, "coordinate_transformation_mode", "half_pixel");
        const std::string nm = attr_string(np, "nearest_mode", "round_prefer_floor");
        const bool half = ct == "half_pixel" || ct == "pytorch_half_pixel";
        const bool asym = ct == "asymmetric";
        if (!half && !asym) unsupported(np, cat("coordinate_transformation_mode '", ct, "'"));
        if (nm != "floor" && nm != "round_prefer_floor" && nm != "round_prefer_ceil")
          unsupported(np, cat("nearest_mode '", nm, "'"));
        resize_check_ = {asym, nm};
      }
      if (!sizes.empty()) {
        if (sizes.size() != 4) bad(np, "sizes must have 4 values (NCHW)");
        n.size_h = sizes[2];
        n.size_w = sizes[3];
      } else {
        if (scales.size() != 4) bad(np, "scales must have 4 values (NCHW)");
        if (scales[0] != 1.0f || scales[1] != 1.0f)
          unsupported(np, "scaling of the batch or channel axis");
        for (int i = 2; i < 4; ++i)
          if (!(scales[i] >= 1.0f && scales[i] <= 64.0f) || scales[i] != std::floor(scales[i]))
            unsupported(np, cat("scale ", scales[i], " (integer factors 1-64 only)"));
        n.scale_h = static_cast<int>(scales[2]);
        n.scale_w = static_cast<int>(scales[3]);
      }
      // Nearest with an integer factor u picks floor(x/u) under asymmetric+floor and under
      // half_pixel with either rounding; asymmetric with rounding agrees only for u <= 2.
      if (resize_check_.first && resize_check_.second != "floor" &&
          (n.scale_h > 2 || n.scale_w > 2 || n.size_h > 0))
        unsupported(np, "asymmetric coordinates with rounding for factors above 2");
      resize_check_ = {false, "floor"};
    } else if (t == "Flatten") {
      n.op = OpKind::kFlatten;
      n.inputs = {activation(np, 0)};
      n.axis = static_cast<int>(attr_int(np, "axis", 1));
    } else if (t == "Reshape") {
      n.op = OpKind::kReshape;
      n.inputs = {activation(np, 0)};
      const auto s = constant_ints(np, 1);
      if (s.empty() || s.size() > static_cast<size_t>(kMaxRank)) bad(np, "bad target shape rank");
      if (attr_int(np, "allowzero", 0) != 0) unsupported(np, "allowzero 1");
      n.reshape = s;
    } else if (t == "Gemm" || t == "MatMul") {
      n.op = OpKind::kGemm;
      n.inputs = {activation(np, 0)};
      Tensor b = constant(np, 1);
      if (b.rank() != 2) unsupported(np, "a right operand that is not a matrix");
      bool trans_b = false;
      float alpha = 1.0f, beta = 1.0f;
      if (t == "Gemm") {
        if (attr_int(np, "transA", 0) != 0) unsupported(np, "transA 1");
        trans_b = attr_int(np, "transB", 0) != 0;
        alpha = attr_float(np, "alpha", 1.0f);
        beta = attr_float(np, "beta", 1.0f);
        if (has_input(np, 2)) {
          Tensor c = constant(np, 2);
          const int64_t f = trans_b ? b.size(0) : b.size(1);
          if (c.numel() != f && c.numel() != 1)
            unsupported(
                np, cat("bias C of shape ", c.shape().to_string(), " (per-output or scalar only)"));
          n.bias = Tensor::empty({f}, DType::kF32);
          for (int64_t i = 0; i < f; ++i)
            n.bias.data<float>()[i] = beta * c.data<float>()[c.numel() == 1 ? 0 : i];
        }
      }
      // Store as [F, K] (B^T when B is [K, F]), alpha folded in.
      const int64_t f = trans_b ? b.size(0) : b.size(1), k = trans_b ? b.size(1) : b.size(0);
      n.weight = Tensor::empty({f, k}, DType::kF32);
      const float* src = b.data<float>();
      float* dst = n.weight.data<float>();
      for (int64_t i = 0; i < f; ++i)
        for (int64_t j = 0; j < k; ++j)
          dst[i * k + j] = alpha * (trans_b ? src[i * k + j] : src[j * f + i]);
    } else if (t == "Softmax") {
      n.op = OpKind::kSoftmax;
      n.inputs = {activation(np, 0)};
      n.axis = static_cast<int>(attr_int(np, "axis", opset_ >= 13 ? -1 : 1));
    } else if (t == "Split") {
      n.op = OpKind::kSplit;
      n.inputs = {activation(np, 0)};
      n.axis = static_cast<int>(attr_int(np, "axis", 0));
      n.split = has_input(np, 1) ? constant_ints(np, 1) : attr_ints(np, "split");
      for (int i = 0; i < np.output_size(); ++i) n.outputs.push_back(output(np, i));
    } else if (t == "Relu" || t == "LeakyRelu" || t == "Sigmoid" || t == "Clip") {
      n.op = OpKind::kActivation;
      n.inputs = {activation(np, 0)};
      if (t == "Relu") {
        n.act.kind = ActKind::kRelu;
      } else if (t == "LeakyRelu") {
        n.act = {ActKind::kLeakyRelu, attr_float(np, "alpha", 0.01f), 0.0f};
      } else if (t == "Sigmoid") {
        n.act.kind = ActKind::kSigmoid;
      } else {
        n.act.kind = ActKind::kClip;
        n.act.alpha = -INFINITY;
        n.act.beta = INFINITY;
        if (opset_ < 11) {
          n.act.alpha = attr_float(np, "min", -INFINITY);
          n.act.beta = attr_float(np, "max", INFINITY);
        } else {
          auto scalar = [&](int i) {
            const auto v = constant_floats(np, i);
            if (v.size() != 1) bad(np, cat("input ", i, " must be a scalar"));
            return v[0];
          };
          if (has_input(np, 1)) n.act.alpha = scalar(1);
          if (has_input(np, 2)) n.act.beta = scalar(2);
        }
      }
    } else if (t == "BatchNormalization") {
      n.op = OpKind::kAffine;
      n.inputs = {activation(np, 0)};
      if (attr_int(np, "training_mode", 0) != 0) unsupported(np, "training_mode 1");
      const float eps = attr_float(np, "epsilon", 1e-5f);
      const auto scale = constant_floats(np, 1), shift = constant_floats(np, 2),
                 mean = constant_floats(np, 3), var = constant_floats(np, 4);
      const size_t c = scale.size();
      if (shift.size() != c || mean.size() != c || var.size() != c)
        bad(np, "scale, B, mean and var differ in length");
      n.weight = Tensor::empty({static_cast<int64_t>(c)}, DType::kF32);
      n.bias = Tensor::empty({static_cast<int64_t>(c)}, DType::kF32);
      for (size_t i = 0; i < c; ++i) {
        const double s =
            static_cast<double>(scale[i]) / std::sqrt(static_cast<double>(var[i]) + eps);
        n.weight.data<float>()[i] = static_cast<float>(s);
        n.bias.data<float>()[i] = static_cast<float>(shift[i] - mean[i] * s);
      }
    } else {
      unsupported(
          np, "op type '" + t + "' is not supported by tandem::cnn (see tandem/cnn/onnx_import.h)");
    }
    if (n.outputs.empty()) {
      if (np.output_size() < 1) bad(np, "has no output");
      if (n.op == OpKind::kAffine) {
        for (int i = 1; i < np.output_size(); ++i)
          if (!np.output(i).empty()) unsupported(np, "training outputs");
      } else if (np.output_size() != 1) {
        bad(np, cat("expects 1 output, has ", np.output_size()));
      }
      n.outputs = {output(np, 0)};
    }
    try {
      g_.add_node(std::move(n));
    } catch (const InvalidArgument& e) {
      throw ParseError(source_, -1, e.what());
    }
  }

  std::string source_;
  std::filesystem::path dir_;
  ImportOptions opts_;
  int opset_ = 13;
  std::string cur_name_;
  std::pair<bool, std::string> resize_check_{false, "floor"};
  std::unordered_map<std::string, Value> values_;
  Graph g_;
};

Graph import_model(const op::ModelProto& model, const std::string& source,
                   const std::filesystem::path& dir, const ImportOptions& opts) {
  Importer imp(source, dir, opts);
  Graph g = imp.run(model);
  check_fits_memory(g, opts, source);
  log().debug("cnn: imported {}: {} nodes, {:.2f} GFLOP, {:.1f} MiB of weights", source,
              g.nodes().size(), g.total_flops() * 1e-9, g.weight_bytes() / 1048576.0);
  return g;
}

}  // namespace

Graph import_onnx_bytes(const void* data, size_t size, const std::string& source,
                        const ImportOptions& opts) {
  if (size > static_cast<size_t>(INT32_MAX))
    throw ParseError(source, -1, "larger than 2 GiB (use external data)");
  op::ModelProto model;
  if (!model.ParseFromArray(data, static_cast<int>(size)))
    throw ParseError(source, -1, "not a valid ONNX model (protobuf parse of ModelProto failed)");
  return import_model(model, source, {}, opts);
}

Graph import_onnx(const std::string& path, const ImportOptions& opts) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw NotFound(cat("ONNX model '", path, "' cannot be opened"));
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() > static_cast<size_t>(INT32_MAX))
    throw ParseError(path, -1, "larger than 2 GiB (use external data)");
  op::ModelProto model;
  if (!model.ParseFromString(bytes))
    throw ParseError(path, -1, "not a valid ONNX model (protobuf parse of ModelProto failed)");
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  return import_model(model, path, dir, opts);
}

}  // namespace tandem::cnn
