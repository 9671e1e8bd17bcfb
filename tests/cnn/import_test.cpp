// SPDX-License-Identifier: Apache-2.0
// The ONNX importer on models built here with the ONNX protobuf schema: initializer encodings,
// attributes, fusion, and clear errors for malformed or unsupported input.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>

#include "cnn_test_util.h"
#include "common/temp_dir.h"
#include "region_check.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/onnx_import.h"
#include "tandem/core/error.h"

namespace tandem::cnn {
namespace {

// A small ModelProto builder.
struct ModelBuilder {
  onnx::ModelProto m;
  onnx::GraphProto* g;
  explicit ModelBuilder(int opset = 13) {
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    g = m.mutable_graph();
    g->set_name("test");
  }
  void input(const std::string& name, std::vector<int64_t> dims, bool symbolic_batch = false) {
    auto* v = g->add_input();
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (size_t i = 0; i < dims.size(); ++i) {
      auto* d = tt->mutable_shape()->add_dim();
      if (i == 0 && symbolic_batch)
        d->set_dim_param("N");
      else
        d->set_dim_value(dims[i]);
    }
  }
  void output(const std::string& name) { g->add_output()->set_name(name); }
  onnx::TensorProto* init(const std::string& name, std::vector<int64_t> dims,
                          const std::vector<float>& v, bool raw = false) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    if (raw)
      t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
    else
      for (float f : v) t->add_float_data(f);
    return t;
  }
  void init_ints(const std::string& name, const std::vector<int64_t>& v) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t x : v) t->add_int64_data(x);
  }
  onnx::NodeProto* node(const std::string& op, std::vector<std::string> in,
                        std::vector<std::string> out, const std::string& name = "") {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + out[0] : name);
    for (auto& s : in) n->add_input(s);
    for (auto& s : out) n->add_output(s);
    return n;
  }
  static void ints(onnx::NodeProto* n, const std::string& name, std::vector<int64_t> v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void i(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void f(onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  Graph import(const ImportOptions& o = {}) const {
    const std::string bytes = m.SerializeAsString();
    return import_onnx_bytes(bytes.data(), bytes.size(), "test.onnx", o);
  }
};

std::vector<float> iota(size_t n, float scale = 0.1f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 7) % 11) - 0.5f;
  return v;
}

// Conv -> BN -> Relu, the weights as raw_data and the BN parameters as float_data.
ModelBuilder conv_bn_relu(bool raw) {
  ModelBuilder b;
  b.input("x", {1, 2, 5, 6});
  b.init("w", {3, 2, 3, 3}, iota(54), raw);
  b.init("b", {3}, {0.1f, -0.2f, 0.3f}, raw);
  b.init("s", {3}, {1.5f, 0.5f, 2.0f});
  b.init("sh", {3}, {0.0f, 0.1f, -0.1f});
  b.init("mu", {3}, {0.2f, -0.3f, 0.0f});
  b.init("var", {3}, {1.0f, 0.25f, 4.0f});
  auto* c = b.node("Conv", {"x", "w", "b"}, {"c"});
  ModelBuilder::ints(c, "pads", {1, 0, 1, 2});  // asymmetric
  auto* bn = b.node("BatchNormalization", {"c", "s", "sh", "mu", "var"}, {"n"});
  ModelBuilder::f(bn, "epsilon", 1e-5f);
  b.node("Relu", {"n"}, {"y"});
  b.output("y");
  return b;
}

TEST(CnnImport, FoldsBatchNormAndFusesRelu) {
  const Graph g = conv_bn_relu(true).import();
  ASSERT_EQ(g.nodes().size(), 1u);
  const Node& n = g.node(0);
  EXPECT_EQ(n.op, OpKind::kConv);
  EXPECT_EQ(n.act.kind, ActKind::kRelu);
  EXPECT_EQ(n.window.pt, 1);
  EXPECT_EQ(n.window.pr, 2);
  EXPECT_EQ(g.tensor(g.outputs()[0]).shape, Shape({1, 3, 5, 6}));  // 5+2-2, 6+2-2
  // Folded weight of channel 1: w * 0.5 / sqrt(0.25 + 1e-5).
  const float s1 = 0.5f / std::sqrt(0.25f + 1e-5f);
  EXPECT_NEAR(n.weight.data<float>()[18], iota(54)[18] * s1, 1e-6);
  EXPECT_NEAR(n.bias.data<float>()[1], (-0.2f - -0.3f) * s1 + 0.1f, 1e-6);
  EXPECT_EQ(g.total_flops(), 2 * 3 * 5 * 6 * 2 * 9);
}

TEST(CnnImport, RawAndTypedInitializersAgreeAndFusionKeepsResults) {
  const Graph raw = conv_bn_relu(true).import();
  const Graph typed = conv_bn_relu(false).import();
  const Graph plain = conv_bn_relu(true).import({.fuse = false});
  EXPECT_EQ(plain.nodes().size(), 3u);
  const Tensor x = testing::random_tensor({1, 2, 5, 6}, 3);
  Executor a(raw), b(typed), c(plain);
  const Tensor ya = a.run({x})[0], yb = b.run({x})[0], yc = c.run({x})[0];
  EXPECT_TRUE(testing::bit_equal(ya, yb));
  EXPECT_LE(testing::scaled_max_error(ya, yc), 1e-5);
}

TEST(CnnImport, SymbolicBatchTakesTheOption) {
  ModelBuilder b;
  b.input("x", {0, 4}, /*symbolic_batch=*/true);
  b.init("w", {4, 3}, iota(12));
  b.node("MatMul", {"x", "w"}, {"y"});
  b.output("y");
  const Graph g = b.import({.batch = 3});
  EXPECT_EQ(g.tensor(g.outputs()[0]).shape, Shape({3, 3}));
  EXPECT_EQ(g.node(0).weight.shape(), Shape({3, 4}));  // stored transposed [F, K]
}

TEST(CnnImport, ReshapeResolvesZeroAndMinusOne) {
  ModelBuilder b;
  b.input("x", {2, 3, 4, 4});
  b.init_ints("shape", {0, -1});
  b.node("Reshape", {"x", "shape"}, {"y"});
  b.output("y");
  const Graph g = b.import();
  EXPECT_EQ(g.tensor(g.outputs()[0]).shape, Shape({2, 48}));
}

TEST(CnnImport, SameUpperPadding) {
  ModelBuilder b;
  b.input("x", {1, 1, 7, 8});
  b.init("w", {1, 1, 4, 3}, iota(12));
  auto* c = b.node("Conv", {"x", "w"}, {"y"});
  ModelBuilder::ints(c, "strides", {2, 2});
  auto* a = c->add_attribute();
  a->set_name("auto_pad");
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s("SAME_UPPER");
  b.output("y");
  const Graph g = b.import();
  EXPECT_EQ(g.tensor(g.outputs()[0]).shape, Shape({1, 1, 4, 4}));
  const Window& w = g.node(0).window;
  EXPECT_EQ(w.pt + w.pb, 3);  // (4-1)*2 + 4 - 7
  EXPECT_EQ(w.pb, 2);         // the odd one at the end
}

void expect_error_mentions(const ModelBuilder& b, const std::string& what) {
  try {
    b.import();
    FAIL() << "no error; expected one mentioning " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(CnnImport, UnknownOpNamesTheNode) {
  ModelBuilder b;
  b.input("x", {1, 2, 4, 4});
  b.node("LpNormalization", {"x"}, {"y"}, "my_norm_layer");
  b.output("y");
  EXPECT_THROW(b.import(), Unsupported);
  expect_error_mentions(b, "my_norm_layer");
  expect_error_mentions(b, "LpNormalization");
}

TEST(CnnImport, DanglingInputAndCycleAreParseErrors) {
  ModelBuilder b;
  b.input("x", {1, 2, 4, 4});
  b.node("Relu", {"nowhere"}, {"y"}, "lost");
  b.output("y");
  EXPECT_THROW(b.import(), ParseError);
  expect_error_mentions(b, "lost");

  ModelBuilder c;
  c.input("x", {1, 2, 4, 4});
  c.node("Add", {"x", "b"}, {"a"}, "first");
  c.node("Relu", {"a"}, {"b"}, "second");
  c.output("b");
  EXPECT_THROW(c.import(), ParseError);
  expect_error_mentions(c, "cycle");
}

TEST(CnnImport, InitializerSizeMismatchNamesTheTensor) {
  ModelBuilder b = conv_bn_relu(true);
  b.g->mutable_initializer(0)->mutable_raw_data()->resize(10);
  EXPECT_THROW(b.import(), ParseError);
  expect_error_mentions(b, "'w'");
  ModelBuilder c = conv_bn_relu(false);
  c.g->mutable_initializer(0)->add_dims(2);  // dims no longer match float_data
  expect_error_mentions(c, "'w'");
}

TEST(CnnImport, ShapeMismatchNamesTheNode) {
  ModelBuilder b;
  b.input("x", {1, 3, 4, 4});
  b.init("w", {2, 2, 3, 3}, iota(36));  // expects 2 input channels
  b.node("Conv", {"x", "w"}, {"y"}, "bad_conv");
  b.output("y");
  EXPECT_THROW(b.import(), ParseError);
  expect_error_mentions(b, "bad_conv");
}

TEST(CnnImport, GarbageIsAParseError) {
  const std::string junk = "\x08\x96\x01\x12\x07testing\xff\xff\xff garbage";
  EXPECT_THROW(import_onnx_bytes(junk.data(), junk.size()), ParseError);
  EXPECT_THROW(import_onnx_bytes("", 0), ParseError);  // empty: no graph
  EXPECT_THROW(import_onnx("/nonexistent/model.onnx"), NotFound);
}

TEST(CnnImport, ExternalDataIsReadBesideTheModel) {
  const tandem::fixtures::TempDir scratch("cnn-external");
  const std::filesystem::path dir = scratch.path();
  ModelBuilder b;
  b.input("x", {1, 4});
  auto* w = b.g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(4);
  w->add_dims(2);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto kv = [&](const char* k, const std::string& v) {
    auto* e = w->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  kv("location", "weights.bin");
  kv("offset", "16");
  kv("length", "32");
  b.node("MatMul", {"x", "w"}, {"y"});
  b.output("y");
  const std::vector<float> data = {9, 9, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8};
  std::ofstream(dir / "weights.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(data.data()), 48);
  std::ofstream(dir / "m.onnx", std::ios::binary) << b.m.SerializeAsString();
  const Graph g = import_onnx((dir / "m.onnx").string());
  Executor ex(g);
  const Tensor y =
      ex.run({Tensor::from_vector(std::vector<float>{1, 0, 0, 1}, {1, 4}, DType::kF32)})[0];
  EXPECT_EQ(y.to_float_vector(), (std::vector<float>{1 + 7, 2 + 8}));
  // From memory there is no directory to read it from; a path outside the model's is refused.
  const std::string bytes = b.m.SerializeAsString();
  EXPECT_THROW(import_onnx_bytes(bytes.data(), bytes.size()), ParseError);
  w->mutable_external_data(0)->set_value("../weights.bin");
  std::ofstream(dir / "m2.onnx", std::ios::binary) << b.m.SerializeAsString();
  EXPECT_THROW(import_onnx((dir / "m2.onnx").string()), ParseError);
  w->mutable_external_data(0)->set_value("weights.bin");
  w->mutable_external_data(1)->set_value("40");  // runs past the end
  std::ofstream(dir / "m3.onnx", std::ios::binary) << b.m.SerializeAsString();
  EXPECT_THROW(import_onnx((dir / "m3.onnx").string()), ParseError);
  // "." (the model's directory) used to fail with no reason.
  w->mutable_external_data(0)->set_value(".");
  w->mutable_external_data(1)->set_value("16");
  std::ofstream(dir / "m4.onnx", std::ios::binary) << b.m.SerializeAsString();
  try {
    import_onnx((dir / "m4.onnx").string());
    ADD_FAILURE() << "a directory was read as external data";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
  }
}

// What ONNX Runtime refuses is refused here too (issue 24).
TEST(CnnImport, OpsetsPoolPadsAndRepeatedOutputsAreChecked) {
  auto pool = [](int opset, int64_t pad, bool twice) {
    ModelBuilder b(opset);
    b.input("x", {1, 1, 6, 6});
    auto* p = b.node("AveragePool", {"x"}, {"y"});
    ModelBuilder::ints(p, "kernel_shape", {2, 2});
    ModelBuilder::ints(p, "pads", {pad, pad, pad, pad});
    b.output("y");
    if (twice) b.output("y");
    return b;
  };
  EXPECT_NO_THROW(pool(13, 1, false).import());
  // AveragePool means the same at opset 1 (ONNX Runtime runs it too); a future opset does not.
  EXPECT_NO_THROW(pool(1, 1, false).import());
  for (int opset : {23, 99999, -1}) {
    try {
      pool(opset, 1, false).import();
      ADD_FAILURE() << "opset " << opset << " was accepted";
    } catch (const Unsupported& e) {
      EXPECT_NE(std::string(e.what()).find("opset " + std::to_string(opset)), std::string::npos)
          << e.what();
    }
  }
  // Add broadcast only by attribute before opset 7: refused there, read from 7 on.
  auto add = [](int opset) {
    ModelBuilder b(opset);
    b.input("x", {1, 2, 2, 2});
    b.init("c", {2, 1, 1}, {1, 2});
    b.node("Add", {"x", "c"}, {"y"});
    b.output("y");
    return b;
  };
  EXPECT_NO_THROW(add(7).import());
  try {
    add(1).import();
    ADD_FAILURE() << "Add at opset 1 was accepted";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("(Add): opset 1: this op's definition before opset 7"),
              std::string::npos)
        << e.what();
  }
  try {
    pool(13, 2, false).import();
    ADD_FAILURE() << "pads >= kernel were accepted";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("must be smaller than the kernel 2x2"), std::string::npos)
        << e.what();
  }
  try {
    pool(13, 0, true).import();
    ADD_FAILURE() << "a repeated graph output was accepted";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("graph output 'y' is listed twice"), std::string::npos)
        << e.what();
  }
}

// A tiny file may declare a huge batch: the memory a run needs is estimated at import and a model
// that cannot fit is refused, naming the tensor and the bytes.
TEST(CnnImport, AModelThatCannotFitInMemoryIsRefusedAtImport) {
  ModelBuilder b;
  b.input("x", {1, 2, 5, 6}, /*symbolic_batch=*/true);
  b.init("w", {3, 2, 3, 3}, iota(54));
  b.node("Conv", {"x", "w"}, {"y"});
  b.output("y");
  EXPECT_NO_THROW(b.import({.batch = 4}));
  try {
    b.import({.batch = int64_t{1} << 23, .max_memory_bytes = int64_t{1} << 30});  // ~3 GiB
    ADD_FAILURE() << "a model needing gigabytes was accepted under a 1 GiB cap";
  } catch (const Infeasible& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("test.onnx: node 'Conv_y' needs"), std::string::npos) << m;
    EXPECT_NE(m.find("output 'y'"), std::string::npos) << m;
    EXPECT_NE(m.find("at most 1073741824 bytes"), std::string::npos) << m;
  }
}

TEST(CnnImport, SiluPatternAndClipFuseIntoConv) {
  ModelBuilder b;
  b.input("x", {1, 2, 4, 4});
  b.init("w", {2, 2, 1, 1}, iota(4));
  b.init("w2", {2, 2, 1, 1}, iota(4, 0.3f));
  b.init("lo", {}, {0.0f});
  b.init("hi", {}, {6.0f});
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Sigmoid", {"c"}, {"s"});
  b.node("Mul", {"c", "s"}, {"m"});
  b.node("Conv", {"m", "w2"}, {"c2"});
  b.node("Clip", {"c2", "lo", "hi"}, {"y"});
  b.output("y");
  const Graph g = b.import();
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.node(0).act.kind, ActKind::kSilu);
  EXPECT_EQ(g.node(1).act.kind, ActKind::kClip);
  EXPECT_EQ(g.node(1).act.beta, 6.0f);
}

TEST(CnnImport, ResidualAddAndReluFuseIntoTheConv) {
  ModelBuilder b;
  b.input("x", {1, 3, 6, 5});
  b.init("w", {3, 3, 3, 3}, iota(81, 0.05f));
  b.init("w0", {3, 3, 1, 1}, iota(9, 0.2f));
  b.node("Conv", {"x", "w0"}, {"s"});  // the residual, computed before the conv
  auto* c = b.node("Conv", {"s", "w"}, {"c"});
  ModelBuilder::ints(c, "pads", {1, 1, 1, 1});
  b.node("Add", {"s", "c"}, {"a"});
  b.node("Relu", {"a"}, {"y"});
  b.output("y");
  const Graph g = b.import();
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.node(1).inputs.size(), 2u);
  EXPECT_EQ(g.node(1).act.kind, ActKind::kRelu);
  const Graph plain = b.import({.fuse = false});
  const Tensor x = testing::random_tensor({1, 3, 6, 5}, 4);
  const Tensor ref = Executor(plain).run({x})[0];
  for (bool onednn : {true, false}) {
    Executor ex(g, {.use_onednn = onednn});
    EXPECT_LE(testing::scaled_max_error(ex.run({x})[0], ref), 1e-5) << "onednn " << onednn;
  }
  EXPECT_EQ(testing::check_random_regions(g, x, 20, 3), 20);
}

}  // namespace
}  // namespace tandem::cnn
