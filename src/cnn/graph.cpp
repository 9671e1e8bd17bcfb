// SPDX-License-Identifier: Apache-2.0
// cnn::Graph: building, shape inference, FLOP counts.
#include "tandem/cnn/graph.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "tandem/core/error.h"

namespace tandem::cnn {

namespace {

// Largest activation tensor accepted (elements): keeps a malformed file from asking for terabytes.
constexpr int64_t kMaxElements = int64_t{1} << 32;

[[noreturn]] void fail(const Node& n, const std::string& what) {
  throw InvalidArgument(cat("node '", n.name, "' (", op_name(n.op), "): ", what));
}

int64_t checked_numel(const Node& n, const Shape& s) {
  int64_t e = 1;
  for (int64_t d : s) {
    if (d <= 0) fail(n, cat("output shape ", s.to_string(), " has a non-positive dimension"));
    if (e > kMaxElements / d) fail(n, cat("output shape ", s.to_string(), " is too large"));
    e *= d;
  }
  return e;
}

}  // namespace

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::kConv:
      return "Conv";
    case OpKind::kMaxPool:
      return "MaxPool";
    case OpKind::kAveragePool:
      return "AveragePool";
    case OpKind::kGlobalAveragePool:
      return "GlobalAveragePool";
    case OpKind::kAdd:
      return "Add";
    case OpKind::kMul:
      return "Mul";
    case OpKind::kConcat:
      return "Concat";
    case OpKind::kResize:
      return "Resize";
    case OpKind::kFlatten:
      return "Flatten";
    case OpKind::kReshape:
      return "Reshape";
    case OpKind::kGemm:
      return "Gemm";
    case OpKind::kSoftmax:
      return "Softmax";
    case OpKind::kSplit:
      return "Split";
    case OpKind::kActivation:
      return "Activation";
    case OpKind::kAffine:
      return "Affine";
  }
  return "?";
}

const char* act_name(ActKind act) {
  switch (act) {
    case ActKind::kNone:
      return "none";
    case ActKind::kRelu:
      return "relu";
    case ActKind::kLeakyRelu:
      return "leaky_relu";
    case ActKind::kClip:
      return "clip";
    case ActKind::kSigmoid:
      return "sigmoid";
    case ActKind::kSilu:
      return "silu";
  }
  return "?";
}

int64_t window_output_size(int64_t in, int k, int s, int d, int pad_lo, int pad_hi,
                           bool ceil_mode) {
  if (k < 1 || s < 1 || d < 1 || pad_lo < 0 || pad_hi < 0)
    throw InvalidArgument(cat("window: kernel ", k, " stride ", s, " dilation ", d, " pads ",
                              pad_lo, "/", pad_hi, " are not valid"));
  const int64_t span = static_cast<int64_t>(k - 1) * d + 1;
  const int64_t padded = in + pad_lo + pad_hi;
  if (padded < span)
    throw InvalidArgument(cat("window: kernel span ", span, " exceeds the padded input ", padded));
  int64_t out = (padded - span) / s + 1;
  if (ceil_mode && (padded - span) % s != 0) {
    // ONNX/PyTorch: the last window must start inside the input or the leading padding.
    if ((out)*s < in + pad_lo) ++out;
  }
  return out;
}

int Graph::add_tensor(const std::string& name, const Shape& shape) {
  TensorInfo t;
  t.name = name;
  t.shape = shape;
  tensors_.push_back(std::move(t));
  return static_cast<int>(tensors_.size()) - 1;
}

int Graph::add_node(Node node) {
  const int id = static_cast<int>(nodes_.size());
  for (int t : node.inputs) {
    TANDEM_CHECK(t >= 0 && t < static_cast<int>(tensors_.size())) << "node " << node.name;
    tensors_[t].consumers.push_back(id);
  }
  for (int t : node.outputs) {
    TANDEM_CHECK(t >= 0 && t < static_cast<int>(tensors_.size())) << "node " << node.name;
    if (tensors_[t].producer != -1)
      throw InvalidArgument(
          cat("node '", node.name, "': tensor '", tensors_[t].name, "' already has a producer"));
    tensors_[t].producer = id;
  }
  nodes_.push_back(std::move(node));
  return id;
}

int Graph::find_tensor(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name == name) return static_cast<int>(i);
  return -1;
}

void Graph::rewire() {
  // Keep tensors that are inputs, outputs or touched by a node; renumber.
  std::vector<int> keep(tensors_.size(), 0);
  for (int t : inputs_) keep[t] = 1;
  for (int t : outputs_) keep[t] = 1;
  for (const Node& n : nodes_) {
    for (int t : n.inputs) keep[t] = 1;
    for (int t : n.outputs) keep[t] = 1;
  }
  std::vector<int> remap(tensors_.size(), -1);
  std::vector<TensorInfo> kept;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (!keep[i]) continue;
    remap[i] = static_cast<int>(kept.size());
    TensorInfo t = std::move(tensors_[i]);
    t.producer = -1;
    t.consumers.clear();
    kept.push_back(std::move(t));
  }
  tensors_ = std::move(kept);
  for (int& t : inputs_) t = remap[t];
  for (int& t : outputs_) t = remap[t];
  for (size_t id = 0; id < nodes_.size(); ++id) {
    Node& n = nodes_[id];
    for (int& t : n.inputs) {
      t = remap[t];
      tensors_[t].consumers.push_back(static_cast<int>(id));
    }
    for (int& t : n.outputs) {
      t = remap[t];
      tensors_[t].producer = static_cast<int>(id);
    }
  }
}

void Graph::infer_shapes() {
  for (int t : inputs_) {
    const Shape& s = tensors_[t].shape;
    if (s.rank() == 0)
      throw InvalidArgument(cat("graph input '", tensors_[t].name, "' has no shape"));
    for (int64_t d : s)
      if (d <= 0)
        throw InvalidArgument(cat("graph input '", tensors_[t].name, "' has shape ", s.to_string(),
                                  " with a non-positive dimension"));
  }
  for (Node& n : nodes_) {
    if (n.inputs.empty()) fail(n, "has no inputs");
    if (n.outputs.empty()) fail(n, "has no outputs");
    auto in = [&](size_t i) -> const Shape& {
      const Shape& s = tensors_[n.inputs.at(i)].shape;
      if (s.rank() == 0)
        fail(n, cat("input '", tensors_[n.inputs.at(i)].name, "' has no shape (not computed yet)"));
      return s;
    };
    auto want_inputs = [&](size_t k) {
      if (n.inputs.size() != k) fail(n, cat("expects ", k, " input(s), got ", n.inputs.size()));
    };
    auto want_rank = [&](const Shape& s, int r) {
      if (s.rank() != r) fail(n, cat("expects a rank-", r, " input, got ", s.to_string()));
    };
    std::vector<Shape> out(n.outputs.size());
    const Shape& x = in(0);
    switch (n.op) {
      case OpKind::kConv:
      case OpKind::kMaxPool:
      case OpKind::kAveragePool: {
        want_inputs(1);
        want_rank(x, 4);
        Window& w = n.window;
        if (w.same_pad != 0) {
          // SAME_UPPER / SAME_LOWER: output = ceil(in / stride); the odd pad goes to the end
          // (upper) or the start (lower).
          auto resolve = [&](int64_t in_sz, int k, int s, int d, int& lo, int& hi) {
            const int64_t out_sz = (in_sz + s - 1) / s;
            const int64_t total = std::max<int64_t>(
                0, (out_sz - 1) * s + static_cast<int64_t>(k - 1) * d + 1 - in_sz);
            const int64_t small = total / 2, big = total - small;
            lo = static_cast<int>(w.same_pad == 1 ? small : big);
            hi = static_cast<int>(w.same_pad == 1 ? big : small);
          };
          resolve(x[2], w.kh, w.sh, w.dh, w.pt, w.pb);
          resolve(x[3], w.kw, w.sw, w.dw, w.pl, w.pr);
          w.same_pad = 0;
        }
        int64_t c_out = x[1];
        if (n.op == OpKind::kConv) {
          if (!n.weight.defined() || n.weight.rank() != 4)
            fail(n, "needs a rank-4 weight [O, C/groups, KH, KW]");
          if (n.groups < 1 || x[1] % n.groups != 0 || n.weight.size(0) % n.groups != 0)
            fail(n, cat("groups ", n.groups, " do not divide channels ", x[1], " / ",
                        n.weight.size(0)));
          if (n.weight.size(1) * n.groups != x[1])
            fail(n, cat("weight ", n.weight.shape().to_string(), " with groups ", n.groups,
                        " does not match input channels ", x[1]));
          if (n.weight.size(2) != w.kh || n.weight.size(3) != w.kw)
            fail(n, cat("weight ", n.weight.shape().to_string(), " does not match kernel ", w.kh,
                        "x", w.kw));
          if (n.bias.defined() && n.bias.numel() != n.weight.size(0))
            fail(n, cat("bias has ", n.bias.numel(), " elements for ", n.weight.size(0),
                        " output channels"));
          c_out = n.weight.size(0);
        }
        int64_t ho = 0, wo = 0;
        try {
          ho = window_output_size(x[2], w.kh, w.sh, w.dh, w.pt, w.pb, w.ceil_mode);
          wo = window_output_size(x[3], w.kw, w.sw, w.dw, w.pl, w.pr, w.ceil_mode);
        } catch (const InvalidArgument& e) {
          fail(n, cat("on input ", x.to_string(), ": ", e.what()));
        }
        out[0] = Shape{x[0], c_out, ho, wo};
        break;
      }
      case OpKind::kGlobalAveragePool:
        want_inputs(1);
        want_rank(x, 4);
        out[0] = Shape{x[0], x[1], 1, 1};
        break;
      case OpKind::kAdd:
      case OpKind::kMul: {
        if (n.inputs.size() == 2) {
          const Shape& y = in(1);
          if (!(y == x))
            fail(n, cat("operand shapes ", x.to_string(), " and ", y.to_string(),
                        " differ (only constants broadcast)"));
        } else {
          want_inputs(1);
          if (!n.weight.defined()) fail(n, "needs a second operand");
          const int64_t e = n.weight.numel();
          const bool per_channel = x.rank() >= 2 && e == x[1];
          if (!(e == 1 || per_channel || e == x.numel()))
            fail(n,
                 cat("constant of shape ", n.weight.shape().to_string(), " does not broadcast to ",
                     x.to_string(), " (scalar, per-channel or full only)"));
        }
        out[0] = x;
        break;
      }
      case OpKind::kConcat: {
        const int r = x.rank();
        if (n.axis < 0) n.axis += r;
        if (n.axis < 0 || n.axis >= r) fail(n, cat("axis out of range for ", x.to_string()));
        if (r != 2 && n.axis != 1)
          throw Unsupported(cat("node '", n.name, "' (Concat): axis ", n.axis, " of ",
                                x.to_string(), " (channels only)"));
        Shape o = x;
        o[n.axis] = 0;
        for (size_t i = 0; i < n.inputs.size(); ++i) {
          const Shape& s = in(i);
          if (s.rank() != r) fail(n, "inputs differ in rank");
          for (int d = 0; d < r; ++d)
            if (d != n.axis && s[d] != x[d])
              fail(n, cat("input ", i, " shape ", s.to_string(), " does not match ", x.to_string(),
                          " off the concat axis"));
          o[n.axis] += s[n.axis];
        }
        out[0] = o;
        break;
      }
      case OpKind::kResize:
        want_inputs(1);
        want_rank(x, 4);
        if (n.size_h > 0 || n.size_w > 0) {
          if (n.size_h % x[2] != 0 || n.size_w % x[3] != 0)
            fail(n, cat("output size ", n.size_h, "x", n.size_w, " is not an integer multiple of ",
                        x[2], "x", x[3]));
          n.scale_h = static_cast<int>(std::min<int64_t>(n.size_h / x[2], 1 << 20));
          n.scale_w = static_cast<int>(std::min<int64_t>(n.size_w / x[3], 1 << 20));
          n.size_h = n.size_w = 0;
        }
        if (n.scale_h < 1 || n.scale_w < 1 || n.scale_h > 64 || n.scale_w > 64)
          fail(n, cat("scale ", n.scale_h, "x", n.scale_w, " is not a supported integer factor"));
        out[0] = Shape{x[0], x[1], x[2] * n.scale_h, x[3] * n.scale_w};
        break;
      case OpKind::kFlatten: {
        want_inputs(1);
        int axis = n.axis < 0 ? n.axis + x.rank() : n.axis;
        if (axis < 0 || axis > x.rank()) fail(n, "axis out of range");
        int64_t a = 1, b = 1;
        for (int d = 0; d < axis; ++d) a *= x[d];
        for (int d = axis; d < x.rank(); ++d) b *= x[d];
        out[0] = Shape{a, b};
        break;
      }
      case OpKind::kReshape: {
        want_inputs(1);
        if (n.reshape.empty() && n.shape.rank() > 0) n.reshape = n.shape.to_vector();
        if (n.reshape.empty() || n.reshape.size() > static_cast<size_t>(kMaxRank))
          fail(n, "has no valid target shape");
        std::vector<int64_t> dims = n.reshape;
        int infer = -1;
        int64_t known = 1;
        for (int d = 0; d < static_cast<int>(dims.size()); ++d) {
          if (dims[d] == 0) {
            if (d >= x.rank()) fail(n, "0 in the target shape past the input's rank");
            dims[d] = x[d];
          }
          if (dims[d] == -1) {
            if (infer >= 0) fail(n, "more than one -1 in the target shape");
            infer = d;
          } else if (dims[d] <= 0) {
            fail(n, "the target shape has a negative dimension");
          } else {
            if (known > kMaxElements / dims[d]) fail(n, "target shape is too large");
            known *= dims[d];
          }
        }
        if (infer >= 0) {
          if (x.numel() % known != 0) fail(n, cat("cannot infer the -1 for ", x.to_string()));
          dims[infer] = x.numel() / known;
        }
        n.shape = Shape(dims);
        int64_t e = 1;
        for (int64_t d : n.shape) {
          if (d <= 0) fail(n, cat("target shape ", n.shape.to_string(), " is not resolved"));
          e *= d;
        }
        if (e != x.numel())
          fail(n, cat("cannot reshape ", x.to_string(), " to ", n.shape.to_string()));
        out[0] = n.shape;
        break;
      }
      case OpKind::kGemm:
        want_inputs(1);
        want_rank(x, 2);
        if (!n.weight.defined() || n.weight.rank() != 2 || n.weight.size(1) != x[1])
          fail(n, cat("weight ", n.weight.defined() ? n.weight.shape().to_string() : "missing",
                      " does not match input ", x.to_string(), " (want [F, ", x[1], "])"));
        if (n.bias.defined() && n.bias.numel() != n.weight.size(0))
          fail(n, cat("bias has ", n.bias.numel(), " elements for ", n.weight.size(0), " outputs"));
        out[0] = Shape{x[0], n.weight.size(0)};
        break;
      case OpKind::kSoftmax: {
        want_inputs(1);
        int axis = n.axis < 0 ? n.axis + x.rank() : n.axis;
        if (axis != x.rank() - 1 && !(x.rank() == 4 && axis == 1 && x[2] * x[3] == 1))
          fail(n, cat("softmax over axis ", n.axis, " of ", x.to_string(),
                      " is not supported (last axis only)"));
        out[0] = x;
        break;
      }
      case OpKind::kSplit: {
        want_inputs(1);
        int axis = n.axis < 0 ? n.axis + x.rank() : n.axis;
        if (axis < 0 || axis >= x.rank()) fail(n, "axis out of range");
        if (x.rank() != 2 && axis != 1)
          throw Unsupported(cat("node '", n.name, "' (Split): axis ", axis, " of ", x.to_string(),
                                " (channels only)"));
        n.axis = axis;
        if (n.split.empty()) {
          if (x[axis] % static_cast<int64_t>(n.outputs.size()) != 0)
            fail(n, cat("cannot split ", x[axis], " evenly into ", n.outputs.size()));
          n.split.assign(n.outputs.size(), x[axis] / static_cast<int64_t>(n.outputs.size()));
        }
        if (n.split.size() != n.outputs.size())
          fail(n, cat(n.split.size(), " split sizes for ", n.outputs.size(), " outputs"));
        int64_t total = 0;
        for (size_t i = 0; i < n.split.size(); ++i) {
          if (n.split[i] <= 0) fail(n, "split sizes must be positive");
          total += n.split[i];
          out[i] = x;
          out[i][axis] = n.split[i];
        }
        if (total != x[axis]) fail(n, cat("split sizes sum to ", total, ", axis has ", x[axis]));
        break;
      }
      case OpKind::kActivation:
        want_inputs(1);
        out[0] = x;
        break;
      case OpKind::kAffine:
        want_inputs(1);
        if (x.rank() < 2 || !n.weight.defined() || n.weight.numel() != x[1] ||
            (n.bias.defined() && n.bias.numel() != x[1]))
          fail(n, cat("per-channel parameters do not match input ", x.to_string()));
        out[0] = x;
        break;
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      checked_numel(n, out[i]);
      tensors_[n.outputs[i]].shape = out[i];
    }
  }
  for (int t : outputs_)
    if (tensors_[t].shape.rank() == 0)
      throw InvalidArgument(cat("graph output '", tensors_[t].name, "' is never produced"));
}

int64_t Graph::flops(int id) const {
  const Node& n = nodes_.at(id);
  if (n.outputs.empty()) return 0;
  const Shape& y = tensors_[n.outputs[0]].shape;
  if (y.rank() == 0) return 0;
  switch (n.op) {
    case OpKind::kConv:
      return 2 * y.numel() * n.weight.size(1) * n.weight.size(2) * n.weight.size(3);
    case OpKind::kGemm:
      return 2 * y.numel() * n.weight.size(1);
    default:
      return 0;
  }
}

int64_t Graph::total_flops() const {
  int64_t f = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) f += flops(static_cast<int>(i));
  return f;
}

int64_t Graph::weight_bytes() const {
  int64_t b = 0;
  for (const Node& n : nodes_) {
    if (n.weight.defined()) b += n.weight.nbytes();
    if (n.bias.defined()) b += n.bias.nbytes();
  }
  return b;
}

std::string Graph::summary() const {
  std::ostringstream os;
  for (const Node& n : nodes_) {
    os << n.name << " " << op_name(n.op);
    if (n.act.kind != ActKind::kNone) os << "+" << act_name(n.act.kind);
    os << " (";
    for (size_t i = 0; i < n.inputs.size(); ++i)
      os << (i ? ", " : "") << tensors_[n.inputs[i]].shape.to_string();
    os << ") -> ";
    for (size_t i = 0; i < n.outputs.size(); ++i)
      os << (i ? ", " : "") << tensors_[n.outputs[i]].shape.to_string();
    os << "\n";
  }
  return os.str();
}

}  // namespace tandem::cnn
