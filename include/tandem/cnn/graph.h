// SPDX-License-Identifier: Apache-2.0
// The CNN graph: a DAG of typed ops over named f32 tensors with static shapes, the form the ONNX
// importer produces and the executor, the region algebra and the CNN planners (PICO, DeepZoning,
// DECC) consume. Activations are NCHW ([N, C, H, W]) or, after Flatten/Gemm, [N, F].
//
// Why its own graph and not the core Graph IR: the engine needs per-op weights (BN folded into
// conv), fused activations and window parameters per spatial axis, which the planners' region
// algebra reads directly. `to_core_graph()`-style exports can be layered on top.
//
// How: nodes are kept in topological order (the importer sorts them and rejects cycles); every
// tensor has one producer (or is a graph input) and a list of consumers. infer_shapes() fills in
// every tensor's shape from the input shapes and checks each node's operands, throwing an error
// naming the node when something does not fit.
//
//   cnn::Graph g = cnn::import_onnx("resnet18.onnx");     // onnx_import.h
//   for (const cnn::Node& n : g.nodes()) fmt::print("{} {}\n", n.name, cnn::op_name(n.op));
//
// Thread-safety: a Graph is immutable once built; concurrent readers are fine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/core/shape.h"
#include "tandem/core/tensor.h"
#include "tandem/export.h"

namespace tandem::cnn {

enum class OpKind : uint8_t {
  kConv,     // weight [O, C/groups, KH, KW], bias [O]; fused activation; an optional second input
             // is a residual added before the activation: y = act(conv(x) + r)
  kMaxPool,  // window
  kAveragePool,        // window, count_include_pad
  kGlobalAveragePool,  // [N, C, H, W] -> [N, C, 1, 1]
  kAdd,                // elementwise; second operand a tensor or a constant (weight)
  kMul,                // elementwise; second operand a tensor or a constant (weight)
  kConcat,             // along axis (channels for NCHW)
  kResize,             // nearest, integer factors scale_h, scale_w
  kFlatten,            // [N, ...] -> [N, prod(...)]
  kReshape,            // to `shape` (already resolved: no 0 or -1 left)
  kGemm,               // [N, K] x weight[F, K]^T + bias[F]; fused activation
  kSoftmax,            // over `axis`
  kSplit,              // along axis into `split` sizes
  kActivation,         // act applied elementwise
  kAffine,             // per-channel y = x * weight[c] + bias[c] (a BatchNormalization not folded)
};

enum class ActKind : uint8_t { kNone, kRelu, kLeakyRelu, kClip, kSigmoid, kSilu };

// An elementwise activation: LeakyRelu uses alpha as the negative slope; Clip clamps to
// [alpha, beta]; SiLU is x * sigmoid(x).
struct Activation {
  ActKind kind = ActKind::kNone;
  float alpha = 0.0f;
  float beta = 0.0f;
};

// Sliding window of a conv or pool, per spatial axis (h, w): kernel, stride, dilation and leading
// (top/left) and trailing (bottom/right) zero padding, as in ONNX's `pads` attribute.
struct Window {
  int kh = 1, kw = 1;
  int sh = 1, sw = 1;
  int dh = 1, dw = 1;
  int pt = 0, pl = 0, pb = 0, pr = 0;
  bool ceil_mode = false;          // pools: output size rounds up
  bool count_include_pad = false;  // average pool: divisor counts padding
  // ONNX auto_pad: 0 explicit pads, 1 SAME_UPPER, 2 SAME_LOWER (resolved by infer_shapes, which
  // then sets the pads and resets this to 0).
  int same_pad = 0;
  // Convs: the output is computed in out_grid x out_grid tiles anchored at the output's origin
  // (set by the Executor on a Winograd conv, whose result for a pixel depends on its place in the
  // transform's tile). The region algebra rounds any output region of such a node out to that
  // grid (clamped to the output), so a tile is computed exactly like the whole map.
  int out_grid = 1;
};

struct Node {
  std::string name;  // the ONNX node name, or "<op_type>#<index>" when it had none
  OpKind op = OpKind::kActivation;
  std::vector<int> inputs;   // tensor ids
  std::vector<int> outputs;  // tensor ids
  Window window;
  int groups = 1;
  Activation act;                // conv, gemm (fused) and kActivation
  int axis = 1;                  // concat, split, softmax, flatten
  int scale_h = 1, scale_w = 1;  // resize
  int64_t size_h = 0,
          size_w = 0;          // resize given as output sizes (resolved to scales by infer_shapes)
  std::vector<int64_t> split;  // split sizes
  std::vector<int64_t> reshape;  // reshape target as given (ONNX: 0 = copy, -1 = infer)
  Shape shape;                   // reshape target, resolved by infer_shapes
  Tensor weight;                 // conv/gemm weights; add/mul constant; affine scale
  Tensor bias;                   // conv/gemm/affine bias (may be undefined)
};

struct TensorInfo {
  std::string name;
  Shape shape;
  int producer = -1;           // node id, -1 for a graph input
  std::vector<int> consumers;  // node ids, in node order
};

TANDEM_API const char* op_name(OpKind op);
TANDEM_API const char* act_name(ActKind act);

class TANDEM_API Graph {
 public:
  // Builders (used by the importer and by tests that build graphs in C++).
  int add_tensor(const std::string& name, const Shape& shape = Shape());
  int add_node(Node node);  // wires producer/consumers; node.inputs/outputs must exist
  void add_input(int tensor) { inputs_.push_back(tensor); }
  void add_output(int tensor) { outputs_.push_back(tensor); }
  void set_outputs(std::vector<int> tensors) { outputs_ = std::move(tensors); }

  // Fills in every tensor's shape from the inputs' shapes and checks operands; throws
  // InvalidArgument naming the node on a mismatch (the importer rethrows it as a ParseError). Nodes
  // must already be in topological order.
  void infer_shapes();

  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& mutable_nodes() { return nodes_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const Node& node(int id) const { return nodes_.at(id); }
  const TensorInfo& tensor(int id) const { return tensors_.at(id); }
  const std::vector<int>& inputs() const { return inputs_; }
  const std::vector<int>& outputs() const { return outputs_; }
  int find_tensor(const std::string& name) const;  // -1 when absent

  // Multiply-accumulates x 2 of one node (conv: 2*KH*KW*C/groups*O*H_out*W_out*N; gemm alike);
  // 0 for data movement. The sum over nodes is total_flops().
  int64_t flops(int node) const;
  int64_t total_flops() const;
  int64_t weight_bytes() const;
  // Rebuilds producer/consumer lists after nodes were edited (the fusion passes use it) and drops
  // tensors nothing refers to any more.
  void rewire();

  std::string summary() const;  // one line per node: name, op, shapes

 private:
  std::vector<TensorInfo> tensors_;
  std::vector<Node> nodes_;
  std::vector<int> inputs_, outputs_;
};

// Output size of a sliding window along one axis (throws InvalidArgument when it is empty).
TANDEM_API int64_t window_output_size(int64_t in, int k, int s, int d, int pad_lo, int pad_hi,
                                      bool ceil_mode);

}  // namespace tandem::cnn
