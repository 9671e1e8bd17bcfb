// SPDX-License-Identifier: Apache-2.0
// Graph IR for planners: a DAG of OpNodes, each carrying its output shapes and its cost in FLOPs
// and bytes.
//
// Planners (PICO, DeepZoning, DeCC for CNNs; HPipe for LLM layers) partition and schedule these
// graphs; the cost model (cost_model.h) turns a node's FLOPs and bytes into seconds on a
// DeviceProfile. A node lists the ids of the nodes whose outputs it consumes; ids are dense (0, 1,
// 2, ...) in insertion order, and inputs may refer to nodes added later, so graphs can be built in
// any order and checked once by validate(). The make_*_node helpers fill kind, output shape, FLOPs
// and bytes from op shapes with the conventions below, and record the shape parameters as
// attributes, so op_key(node) names the measurement a profiled cost table holds for it.
//
//   tandem::Graph g("mlp");
//   int x = g.add_node(tandem::make_input_node("x", {128, 576}));
//   int h = g.add_node(tandem::make_gemm_node("up", 128, 1536, 576, {x}));
//   int a = g.add_node(tandem::make_unary_node("act", "silu", {128, 1536}, {h}));
//   g.add_node(tandem::make_gemm_node("down", 128, 576, 1536, {a}));
//   for (int id : g.topological_order()) ...;        // x, up, act, down
//   double f = g.total_flops();                        // 2*128*576*1536*2 + 4*128*1536
//
// Cost conventions (per node):
//   flops          floating-point operations; a multiply-add counts 2; exp/tanh/erf/sqrt/division
//   count 1. bytes_read     bytes the op reads once: activations and parameters (weights, biases,
//   tables). bytes_written  bytes of its outputs. param_bytes    resident model state the node owns
//   (weights, biases, tables); ops that read all of
//                  it count it in bytes_read too (an embedding gather reads only the rows it
//                  needs).
// Helpers assume each tensor is touched once (ideal caching), as a roofline does.
//
// Errors: add_node throws InvalidArgument for empty or duplicate names; validate() and
// topological_order() throw InvalidArgument naming the node (dangling input, negative or non-finite
// cost, duplicate name, a cycle listed as "a -> b -> a"); from_json throws ParseError naming the
// JSON path of the bad field. Thread-safety: a Graph is a value; concurrent const access is safe.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/dtype.h"
#include "tandem/core/shape.h"
#include "tandem/export.h"
#include "tandem/ops/params.h"

namespace tandem {

struct TANDEM_API OpNode {
  int id = -1;              // position in Graph::nodes(); set by Graph::add_node
  std::string name;         // unique within the graph
  std::string kind;         // "input", "gemm", "conv2d", "attention", "rms_norm", "silu", ...
  std::vector<int> inputs;  // ids of the nodes whose outputs this node reads
  std::vector<Shape> output_shapes;  // one per output
  DType dtype = DType::kF32;         // dtype of the outputs
  double flops = 0;                  // FLOPs (see the conventions above)
  double bytes_read = 0;             // bytes
  double bytes_written = 0;          // bytes
  double param_bytes = 0;            // bytes of resident parameters
  std::map<std::string, nlohmann::json>
      attrs;  // free-form: shape parameters, strides, layer index...

  double bytes_moved() const { return bytes_read + bytes_written; }
  // flops / bytes_moved (FLOP per byte; 0 when no bytes move).
  double arithmetic_intensity() const;
  // Bytes of all outputs (dtype_row_bytes of each output's element count).
  int64_t output_bytes() const;
};

class TANDEM_API Graph {
 public:
  explicit Graph(std::string name = "graph") : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }

  // Appends a node (its id field is overwritten) and returns its id. Inputs are not checked here
  // (they may name nodes added later); validate() checks them.
  int add_node(OpNode node);
  // Appends `from` to the inputs of `to`.
  void add_edge(int from, int to);

  int size() const { return static_cast<int>(nodes_.size()); }
  bool empty() const { return nodes_.empty(); }
  const std::vector<OpNode>& nodes() const { return nodes_; }
  const OpNode& node(int id) const;  // throws NotFound
  OpNode& node(int id);              // renaming through this reference is checked by validate()
  // Id of the node called `name`, or -1.
  int find(const std::string& name) const;
  const OpNode& node(const std::string& name) const;  // throws NotFound

  // Every (producer, consumer) pair, ordered by consumer id and input position.
  std::vector<std::pair<int, int>> edges() const;
  // Ids of the nodes that read node `id`'s output (ascending, each once).
  std::vector<int> consumers(int id) const;
  // Nodes without inputs / whose output no node reads (ascending ids).
  std::vector<int> sources() const;
  std::vector<int> sinks() const;

  // Kahn's algorithm; among ready nodes the smallest id goes first, so the order is deterministic
  // and equals insertion order for graphs built front to back. Throws InvalidArgument on a dangling
  // input or a cycle (the message lists the cycle).
  std::vector<int> topological_order() const;
  // Full check: ids, non-empty unique names and kinds, inputs that exist, finite non-negative
  // costs, acyclic. Throws InvalidArgument naming the first bad node.
  void validate() const;

  double total_flops() const;
  double total_bytes_read() const;
  double total_bytes_written() const;
  double total_bytes() const { return total_bytes_read() + total_bytes_written(); }
  double total_param_bytes() const;

  // {"name": ..., "nodes": [{"name", "kind", "inputs": [input names], "outputs": [[dims]...],
  // "dtype",
  //  "flops", "bytes_read", "bytes_written", "param_bytes", "attrs": {...}}]}
  nlohmann::json to_json() const;
  // Strict reader (unknown keys rejected); inputs are node names and may refer forward. The result
  // is validated. ParseError names `where` and the JSON path ("graph.json: nodes[3].inputs[0]:
  // ...").
  static Graph from_json(const nlohmann::json& j, const std::string& where = "graph");
  // Graphviz: one box per node labelled name, kind, output shape and GFLOP.
  std::string to_dot() const;

 private:
  std::string name_;
  std::vector<OpNode> nodes_;
  std::map<std::string, int> by_name_;
};

// ---- Cost helpers: nodes with kind, output shape, FLOPs and bytes filled from op shapes ----
// Activations are f32 (as in ops.h) unless stated. Shape parameters are stored as integer
// attributes (string attributes for dtypes), which op_key() turns into the profile table key.

// A graph input (or a constant produced elsewhere): no cost.
TANDEM_API OpNode make_input_node(const std::string& name, const Shape& shape,
                                  DType dtype = DType::kF32, std::vector<int> inputs = {});
// c[M, N] = a[M, K] b[K, N]: 2MNK FLOPs. `weight` is b's dtype; when b_is_param, b counts as
// parameters. Attributes m, n, k, weight.
TANDEM_API OpNode make_gemm_node(const std::string& name, int64_t m, int64_t n, int64_t k,
                                 std::vector<int> inputs = {}, DType weight = DType::kF32,
                                 bool b_is_param = true);
// batch independent f32 GEMMs (activation x activation, no parameters): 2*batch*MNK FLOPs.
// Attributes batch, m, n, k.
TANDEM_API OpNode make_batched_gemm_node(const std::string& name, int64_t batch, int64_t m,
                                         int64_t n, int64_t k, std::vector<int> inputs = {});
// NCHW conv2d; output shape from ops::conv2d_output_shape. FLOPs: 2 * out elements *
// (C/groups)*KH*KW, plus one add per output element with bias. Attributes n, c, h, w, cout, kh, kw,
// stride_h/w, pad_top/left/bottom/right, dilation_h/w, groups, bias.
TANDEM_API OpNode make_conv2d_node(const std::string& name, const Shape& x, const Shape& w,
                                   const ops::Conv2dParams& p = {}, bool bias = true,
                                   std::vector<int> inputs = {});

// Shapes of one scaled-dot-product attention call (see ops::attention).
struct AttentionDims {
  int64_t tq = 1;          // query rows
  int64_t tk = 1;          // key/value rows
  int64_t hq = 1;          // query heads
  int64_t hkv = 1;         // key/value heads (hq % hkv == 0)
  int64_t head_dim = 64;   // D of q and k
  int64_t v_head_dim = 0;  // Dv; 0 = head_dim
  bool causal = true;      // queries are the last tq of tk positions
  DType kv_dtype = DType::kF32;
};
// FLOPs over visible (query, key) pairs S: 2*S*D (scores) + 2*S*Dv (weighted sum) + 5*S (scale,
// max, exp, sum, divide). Causal S = Hq * (tq*(tk - tq) + tq*(tq + 1)/2), else Hq*tq*tk. Reads q,
// k, v once, writes out. Attributes tq, tk, hq, hkv, d, dv, causal, kv.
TANDEM_API OpNode make_attention_node(const std::string& name, const AttentionDims& dims,
                                      std::vector<int> inputs = {});
// y = f(x) elementwise, kind one of "silu" (4 FLOPs per element), "gelu" (9, tanh form),
// "gelu_erf" (5), "relu" (1), "exp" (1). Attribute numel.
TANDEM_API OpNode make_unary_node(const std::string& name, const std::string& kind,
                                  const Shape& shape, std::vector<int> inputs = {});
// y = a op b with b broadcast over a's leading dims; kind "add", "mul" or "sub"; 1 FLOP per element
// of a. Attributes numel, b_numel.
TANDEM_API OpNode make_binary_node(const std::string& name, const std::string& kind, const Shape& a,
                                   const Shape& b, std::vector<int> inputs = {});
// Normalisation over the last dimension of `shape`: kind "rms_norm" (4 FLOPs per element: square,
// accumulate, scale, weight) or "layer_norm" (7: sum, centre, square, accumulate, scale, weight,
// bias). Parameters: weight (+ bias for layer_norm), f32 [dim]. Attributes rows, dim.
TANDEM_API OpNode make_norm_node(const std::string& name, const std::string& kind,
                                 const Shape& shape, std::vector<int> inputs = {});
// Softmax over the last dimension: 5 FLOPs per element (max, subtract, exp, sum, divide).
// Attributes rows, cols.
TANDEM_API OpNode make_softmax_node(const std::string& name, const Shape& shape,
                                    std::vector<int> inputs = {});
// 2-D pooling over NCHW, kind "max_pool" or "avg_pool": one FLOP per window element (plus one
// divide per output for avg_pool). Stride/padding/dilation from p (groups ignored). Attributes n,
// c, h, w, kh, kw, stride_h/w, pad_top/left/bottom/right, dilation_h/w.
TANDEM_API OpNode make_pool2d_node(const std::string& name, const std::string& kind, const Shape& x,
                                   int64_t kh, int64_t kw, const ops::Conv2dParams& p = {},
                                   std::vector<int> inputs = {});
// out[T, D] = table[ids]: no FLOPs; reads T rows of the table and T i32 ids. The table is
// parameters (param_bytes = the whole table). Attributes tokens, dim, rows, table.
TANDEM_API OpNode make_embedding_node(const std::string& name, int64_t tokens, int64_t dim,
                                      int64_t rows, DType table = DType::kF32,
                                      std::vector<int> inputs = {});

// The profile-table key of a node: "kind" when it has no scalar attributes, else
// "kind:name=value,..." over its integer, boolean (0/1) and string attributes, names sorted.
TANDEM_API std::string op_key(const OpNode& node);
// Rebuilds the node a key names with the helpers above (kinds: gemm, batched_gemm, conv2d,
// attention, silu/gelu/gelu_erf/relu/exp, add/mul/sub, rms_norm/layer_norm, softmax,
// max_pool/avg_pool, embedding). Throws InvalidArgument for an unknown kind or a missing/malformed
// parameter.
TANDEM_API OpNode node_from_op_key(const std::string& key);

}  // namespace tandem
