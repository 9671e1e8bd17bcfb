// SPDX-License-Identifier: Apache-2.0
// Graph IR: topological order, validation errors, JSON round trip and errors, DOT, cost helpers, op
// keys.
#include "tandem/core/graph.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tandem/core/error.h"

namespace tandem {
namespace {

// Substring check that prints the whole message on failure (the tests link gtest, not gmock).
::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected \"" << part << "\" in: " << text;
}
#define EXPECT_CONTAINS(text, part) EXPECT_TRUE(contains(text, part))

OpNode plain(const std::string& name, std::vector<int> inputs = {}, double flops = 1) {
  OpNode n;
  n.name = name;
  n.kind = "op";
  n.inputs = std::move(inputs);
  n.flops = flops;
  n.output_shapes = {Shape{2, 3}};
  return n;
}

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

TEST(Graph, TopologicalOrderIsDeterministicWithForwardReferences) {
  Graph g("diamond");
  // Added sink first: inputs refer to nodes added later.
  g.add_node(plain("d", {2, 1}));  // 0
  g.add_node(plain("b", {3}));     // 1
  g.add_node(plain("c", {3}));     // 2
  g.add_node(plain("a"));          // 3
  EXPECT_EQ(g.topological_order(), (std::vector<int>{3, 1, 2, 0}));
  EXPECT_EQ(g.sources(), (std::vector<int>{3}));
  EXPECT_EQ(g.sinks(), (std::vector<int>{0}));
  EXPECT_EQ(g.consumers(3), (std::vector<int>{1, 2}));
  EXPECT_EQ(g.edges(), (std::vector<std::pair<int, int>>{{2, 0}, {1, 0}, {3, 1}, {3, 2}}));
  EXPECT_NO_THROW(g.validate());
}

TEST(Graph, FrontToBackGraphKeepsInsertionOrder) {
  Graph g;
  int x = g.add_node(plain("x"));
  int a = g.add_node(plain("a", {x}));
  int b = g.add_node(plain("b", {x}));
  int c = g.add_node(plain("c", {a, b}));
  g.add_node(plain("d", {c, x}));
  EXPECT_EQ(g.topological_order(), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(g.find("c"), 3);
  EXPECT_EQ(g.find("nope"), -1);
  EXPECT_EQ(g.node("b").id, 2);
  EXPECT_THROW(g.node("nope"), NotFound);
  EXPECT_THROW(g.node(9), NotFound);
}

TEST(Graph, SameInputTwiceIsOneDependency) {
  Graph g;
  int x = g.add_node(plain("x"));
  g.add_node(plain("square", {x, x}));
  EXPECT_EQ(g.topological_order(), (std::vector<int>{0, 1}));
  EXPECT_EQ(g.consumers(x), (std::vector<int>{1}));
}

TEST(Graph, CycleErrorListsTheCycle) {
  Graph g("loop");
  g.add_node(plain("src"));         // 0
  g.add_node(plain("a", {0, 3}));   // 1
  g.add_node(plain("b", {1}));      // 2
  g.add_node(plain("c", {2}));      // 3
  g.add_node(plain("after", {3}));  // 4: downstream of the cycle, not on it
  const std::string msg = error_of<InvalidArgument>([&] { g.topological_order(); });
  EXPECT_CONTAINS(msg, "graph 'loop': cycle through node");
  // The cycle is printed in data-flow order, whichever node it starts from.
  const bool listed = msg.find("'a' -> 'b' -> 'c' -> 'a'") != std::string::npos ||
                      msg.find("'b' -> 'c' -> 'a' -> 'b'") != std::string::npos ||
                      msg.find("'c' -> 'a' -> 'b' -> 'c'") != std::string::npos;
  EXPECT_TRUE(listed) << msg;
  EXPECT_EQ(msg.find("after"), std::string::npos) << msg;
  EXPECT_THROW(g.validate(), InvalidArgument);
}

TEST(Graph, SelfLoopIsACycle) {
  Graph g;
  g.add_node(plain("me"));
  g.add_edge(0, 0);
  EXPECT_CONTAINS(error_of<InvalidArgument>([&] { g.validate(); }), "'me' -> 'me'");
}

TEST(Graph, DanglingInputNamesNodeAndId) {
  Graph g("g");
  g.add_node(plain("x"));
  g.add_node(plain("y", {0, 7}));
  const std::string msg = error_of<InvalidArgument>([&] { g.validate(); });
  EXPECT_CONTAINS(msg, "'y' (id 1) input 1 is node 7, which does not exist");
  EXPECT_THROW(g.add_edge(5, 0), NotFound);
}

TEST(Graph, DuplicateNames) {
  Graph g;
  g.add_node(plain("x"));
  EXPECT_CONTAINS(error_of<InvalidArgument>([&] { g.add_node(plain("x")); }),
                  "duplicate node name 'x'");
  EXPECT_THROW(g.add_node(plain("")), InvalidArgument);
  g.add_node(plain("y"));
  g.node(1).name = "x";  // renamed behind the graph's back
  EXPECT_CONTAINS(error_of<InvalidArgument>([&] { g.validate(); }),
                  "'x' (id 1): duplicate node name");
}

TEST(Graph, NegativeOrNonFiniteCosts) {
  const std::pair<const char*, double OpNode::*> fields[] = {
      {"flops", &OpNode::flops},
      {"bytes_read", &OpNode::bytes_read},
      {"bytes_written", &OpNode::bytes_written},
      {"param_bytes", &OpNode::param_bytes}};
  for (const auto& [name, member] : fields) {
    for (double bad : {-1.0, std::numeric_limits<double>::quiet_NaN(),
                       std::numeric_limits<double>::infinity()}) {
      Graph g;
      OpNode n = plain("n");
      n.*member = bad;
      g.add_node(n);
      EXPECT_CONTAINS(error_of<InvalidArgument>([&] { g.validate(); }),
                      std::string("'n' (id 0): ") + name)
          << name << " = " << bad;
    }
  }
  Graph g;
  OpNode n = plain("k");
  n.kind = "";
  g.add_node(n);
  EXPECT_CONTAINS(error_of<InvalidArgument>([&] { g.validate(); }), "empty op kind");
}

TEST(Graph, TotalsOfAnMlp) {
  Graph g("mlp");
  int x = g.add_node(make_input_node("x", {128, 576}));
  int h = g.add_node(make_gemm_node("up", 128, 1536, 576, {x}));
  int a = g.add_node(make_unary_node("act", "silu", {128, 1536}, {h}));
  g.add_node(make_gemm_node("down", 128, 576, 1536, {a}));
  EXPECT_EQ(g.topological_order(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_DOUBLE_EQ(g.total_flops(), 2.0 * 128 * 576 * 1536 * 2 + 4.0 * 128 * 1536);
  const double weights = 4.0 * 576 * 1536 * 2;
  EXPECT_DOUBLE_EQ(g.total_param_bytes(), weights);
  // up reads x, act reads up, down reads act; plus both weight matrices.
  const double reads = 4.0 * 128 * 576 + 4.0 * 128 * 1536 * 2 + weights;
  EXPECT_DOUBLE_EQ(g.total_bytes_read(), reads);
  const double writes = 4.0 * 128 * 1536 * 2 + 4.0 * 128 * 576;
  EXPECT_DOUBLE_EQ(g.total_bytes_written(), writes);
  EXPECT_DOUBLE_EQ(g.total_bytes(), reads + writes);
  EXPECT_EQ(g.node("up").output_bytes(), 4 * 128 * 1536);
}

Graph sample_graph() {
  Graph g("sample");
  int x = g.add_node(make_input_node("tokens", {16}, DType::kI32));
  int e = g.add_node(make_embedding_node("embed", 16, 64, 1000, DType::kQ8_0, {x}));
  int n = g.add_node(make_norm_node("norm", "rms_norm", {16, 64}, {e}));
  int q = g.add_node(make_gemm_node("q", 16, 64, 64, {n}, DType::kQ4_1));
  OpNode extra = make_softmax_node("probs", {16, 64}, {q});
  extra.attrs["layer"] = 3;
  extra.attrs["note"] = "free text";
  extra.attrs["list"] = nlohmann::json::array({1, 2});
  g.add_node(extra);
  return g;
}

TEST(Graph, JsonRoundTrip) {
  const Graph g = sample_graph();
  const nlohmann::json j = g.to_json();
  const Graph back = Graph::from_json(j);
  EXPECT_EQ(back.name(), "sample");
  ASSERT_EQ(back.size(), g.size());
  for (int i = 0; i < g.size(); ++i) {
    const OpNode &a = g.node(i), &b = back.node(i);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.inputs, b.inputs);
    EXPECT_EQ(a.output_shapes, b.output_shapes);
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_EQ(a.flops, b.flops);
    EXPECT_EQ(a.bytes_read, b.bytes_read);
    EXPECT_EQ(a.bytes_written, b.bytes_written);
    EXPECT_EQ(a.param_bytes, b.param_bytes);
    EXPECT_EQ(a.attrs, b.attrs);
  }
  EXPECT_EQ(back.to_json(), j);
  // Also through text.
  EXPECT_EQ(Graph::from_json(nlohmann::json::parse(j.dump())).to_json(), j);
}

TEST(Graph, JsonNodesMayReferForward) {
  const auto j = nlohmann::json::parse(R"({"name": "fwd", "nodes": [
      {"name": "out", "kind": "add", "inputs": ["x", "x"]},
      {"name": "x", "kind": "input", "outputs": [[4]]}]})");
  const Graph g = Graph::from_json(j);
  EXPECT_EQ(g.topological_order(), (std::vector<int>{1, 0}));
  EXPECT_EQ(g.node("out").inputs, (std::vector<int>{1, 1}));
}

TEST(Graph, JsonErrorsNameTheField) {
  struct Case {
    const char* json;
    const char* expect;
  };
  const Case cases[] = {
      {R"({"nodes": [{"name": "a"}]})", "g.json: nodes[0]: missing required key 'kind'"},
      {R"({"nodes": [{"name": "a", "kind": "x"}, {"name": "b", "kind": "y", "inputs": ["zz"]}]})",
       "g.json: nodes[1].inputs[0]: unknown node 'zz'"},
      {R"({"nodes": [{"name": "a", "kind": "x", "flops": -5}]})",
       "g.json: nodes[0].flops: expected a non-negative number, got -5"},
      {R"({"nodes": [{"name": "a", "kind": "x", "bytes_read": "many"}]})",
       "g.json: nodes[0].bytes_read: expected a non-negative number, got \"many\""},
      {R"({"nodes": [{"name": "a", "kind": "x", "flop": 1}]})",
       "g.json: nodes[0]: unknown key 'flop'"},
      {R"({"nodes": [{"name": "a", "kind": "x", "dtype": "f33"}]})",
       "g.json: nodes[0].dtype: unknown dtype \"f33\""},
      {R"({"nodes": [{"name": "a", "kind": "x", "outputs": [[2, -1]]}]})",
       "g.json: nodes[0].outputs[0][1]: expected a non-negative integer, got -1"},
      {R"({"nodes": [{"name": "a", "kind": "x"}, {"name": "a", "kind": "x"}]})",
       "g.json: nodes[1].name: duplicate node name 'a'"},
      {R"({"nodes": {"a": 1}})", "g.json: nodes: expected an array"},
      {R"({"graph": []})", "g.json: unknown key 'graph'"},
      {R"([1, 2])", "g.json: expected an object"},
      {R"({"nodes": [{"name": "a", "kind": "x", "inputs": ["b"]}, {"name": "b", "kind": "x", "inputs": ["a"]}]})",
       "cycle through node"},
  };
  for (const auto& c : cases) {
    const std::string msg =
        error_of<ParseError>([&] { Graph::from_json(nlohmann::json::parse(c.json), "g.json"); });
    EXPECT_CONTAINS(msg, c.expect) << c.json;
  }
}

TEST(Graph, DotDump) {
  const Graph g = sample_graph();
  const std::string dot = g.to_dot();
  EXPECT_CONTAINS(dot, "digraph \"sample\" {");
  EXPECT_CONTAINS(dot, "n0 -> n1;");
  EXPECT_CONTAINS(dot, "n3 -> n4;");
  EXPECT_CONTAINS(dot, "label=\"q\\ngemm\\n[16, 64]");
  Graph quoted("a\"b");
  quoted.add_node(plain("x\"y"));
  EXPECT_CONTAINS(quoted.to_dot(), "digraph \"a\\\"b\"");
  EXPECT_CONTAINS(quoted.to_dot(), "x\\\"y");
}

// ---- cost helpers ----

TEST(GraphCosts, Gemm) {
  const OpNode n = make_gemm_node("g", 128, 576, 576);
  EXPECT_EQ(n.kind, "gemm");
  EXPECT_EQ(n.output_shapes, (std::vector<Shape>{Shape{128, 576}}));
  EXPECT_DOUBLE_EQ(n.flops, 2.0 * 128 * 576 * 576);
  EXPECT_DOUBLE_EQ(n.param_bytes, 4.0 * 576 * 576);
  EXPECT_DOUBLE_EQ(n.bytes_read, 4.0 * 128 * 576 + 4.0 * 576 * 576);
  EXPECT_DOUBLE_EQ(n.bytes_written, 4.0 * 128 * 576);
  // q4_1 weights: 576 / 32 = 18 blocks of 20 bytes per row.
  const OpNode q = make_gemm_node("q", 1, 1536, 576, {}, DType::kQ4_1);
  EXPECT_DOUBLE_EQ(q.param_bytes, 360.0 * 1536);
  EXPECT_DOUBLE_EQ(q.bytes_read, 4.0 * 576 + 360.0 * 1536);
  const OpNode act = make_gemm_node("qk", 8, 8, 8, {}, DType::kF32, /*b_is_param=*/false);
  EXPECT_EQ(act.param_bytes, 0.0);
  EXPECT_THROW(make_gemm_node("bad", 0, 1, 1), InvalidArgument);
  EXPECT_THROW(make_gemm_node("bad", 1, 1, 33, {}, DType::kQ4_0),
               InvalidArgument);  // k not a block multiple
  const OpNode b = make_batched_gemm_node("bg", 3, 4, 5, 6);
  EXPECT_DOUBLE_EQ(b.flops, 2.0 * 3 * 4 * 5 * 6);
  EXPECT_DOUBLE_EQ(b.bytes_read, 4.0 * (3 * 4 * 6 + 3 * 6 * 5));
  EXPECT_DOUBLE_EQ(b.bytes_written, 4.0 * 3 * 4 * 5);
}

TEST(GraphCosts, Conv2dResNetStem) {
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = 2;
  p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 3;
  const OpNode n = make_conv2d_node("conv1", {1, 3, 224, 224}, {64, 3, 7, 7}, p, /*bias=*/true);
  ASSERT_EQ(n.output_shapes.size(), 1u);
  EXPECT_EQ(n.output_shapes[0], (Shape{1, 64, 112, 112}));
  const double out = 64.0 * 112 * 112;
  EXPECT_DOUBLE_EQ(n.flops, 2.0 * out * 3 * 7 * 7 + out);
  EXPECT_DOUBLE_EQ(n.param_bytes, 4.0 * (64 * 3 * 7 * 7 + 64));
  EXPECT_DOUBLE_EQ(n.bytes_read, 4.0 * 3 * 224 * 224 + n.param_bytes);
  EXPECT_DOUBLE_EQ(n.bytes_written, 4.0 * out);
  // Depthwise: groups = channels.
  ops::Conv2dParams dw;
  dw.groups = 32;
  dw.pad_top = dw.pad_left = dw.pad_bottom = dw.pad_right = 1;
  const OpNode d = make_conv2d_node("dw", {1, 32, 56, 56}, {32, 1, 3, 3}, dw, false);
  EXPECT_EQ(d.output_shapes[0], (Shape{1, 32, 56, 56}));
  EXPECT_DOUBLE_EQ(d.flops, 2.0 * 32 * 56 * 56 * 9);
  EXPECT_CONTAINS(error_of<InvalidArgument>([] {
                    make_conv2d_node("c", {1, 3, 8, 8}, {4, 2, 3, 3});
                  }),
                  "conv2d node 'c'");
}

TEST(GraphCosts, Attention) {
  AttentionDims d;
  d.tq = 2;
  d.tk = 3;
  d.hq = 2;
  d.hkv = 1;
  d.head_dim = 4;
  d.causal = true;
  // Row 0 sees 2 keys, row 1 sees 3: 5 pairs per head, 10 in all; each 2*4 + 2*4 + 5 FLOPs.
  const OpNode c = make_attention_node("att", d);
  EXPECT_DOUBLE_EQ(c.flops, 10.0 * 21);
  EXPECT_EQ(c.output_shapes[0], (Shape{2, 2, 4}));
  EXPECT_DOUBLE_EQ(c.bytes_read, 4.0 * (2 * 2 * 4) + 4.0 * (3 * 1 * 4) * 2);
  EXPECT_DOUBLE_EQ(c.bytes_written, 4.0 * 2 * 2 * 4);
  d.causal = false;
  EXPECT_DOUBLE_EQ(make_attention_node("att", d).flops, 12.0 * 21);
  d.v_head_dim = 8;  // 2*4 + 2*8 + 5 = 29 per pair
  EXPECT_DOUBLE_EQ(make_attention_node("att", d).flops, 12.0 * 29);
  d.hkv = 3;
  EXPECT_THROW(make_attention_node("bad", d), InvalidArgument);
  d.hkv = 1;
  d.causal = true;
  d.tq = 4;
  EXPECT_THROW(make_attention_node("bad", d), InvalidArgument);  // more queries than keys
}

TEST(GraphCosts, ElementwiseNormsSoftmaxPoolingEmbedding) {
  EXPECT_DOUBLE_EQ(make_unary_node("s", "silu", {10, 10}).flops, 400.0);
  EXPECT_DOUBLE_EQ(make_unary_node("g", "gelu", {10}).flops, 90.0);
  EXPECT_DOUBLE_EQ(make_unary_node("r", "relu", {10}).bytes_moved(), 80.0);
  EXPECT_THROW(make_unary_node("x", "tanhh", {10}), InvalidArgument);
  const OpNode add = make_binary_node("a", "add", {4, 8}, {8});
  EXPECT_DOUBLE_EQ(add.flops, 32.0);
  EXPECT_DOUBLE_EQ(add.bytes_read, 4.0 * 40);
  EXPECT_THROW(make_binary_node("a", "add", {4, 8}, {3}), InvalidArgument);
  const OpNode rms = make_norm_node("n", "rms_norm", {3, 16});
  EXPECT_DOUBLE_EQ(rms.flops, 4.0 * 48);
  EXPECT_DOUBLE_EQ(rms.param_bytes, 64.0);
  EXPECT_DOUBLE_EQ(rms.bytes_read, 4.0 * 48 + 64);
  const OpNode ln = make_norm_node("n", "layer_norm", {3, 16});
  EXPECT_DOUBLE_EQ(ln.flops, 7.0 * 48);
  EXPECT_DOUBLE_EQ(ln.param_bytes, 128.0);
  EXPECT_DOUBLE_EQ(make_softmax_node("s", {2, 5}).flops, 50.0);
  const OpNode mp = make_pool2d_node("p", "max_pool", {1, 8, 32, 32}, 2, 2, [] {
    ops::Conv2dParams p;
    p.stride_h = p.stride_w = 2;
    return p;
  }());
  EXPECT_EQ(mp.output_shapes[0], (Shape{1, 8, 16, 16}));
  EXPECT_DOUBLE_EQ(mp.flops, 8.0 * 16 * 16 * 4);
  const OpNode gap = make_pool2d_node("gap", "avg_pool", {2, 4, 7, 7}, 7, 7);
  EXPECT_EQ(gap.output_shapes[0], (Shape{2, 4, 1, 1}));
  EXPECT_DOUBLE_EQ(gap.flops, 8.0 * 49 + 8.0);
  const OpNode emb = make_embedding_node("e", 5, 64, 1000, DType::kQ8_0);
  EXPECT_EQ(emb.flops, 0.0);
  EXPECT_DOUBLE_EQ(emb.param_bytes, 68.0 * 1000);  // 2 blocks of 34 bytes per row
  EXPECT_DOUBLE_EQ(emb.bytes_read, 68.0 * 5 + 4.0 * 5);
  EXPECT_DOUBLE_EQ(emb.bytes_written, 4.0 * 5 * 64);
  EXPECT_EQ(make_input_node("x", {3}).bytes_moved(), 0.0);
}

TEST(GraphCosts, OpKeysRoundTrip) {
  ops::Conv2dParams p;
  p.stride_h = 2;
  p.pad_left = 1;
  p.groups = 2;
  AttentionDims d;
  d.tq = 1;
  d.tk = 512;
  d.hq = 9;
  d.hkv = 3;
  d.head_dim = 64;
  d.kv_dtype = DType::kF16;
  const std::vector<OpNode> nodes = {
      make_gemm_node("a", 128, 576, 576),
      make_gemm_node("b", 1, 1536, 576, {}, DType::kQ4_1),
      make_batched_gemm_node("c", 9, 1, 512, 64),
      make_conv2d_node("d", {1, 4, 9, 9}, {6, 2, 3, 3}, p, false),
      make_attention_node("e", d),
      make_unary_node("f", "gelu_erf", {7, 3}),
      make_binary_node("g", "mul", {4, 6}, {6}),
      make_norm_node("h", "layer_norm", {5, 32}),
      make_softmax_node("i", {3, 9}),
      make_pool2d_node("j", "avg_pool", {1, 3, 8, 8}, 3, 3, p),
      make_embedding_node("k", 7, 32, 100, DType::kQ4_0),
  };
  for (const OpNode& n : nodes) {
    const std::string key = op_key(n);
    const OpNode back = node_from_op_key(key);
    EXPECT_EQ(back.kind, n.kind) << key;
    EXPECT_EQ(back.flops, n.flops) << key;
    EXPECT_EQ(back.bytes_read, n.bytes_read) << key;
    EXPECT_EQ(back.bytes_written, n.bytes_written) << key;
    EXPECT_EQ(back.param_bytes, n.param_bytes) << key;
    EXPECT_EQ(op_key(back), key);
  }
  EXPECT_EQ(op_key(nodes[0]), "gemm:k=576,m=128,n=576,weight=f32");
  EXPECT_EQ(op_key(make_norm_node("n", "rms_norm", {128, 576})), "rms_norm:dim=576,rows=128");
  OpNode bare;
  bare.kind = "custom";
  bare.attrs["scale"] = 0.5;  // floats do not name a measurement
  EXPECT_EQ(op_key(bare), "custom");
}

TEST(GraphCosts, BadOpKeys) {
  EXPECT_CONTAINS(error_of<InvalidArgument>([] { node_from_op_key("warp:x=1"); }),
                  "unknown op kind 'warp'");
  EXPECT_CONTAINS(error_of<InvalidArgument>([] { node_from_op_key("gemm:m=1,n=2"); }),
                  "missing parameter k");
  EXPECT_CONTAINS(error_of<InvalidArgument>([] { node_from_op_key("gemm:m=1,n=2,k=x3"); }),
                  "k='x3' is not an integer");
  EXPECT_CONTAINS(error_of<InvalidArgument>([] { node_from_op_key("gemm:m=1,,k=3"); }),
                  "malformed parameter");
  EXPECT_CONTAINS(
      error_of<InvalidArgument>([] { node_from_op_key("gemm:m=1,n=2,k=32,weight=q9"); }),
      "is not a dtype");
}

}  // namespace
}  // namespace tandem
