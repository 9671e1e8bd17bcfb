// SPDX-License-Identifier: Apache-2.0
// Per-op checks of the executor against plain loops (and the core's reference conv), the memory
// plan, and the region algebra's formulas, dominator cuts and error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "cnn_test_util.h"
#include "common/temp_dir.h"
#include "region_check.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/region.h"
#include "tandem/core/error.h"
#include "tandem/ops/ops.h"

namespace tandem::cnn {
namespace {

using testing::random_tensor;
using testing::scaled_max_error;

// A graph of one node over one input.
Graph single(const Shape& in, Node n, int outputs = 1) {
  Graph g;
  const int x = g.add_tensor("x", in);
  g.add_input(x);
  n.inputs = {x};
  for (int i = 0; i < outputs; ++i) {
    const int y = g.add_tensor(tandem::fixtures::numbered("y", i));
    n.outputs.push_back(y);
    g.add_output(y);
  }
  if (n.name.empty()) n.name = "n";
  g.add_node(std::move(n));
  g.infer_shapes();
  return g;
}

struct ConvCase {
  int c, o, kh, kw, s, d, groups, pt, pl, pb, pr;
  ActKind act;
};

class ConvOp : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvOp, MatchesReferenceConvPlusActivation) {
  const ConvCase k = GetParam();
  Node n;
  n.op = OpKind::kConv;
  n.window = {k.kh, k.kw, k.s, k.s, k.d, k.d, k.pt, k.pl, k.pb, k.pr};
  n.groups = k.groups;
  n.weight = random_tensor({k.o, k.c / k.groups, k.kh, k.kw}, 1, 0.3f);
  n.bias = random_tensor({k.o}, 2);
  n.act = {k.act, 0.1f, 0.0f};
  if (k.act == ActKind::kClip) n.act = {k.act, 0.0f, 0.5f};
  const Graph g = single({2, k.c, 11, 9}, n);
  const Tensor x = random_tensor({2, k.c, 11, 9}, 3);
  Tensor ref = Tensor::empty(g.tensor(g.outputs()[0]).shape, DType::kF32);
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = k.s;
  p.dilation_h = p.dilation_w = k.d;
  p.pad_top = k.pt, p.pad_left = k.pl, p.pad_bottom = k.pb, p.pad_right = k.pr;
  p.groups = k.groups;
  ops::cpu_reference_kernels().conv2d(x, n.weight, n.bias, ref, p, nullptr);
  float* r = ref.data<float>();
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const float v = r[i];
    switch (k.act) {
      case ActKind::kRelu:
        r[i] = std::max(v, 0.0f);
        break;
      case ActKind::kLeakyRelu:
        r[i] = v > 0 ? v : 0.1f * v;
        break;
      case ActKind::kClip:
        r[i] = std::min(std::max(v, 0.0f), 0.5f);
        break;
      case ActKind::kSigmoid:
        r[i] = 1.0f / (1.0f + std::exp(-v));
        break;
      case ActKind::kSilu:
        r[i] = v / (1.0f + std::exp(-v));
        break;
      case ActKind::kNone:
        break;
    }
  }
  for (bool onednn : {true, false}) {
    for (int threads : {1, 2}) {
      Executor ex(g, {.threads = threads, .use_onednn = onednn});
      EXPECT_LE(scaled_max_error(ex.run({x})[0], ref), 2e-5)
          << "onednn " << onednn << " threads " << threads;
    }
  }
  // Row bands of this conv from their input rows alone are the full result's rows, bit for bit.
  EXPECT_EQ(testing::check_random_regions(g, x, 6, 5), 6);
}

INSTANTIATE_TEST_SUITE_P(
    Cnn, ConvOp,
    ::testing::Values(ConvCase{4, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, ActKind::kRelu},
                      ConvCase{4, 6, 3, 3, 2, 1, 1, 0, 1, 2, 0, ActKind::kNone},  // asymmetric
                      ConvCase{6, 6, 3, 3, 1, 2, 6, 2, 2, 2, 2, ActKind::kClip},  // dw, dilated
                      ConvCase{4, 8, 1, 5, 1, 1, 2, 0, 2, 0, 2, ActKind::kLeakyRelu},  // 1x5
                      ConvCase{3, 5, 5, 1, 2, 1, 1, 2, 0, 2, 0, ActKind::kSigmoid},    // 5x1
                      ConvCase{8, 16, 1, 1, 1, 1, 1, 0, 0, 0, 0, ActKind::kSilu},
                      ConvCase{3, 4, 7, 7, 2, 1, 1, 3, 3, 3, 3, ActKind::kRelu}));

// Plain-loop pooling in full coordinates (ONNX semantics incl. ceil mode and count_include_pad).
Tensor naive_pool(const Tensor& x, const Window& w, bool is_max, const Shape& out) {
  Tensor y = Tensor::empty(out, DType::kF32);
  const int64_t H = x.size(2), W = x.size(3);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  for (int64_t p = 0; p < out[0] * out[1]; ++p)
    for (int64_t oy = 0; oy < out[2]; ++oy)
      for (int64_t ox = 0; ox < out[3]; ++ox) {
        double acc = is_max ? -INFINITY : 0.0;
        int cnt = 0;
        for (int ky = 0; ky < w.kh; ++ky)
          for (int kx = 0; kx < w.kw; ++kx) {
            const int64_t iy = oy * w.sh - w.pt + ky * w.dh, ix = ox * w.sw - w.pl + kx * w.dw;
            if (iy >= 0 && iy < H && ix >= 0 && ix < W) {
              const float v = xp[(p * H + iy) * W + ix];
              acc = is_max ? std::max<double>(acc, v) : acc + v;
              ++cnt;
            } else if (w.count_include_pad && iy < H + w.pb && ix < W + w.pr) {
              ++cnt;
            }
          }
        yp[(p * out[2] + oy) * out[3] + ox] = static_cast<float>(is_max ? acc : acc / cnt);
      }
  return y;
}

TEST(CnnOps, PoolsMatchPlainLoops) {
  const Tensor x = random_tensor({1, 3, 10, 9}, 4);
  for (bool is_max : {true, false})
    for (bool ceil : {false, true})
      for (bool include : {false, true}) {
        Node n;
        n.op = is_max ? OpKind::kMaxPool : OpKind::kAveragePool;
        n.window = {3, 3, 2, 2, 1, 1, 1, 0, 1, 0, ceil, include};
        const Graph g = single(x.shape(), n);
        const Shape out = g.tensor(g.outputs()[0]).shape;
        EXPECT_EQ(out[2], ceil ? 6 : 5);
        Executor ex(g);
        EXPECT_LE(scaled_max_error(ex.run({x})[0], naive_pool(x, n.window, is_max, out)), 1e-6)
            << "max " << is_max << " ceil " << ceil << " include_pad " << include;
        EXPECT_EQ(testing::check_random_regions(g, x, 6, 3), 6);
      }
}

TEST(CnnOps, ResizeConcatSplitGlobalPool) {
  const Tensor x = random_tensor({2, 4, 3, 5}, 5);
  Node r;
  r.op = OpKind::kResize;
  r.scale_h = 2;
  r.scale_w = 3;
  const Graph g = single(x.shape(), r);
  const Tensor y = Executor(g).run({x})[0];
  ASSERT_EQ(y.shape(), Shape({2, 4, 6, 15}));
  const float* xp = x.data<float>();
  const float* yp = y.data<float>();
  for (int64_t p = 0; p < 8; ++p)
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 15; ++j)
        ASSERT_EQ(yp[(p * 6 + i) * 15 + j], xp[(p * 3 + i / 2) * 5 + j / 3]);

  Node s;
  s.op = OpKind::kSplit;
  s.split = {1, 3};
  const Graph gs = single(x.shape(), s, 2);
  const auto parts = Executor(gs).run({x});
  EXPECT_TRUE(testing::bit_equal(parts[0], x.slice(1, 0, 1)));
  EXPECT_TRUE(testing::bit_equal(parts[1], x.slice(1, 1, 4)));

  Graph gc;  // concat(split(x)) in swapped order
  const int xi = gc.add_tensor("x", x.shape());
  gc.add_input(xi);
  const int a = gc.add_tensor("a"), b = gc.add_tensor("b"), c = gc.add_tensor("c");
  Node sp = s;
  sp.name = "split";
  sp.inputs = {xi};
  sp.outputs = {a, b};
  gc.add_node(sp);
  Node cat;
  cat.name = "cat";
  cat.op = OpKind::kConcat;
  cat.inputs = {b, a};
  cat.outputs = {c};
  gc.add_node(cat);
  gc.add_output(c);
  gc.infer_shapes();
  const Tensor z = Executor(gc).run({x})[0];
  EXPECT_TRUE(testing::bit_equal(z.slice(1, 0, 3), x.slice(1, 1, 4)));
  EXPECT_TRUE(testing::bit_equal(z.slice(1, 3, 4), x.slice(1, 0, 1)));

  Node gp;
  gp.op = OpKind::kGlobalAveragePool;
  const Tensor m = Executor(single(x.shape(), gp)).run({x})[0];
  for (int64_t p = 0; p < 8; ++p) {
    double sum = 0;
    for (int64_t i = 0; i < 15; ++i) sum += xp[p * 15 + i];
    EXPECT_NEAR(m.data<float>()[p], sum / 15, 1e-5);
  }
}

TEST(CnnOps, GemmAndSoftmax) {
  const Tensor x = random_tensor({3, 7}, 6);
  Node n;
  n.op = OpKind::kGemm;
  n.weight = random_tensor({5, 7}, 7);
  n.bias = random_tensor({5}, 8);
  n.act.kind = ActKind::kRelu;
  const Tensor y = Executor(single(x.shape(), n)).run({x})[0];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      double acc = n.bias.data<float>()[j];
      for (int k = 0; k < 7; ++k)
        acc += static_cast<double>(x.data<float>()[i * 7 + k]) * n.weight.data<float>()[j * 7 + k];
      EXPECT_NEAR(y.data<float>()[i * 5 + j], std::max(acc, 0.0), 1e-5);
    }
  Node s;
  s.op = OpKind::kSoftmax;
  s.axis = -1;
  const Tensor p = Executor(single(x.shape(), s)).run({x})[0];
  for (int i = 0; i < 3; ++i) {
    double sum = 0;
    for (int j = 0; j < 7; ++j) sum += p.data<float>()[i * 7 + j];
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

TEST(CnnOps, AffineOnRank3AndRank4) {
  for (const Shape& s : {Shape{2, 3, 4}, Shape{2, 3, 2, 5}}) {
    Node n;
    n.op = OpKind::kAffine;
    n.weight = random_tensor({3}, 1);
    n.bias = random_tensor({3}, 2);
    const Tensor x = random_tensor(s, 3);
    const Tensor y = Executor(single(s, n)).run({x})[0];
    const int64_t inner = s.numel() / 6;
    for (int64_t i = 0; i < s.numel(); ++i) {
      const int64_t c = (i / inner) % 3;
      EXPECT_FLOAT_EQ(y.data<float>()[i],
                      x.data<float>()[i] * n.weight.data<float>()[c] + n.bias.data<float>()[c]);
    }
  }
}

TEST(CnnOps, BadInputsAreRejected) {
  Node n;
  n.op = OpKind::kActivation;
  n.act.kind = ActKind::kRelu;
  const Graph g = single({1, 2, 3, 3}, n);
  Executor ex(g);
  EXPECT_THROW(ex.run({}), InvalidArgument);
  EXPECT_THROW(ex.run({random_tensor({1, 2, 3, 4}, 1)}), InvalidArgument);
  EXPECT_THROW(Executor(g, {.threads = 0}), InvalidArgument);
  // A tile that does not cover what the node reads.
  EXPECT_THROW(
      ex.run_region({0}, {{g.inputs()[0], Tile{random_tensor({1, 2, 1, 3}, 1), {0, 1, 0, 3}}}},
                    {{g.outputs()[0], Region{0, 2, 0, 3}}}),
      InvalidArgument);
}

// --- region algebra ------------------------------------------------------------------------------

// conv 3x3 s2 p1 -> relu -> (+ skip through 1x1 s2) -> add: a residual block.
Graph residual_block() {
  Graph g;
  const int x = g.add_tensor("x", {1, 2, 16, 12});
  g.add_input(x);
  const int a = g.add_tensor("a"), b = g.add_tensor("b"), c = g.add_tensor("c"),
            y = g.add_tensor("y"), z = g.add_tensor("z");
  Node c1;
  c1.name = "c1";
  c1.op = OpKind::kConv;
  c1.window = {3, 3, 2, 2, 1, 1, 1, 1, 1, 1};
  c1.weight = random_tensor({4, 2, 3, 3}, 1, 0.3f);
  c1.inputs = {x};
  c1.outputs = {a};
  g.add_node(c1);
  Node c2 = c1;
  c2.name = "c2";
  c2.window = {3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  c2.weight = random_tensor({4, 4, 3, 3}, 2, 0.3f);
  c2.inputs = {a};
  c2.outputs = {b};
  g.add_node(c2);
  Node sk = c1;
  sk.name = "skip";
  sk.window = {1, 1, 2, 2, 1, 1, 0, 0, 0, 0};
  sk.weight = random_tensor({4, 2, 1, 1}, 3, 0.3f);
  sk.inputs = {x};
  sk.outputs = {c};
  g.add_node(sk);
  Node add;
  add.name = "add";
  add.op = OpKind::kAdd;
  add.inputs = {b, c};
  add.outputs = {y};
  g.add_node(add);
  Node up;
  up.name = "up";
  up.op = OpKind::kResize;
  up.scale_h = up.scale_w = 2;
  up.inputs = {y};
  up.outputs = {z};
  g.add_node(up);
  g.add_output(z);
  g.infer_shapes();
  return g;
}

TEST(CnnRegion, ConvPoolResizeFormulas) {
  const Graph g = residual_block();
  // c1: k3 s2 p1 on H=16: rows [2,5) of the output read [2*2-1, 4*2-1+2+1) = [3, 10).
  EXPECT_EQ(input_region(g, 0, 0, {2, 5, 0, 6}), (Region{3, 10, 0, 12}));
  // Clamped at the border: output row 0 reads from -1 -> 0 (with one row of real padding).
  EXPECT_EQ(input_region(g, 0, 0, {0, 1, 0, 1}), (Region{0, 2, 0, 2}));
  const EdgePads p = edge_pads(g.node(0).window, g.tensor(0).shape, {0, 1, 5, 6});
  EXPECT_EQ(p.top, 1);
  EXPECT_EQ(p.left, 0);
  EXPECT_EQ(p.right, 0);  // output col 5 reads cols 9..11: all real
  EXPECT_EQ(p.bottom, 0);
  // Nearest x2: output rows [3, 8) come from [1, 4).
  EXPECT_EQ(input_region(g, 4, 0, {3, 8, 0, 12}), (Region{1, 4, 0, 6}));
}

TEST(CnnRegion, RequiredRegionIsTheHullOverConsumers) {
  const Graph g = residual_block();
  const int z = g.outputs()[0];
  const auto need = required_regions(g, all_nodes(g), {{z, Region{6, 10, 0, 12}}});
  const int x = g.inputs()[0];
  // y rows [3,5); b rows [3,5) -> a rows [2,6) -> x rows [3,12) through c1; the skip reads
  // x rows [6,9]; the hull is [3,12).
  EXPECT_EQ(need[g.find_tensor("y")], (Region{3, 5, 0, 6}));
  EXPECT_EQ(need[g.find_tensor("a")], (Region{2, 6, 0, 6}));
  EXPECT_EQ(need[x], (Region{3, 12, 0, 12}));
}

// The engine's own AVX-512 1x1 kernel (forced on every 1x1 conv with TANDEM_CNN_OWN_1X1=all):
// against the reference conv + residual + activation, channel counts off the 16-lane block,
// strides 1 and 2, batch 2, 1 and 2 threads; row bands bit-identical to the whole-image run.
// A graph of the 1x1 conv `n` over an input of shape `xs`, with a second input (the residual, of
// the output's shape) when `residual`.
Graph one_by_one_graph(Node n, const Shape& xs, bool residual) {
  Graph g;
  const int x = g.add_tensor("x", xs);
  g.add_input(x);
  n.inputs = {x};
  if (residual) {
    const int64_t ho = (xs[2] - 1) / n.window.sh + 1, wo = (xs[3] - 1) / n.window.sw + 1;
    const int r = g.add_tensor("r", {xs[0], n.weight.size(0), ho, wo});
    g.add_input(r);
    n.inputs.push_back(r);
  }
  const int y = g.add_tensor("y");
  n.outputs = {y};
  g.add_output(y);
  g.add_node(std::move(n));
  g.infer_shapes();
  return g;
}

TEST(CnnOps, OwnOneByOneConvMatchesReference) {
  struct Case {
    int c, o, h, w, stride;
    ActKind act;
    bool residual;
  };
  ::setenv("TANDEM_CNN_OWN_1X1", "all", 1);
  for (const Case k :
       {Case{40, 24, 9, 7, 1, ActKind::kRelu, false},
        Case{16, 50, 8, 8, 2, ActKind::kLeakyRelu, false},
        Case{33, 17, 6, 5, 1, ActKind::kClip, true}, Case{64, 96, 7, 9, 2, ActKind::kNone, true},
        Case{48, 40, 7, 6, 1, ActKind::kSilu, false},
        Case{20, 33, 5, 8, 2, ActKind::kSigmoid, true}}) {
    Node n;
    n.op = OpKind::kConv;
    n.name = "own";
    n.window = {1, 1, k.stride, k.stride, 1, 1, 0, 0, 0, 0};
    n.weight = random_tensor({k.o, k.c, 1, 1}, 21, 0.3f);
    n.bias = random_tensor({k.o}, 22);
    n.act = {k.act, 0.1f, 0.0f};
    if (k.act == ActKind::kClip) n.act = {k.act, -0.5f, 0.5f};
    const int64_t ho = (k.h - 1) / k.stride + 1, wo = (k.w - 1) / k.stride + 1;
    const Graph g = one_by_one_graph(n, {2, k.c, k.h, k.w}, k.residual);
    const int x = g.inputs()[0], y = g.outputs()[0];
    const Tensor xin = random_tensor({2, k.c, k.h, k.w}, 23);
    const Tensor rin = random_tensor({2, k.o, ho, wo}, 24);
    Tensor ref = Tensor::empty({2, k.o, ho, wo}, DType::kF32);
    ops::Conv2dParams p;
    p.stride_h = p.stride_w = k.stride;
    ops::cpu_reference_kernels().conv2d(xin, n.weight, n.bias, ref, p, nullptr);
    float* rp = ref.data<float>();
    const float* res = rin.data<float>();
    for (int64_t i = 0; i < ref.numel(); ++i) {
      float v = rp[i] + (k.residual ? res[i] : 0.0f);
      if (k.act == ActKind::kRelu) v = std::max(v, 0.0f);
      if (k.act == ActKind::kLeakyRelu) v = v > 0 ? v : 0.1f * v;
      if (k.act == ActKind::kClip) v = std::min(std::max(v, -0.5f), 0.5f);
      if (k.act == ActKind::kSilu) v = v / (1.0f + std::exp(-v));
      if (k.act == ActKind::kSigmoid) v = 1.0f / (1.0f + std::exp(-v));
      rp[i] = v;
    }
    const std::vector<Tensor> inputs =
        k.residual ? std::vector<Tensor>{xin, rin} : std::vector<Tensor>{xin};
    for (int threads : {1, 2}) {
      Executor full(g, {.threads = threads});
      const Tensor got = full.run(inputs)[0];
      EXPECT_LE(scaled_max_error(got, ref), 2e-5)
          << k.c << "->" << k.o << " stride " << k.stride << ", " << threads << " threads";
      if (__builtin_cpu_supports("avx512f"))
        EXPECT_EQ(full.node_impls()[0], "tandem:conv1x1_avx512");
      Executor part(g, {.threads = threads});
      for (int64_t h0 = 0; h0 < ho; ++h0) {
        const Region out{h0, std::min<int64_t>(ho, h0 + 2), 0, wo};
        const std::vector<Region> need = required_regions(g, {0}, {{y, out}});
        std::map<int, Tile> in{{x, {testing::crop_tensor(xin, need[x]), need[x]}}};
        if (k.residual) in[g.inputs()[1]] = {testing::crop_tensor(rin, out), out};
        EXPECT_TRUE(testing::bit_equal(part.run_region({0}, in, {{y, out}}).at(y).data,
                                       testing::crop_tensor(got, out)))
            << "rows " << out.to_string();
      }
    }
  }
  ::unsetenv("TANDEM_CNN_OWN_1X1");
}

// Wide 1x1 convolutions on small maps, where oneDNN's jit_1x1 kernel rounds a row band
// differently from the whole map and the engine switches kernels (the NHWC brgemm kernel or the
// generic blocked one): every row band computed by run_region must equal the same rows of the
// whole-image (blocked) run bit for bit, with and without a fused residual, on 1 and 2 threads.
TEST(CnnRegion, WideOneByOneConvBandsAreBitIdentical) {
  struct Case {
    int c, o, hw, stride;
    bool residual;
  };
  for (const Case k : {Case{1024, 2048, 14, 2, false}, Case{1024, 256, 14, 1, true},
                       Case{256, 512, 28, 2, false}}) {
    Node n;
    n.op = OpKind::kConv;
    n.name = "wide";
    n.window = {1, 1, k.stride, k.stride, 1, 1, 0, 0, 0, 0};
    n.weight = random_tensor({k.o, k.c, 1, 1}, 11, 0.05f);
    n.bias = random_tensor({k.o}, 12);
    n.act = {ActKind::kRelu, 0.0f, 0.0f};
    const int64_t ho = (k.hw - 1) / k.stride + 1;
    const Graph g = one_by_one_graph(n, {1, k.c, k.hw, k.hw}, k.residual);
    const int x = g.inputs()[0], y = g.outputs()[0];
    const Tensor xin = random_tensor({1, k.c, k.hw, k.hw}, 13);
    const Tensor rin = random_tensor({1, k.o, ho, ho}, 14);
    for (int threads : {1, 2}) {
      Executor full(g, {.threads = threads});
      const Tensor want =
          full.run(k.residual ? std::vector<Tensor>{xin, rin} : std::vector<Tensor>{xin})[0];
      Executor part(g, {.threads = threads});
      for (int64_t h0 = 0; h0 < ho; h0 += 3) {
        for (int64_t h1 : {h0 + 1, std::min<int64_t>(ho, h0 + 4), ho}) {
          const Region out{h0, h1, 0, ho};
          const std::vector<Region> need = required_regions(g, {0}, {{y, out}});
          std::map<int, Tile> in{{x, {testing::crop_tensor(xin, need[x]), need[x]}}};
          if (k.residual) in[g.inputs()[1]] = {testing::crop_tensor(rin, out), out};
          const Tensor got = part.run_region({0}, in, {{y, out}}).at(y).data;
          EXPECT_TRUE(testing::bit_equal(got, testing::crop_tensor(want, out)))
              << k.c << "->" << k.o << " @" << k.hw << " stride " << k.stride
              << (k.residual ? " + residual" : "") << ", " << threads << " threads, rows "
              << out.to_string() << " (kernel " << full.node_impls()[0] << ")";
        }
      }
    }
  }
}

// Winograd 3x3 convolutions (two in a chain, ReLU and SiLU, 30x30 and 32x30 maps so the last 4x4
// transform tiles hang over the border): the executor marks them with their output grid, the region
// algebra rounds every region out to it, and any row band or rectangle computed by run_region from
// its required input equals the whole-image run bit for bit, on 1 and 2 threads. Against the direct
// kernel the results differ by rounding only.
TEST(CnnRegion, WinogradTilesAreBitIdentical) {
  auto conv = [](const std::string& name, int c, int o, int seed) {
    Node n;
    n.op = OpKind::kConv;
    n.name = name;
    n.window = {3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
    n.weight = random_tensor({o, c, 3, 3}, seed, 0.1f);
    n.bias = random_tensor({o}, seed + 1);
    n.act = {ActKind::kRelu, 0.0f, 0.0f};
    return n;
  };
  for (const int64_t w : {30, 32}) {
    Graph g;
    const int x = g.add_tensor("x", {1, 32, 30, w});
    g.add_input(x);
    Node a = conv("a", 32, 32, 31), b = conv("b", 32, 48, 33);
    b.act = {ActKind::kSilu, 0.0f, 0.0f};  // no Winograd post-op: applied after the conv
    const int m = g.add_tensor("m"), y = g.add_tensor("y");
    a.inputs = {x};
    a.outputs = {m};
    b.inputs = {m};
    b.outputs = {y};
    g.add_node(a);
    g.add_node(b);
    g.add_output(y);
    g.infer_shapes();
    const Tensor xin = random_tensor({1, 32, 30, w}, 35);
    for (int threads : {1, 2}) {
      Executor full(g, {.threads = threads});
      const Tensor want = full.run({xin})[0];
      Executor direct(g, {.threads = threads, .winograd = false});
      EXPECT_LE(scaled_max_error(direct.run({xin})[0], want), 1e-5);
      if (full.graph().node(0).window.out_grid == 1)
        GTEST_SKIP() << "no Winograd kernel here (" << full.node_impls()[0] << ")";
      EXPECT_EQ(full.graph().node(1).window.out_grid, full.graph().node(0).window.out_grid);
      EXPECT_EQ(g.node(0).window.out_grid, 1);  // the caller's graph is left alone
      Executor part(g, {.threads = threads});
      int checked = 0;
      for (int64_t h0 = 0; h0 < 30; h0 += 3) {
        for (int64_t h1 : {h0 + 1, std::min<int64_t>(30, h0 + 6), int64_t{30}}) {
          for (const Region out : {Region{h0, h1, 0, w}, Region{h0, h1, h0 % 7, w - h0 % 5}}) {
            const std::vector<Region> need = required_regions(part.graph(), {0, 1}, {{y, out}});
            EXPECT_EQ(need[m].h0 % part.graph().node(1).window.out_grid, 0);
            const Tensor got =
                part.run_region({0, 1}, {{x, {testing::crop_tensor(xin, need[x]), need[x]}}},
                                {{y, out}})
                    .at(y)
                    .data;
            EXPECT_TRUE(testing::bit_equal(got, testing::crop_tensor(want, out)))
                << "width " << w << ", " << threads << " threads, region " << out.to_string()
                << " (kernel " << full.node_impls()[0] << ")";
            ++checked;
          }
        }
      }
      EXPECT_GT(checked, 40);
    }
  }
}

// --- channel subsets (run_region with channels)
// ---------------------------------------------------

Tensor channel_slice(const Tensor& t, const Channels& c) {
  return t.slice(1, c.c0, c.c1).contiguous();
}

struct ChannelCase {
  const char* name;
  int c, o, kh, s, d, groups;
  bool residual;
  int64_t hw = 13;    // input map hw x (hw - 2)
  bool exact = true;  // slices bit-identical (else within 1e-5, the reason at the case)
};

// Output channels [c0, c1) of a conv (and a row band of them), computed alone by run_region, equal
// those channels of the whole conv. The slice runs the whole conv's kernel (implementation,
// layout, threads) on views of its weight rows, so each channel is summed in the same order:
// bit-identical (oneDNN's blocked jit kernels, its depthwise kernel and the grouped jit kernel
// keep a channel's sum order whatever the output count), except a slice inside one group of a
// grouped (not depthwise) conv: oneDNN runs a one-group conv with another blocking of the
// group's input-channel sum, so those are checked within 1e-5; and oneDNN's jit_1x1 kernel on a
// wide 1x1 conv (ResNet-50's 256 -> 1024 on 14x14), which blocks the input-channel sum by the
// output-channel count as it does by the map size (conv1x1.h): within 1e-5.
TEST(CnnChannels, ConvChannelSubsetsEqualTheWholeConv) {
  for (const ChannelCase k : {ChannelCase{"3x3", 16, 48, 3, 1, 1, 1, false},
                              ChannelCase{"1x1", 32, 40, 1, 1, 1, 1, false},
                              ChannelCase{"1x1 residual", 24, 36, 1, 1, 1, 1, true},
                              ChannelCase{"3x3 stride 2", 8, 32, 3, 2, 1, 1, false},
                              ChannelCase{"3x3 dilation 2", 16, 24, 3, 1, 2, 1, true},
                              ChannelCase{"depthwise", 24, 24, 3, 1, 1, 24, false},
                              ChannelCase{"depthwise stride 2", 32, 32, 3, 2, 1, 32, false},
                              ChannelCase{"grouped", 16, 32, 3, 1, 1, 4, false},
                              ChannelCase{"1x1 wide", 256, 1024, 1, 1, 1, 1, false, 14, false}}) {
    Node n;
    n.op = OpKind::kConv;
    n.name = k.name;
    const int pad = (k.kh - 1) / 2 * k.d;
    n.window = {k.kh, k.kh, k.s, k.s, k.d, k.d, pad, pad, pad, pad};
    n.groups = k.groups;
    n.weight = random_tensor({k.o, k.c / k.groups, k.kh, k.kh}, 31, 0.3f);
    n.bias = random_tensor({k.o}, 32);
    n.act = {ActKind::kRelu, 0, 0};
    const Shape xs{1, k.c, k.hw, k.hw - 2};
    const Graph g = one_by_one_graph(n, xs, k.residual);
    const int x = g.inputs()[0], y = g.outputs()[0];
    const Shape& ys = g.tensor(y).shape;
    const Tensor xin = random_tensor(xs, 33);
    const Tensor rin = random_tensor(ys, 34);
    const std::vector<Tensor> inputs =
        k.residual ? std::vector<Tensor>{xin, rin} : std::vector<Tensor>{xin};
    for (int threads : {1, 2}) {
      Executor ex(g, {.threads = threads});
      const Tensor whole = ex.run(inputs)[0];
      const int64_t o = k.o;
      for (const Channels c : {Channels{0, 16}, Channels{16, o}, Channels{5, o - 3},
                               Channels{o - 1, o}, Channels{0, o}, Channels{0, o / 4}}) {
        for (const Region out : {full_region(ys), Region{2, ys[2] - 1, 0, ys[3]}}) {
          const std::vector<Region> need = required_regions(g, {0}, {{y, out}});
          std::map<int, Tile> in{{x, {testing::crop_tensor(xin, need[x]), need[x]}}};
          if (k.residual) in[g.inputs()[1]] = {testing::crop_tensor(rin, out), out};
          const Tile got = ex.run_region({0}, in, {{y, out}}, {{y, c}}).at(y);
          EXPECT_EQ(got.channels, c);
          const Tensor want = channel_slice(testing::crop_tensor(whole, out), c);
          const int64_t per_group = o / k.groups;
          if (!k.exact ||
              (k.groups > 1 && k.groups < o && c.c0 / per_group == (c.c1 - 1) / per_group))
            EXPECT_LE(scaled_max_error(got.data, want), 1e-5) << k.name << " " << c.to_string();
          else
            EXPECT_TRUE(testing::bit_equal(got.data, want))
                << k.name << ", channels " << c.to_string() << ", rows " << out.to_string() << ", "
                << threads << " threads (kernel " << ex.node_impls()[0] << ")";
        }
      }
    }
  }
}

// Output features of a fully connected layer (LW's split): the slice runs the same sgemm on the
// weight rows [f0, f1) (a view), each output a dot product over the same inputs.
TEST(CnnChannels, GemmFeatureSubsetsEqualTheWholeGemm) {
  const Tensor x = random_tensor({2, 96}, 41);
  Node n;
  n.op = OpKind::kGemm;
  n.weight = random_tensor({40, 96}, 42, 0.2f);
  n.bias = random_tensor({40}, 43);
  n.act.kind = ActKind::kRelu;
  const Graph g = single(x.shape(), n);
  Executor ex(g);
  const Tensor whole = ex.run({x})[0];
  const int y = g.outputs()[0];
  for (const Channels f : {Channels{0, 13}, Channels{13, 40}, Channels{39, 40}, Channels{7, 31}}) {
    const Tile got = ex.run_region({0}, {{g.inputs()[0], {x, full_region(x.shape())}}},
                                   {{y, full_region(whole.shape())}}, {{y, f}})
                         .at(y);
    ASSERT_EQ(got.data.shape(), (Shape{2, f.size()}));
    EXPECT_LE(scaled_max_error(got.data, channel_slice(whole, f)), 1e-6) << f.to_string();
    EXPECT_TRUE(testing::bit_equal(got.data, channel_slice(whole, f))) << f.to_string();
  }
}

// Channels through a segment: the residual block (conv, conv, 1x1 skip, add, resize) computes
// c1 whole (c2 reads every one of its channels) and only the asked channels of c2, the skip, the
// add and the resize; the result equals the whole run's channels, also for a row band (hybrid).
TEST(CnnChannels, SegmentChannelsEqualTheWholeRun) {
  const Graph g = residual_block();
  const int x = g.inputs()[0], z = g.outputs()[0];
  const Tensor in = random_tensor({1, 2, 16, 12}, 51);
  Executor whole_ex(g);
  const Tensor whole = whole_ex.run({in})[0];
  const std::vector<Channels> need = required_channels(g, all_nodes(g), {{z, {1, 3}}});
  EXPECT_EQ(need[g.find_tensor("a")], (Channels{0, 4}));  // c2 reads every channel of a
  EXPECT_EQ(need[g.find_tensor("b")], (Channels{1, 3}));
  EXPECT_EQ(need[g.find_tensor("c")], (Channels{1, 3}));
  EXPECT_EQ(need[x], (Channels{0, 2}));
  Executor ex(g);
  for (const Channels c : {Channels{0, 1}, Channels{1, 3}, Channels{3, 4}}) {
    for (const Region out : {full_region(whole.shape()), Region{5, 12, 0, 12}}) {
      const Region r = required_regions(g, all_nodes(g), {{z, out}})[x];
      const Tile got =
          ex.run_region(all_nodes(g), {{x, {testing::crop_tensor(in, r), r}}}, {{z, out}}, {{z, c}})
              .at(z);
      EXPECT_TRUE(testing::bit_equal(got.data, channel_slice(testing::crop_tensor(whole, out), c)))
          << c.to_string() << " " << out.to_string();
    }
  }
}

// The channel algebra of concat (each input its part), grouped convs (whole groups) and
// non-channelwise ops (everything), and the errors for channels outside a tensor.
TEST(CnnChannels, ConcatGroupsAndErrors) {
  Graph g;
  const int x = g.add_tensor("x", {1, 8, 6, 6});
  g.add_input(x);
  const int a = g.add_tensor("a"), b = g.add_tensor("b"), y = g.add_tensor("y");
  Node grouped;
  grouped.name = "grouped";
  grouped.op = OpKind::kConv;
  grouped.window = {3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  grouped.groups = 2;
  grouped.weight = random_tensor({12, 4, 3, 3}, 61, 0.3f);
  grouped.inputs = {x};
  grouped.outputs = {a};
  g.add_node(grouped);
  Node pool;
  pool.name = "pool";
  pool.op = OpKind::kMaxPool;
  pool.window = {3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  pool.inputs = {x};
  pool.outputs = {b};
  g.add_node(pool);
  Node cat_node;
  cat_node.name = "concat";
  cat_node.op = OpKind::kConcat;
  cat_node.inputs = {a, b};
  cat_node.outputs = {y};
  g.add_node(cat_node);
  g.add_output(y);
  g.infer_shapes();
  const std::vector<int> nodes = all_nodes(g);
  auto need = required_channels(g, nodes, {{y, {7, 14}}});
  EXPECT_EQ(need[a], (Channels{6, 12}));  // channels 7..11 of a: its second group, whole
  EXPECT_EQ(need[b], (Channels{0, 2}));
  EXPECT_EQ(need[x], (Channels{0, 8}));  // group 2's inputs 4..7 and the pool's 0..1
  need = required_channels(g, nodes, {{y, {12, 15}}});
  EXPECT_TRUE(need[a].empty());  // the conv need not run
  EXPECT_EQ(need[x], (Channels{0, 3}));
  const Tensor in = random_tensor({1, 8, 6, 6}, 62);
  Executor ex(g);
  const Tensor whole = ex.run({in})[0];
  const std::map<int, Tile> inputs{{x, {in, full_region(in.shape())}}};
  const std::map<int, Region> want{{y, full_region(whole.shape())}};
  // [7, 14) and [0, 5) run one group of the conv alone (within 1e-5, see above).
  for (const Channels c : {Channels{7, 14}, Channels{12, 15}, Channels{0, 5}, Channels{3, 20}}) {
    const Tile got = ex.run_region(nodes, inputs, want, {{y, c}}).at(y);
    EXPECT_LE(scaled_max_error(got.data, channel_slice(whole, c)), 1e-5) << c.to_string();
    if (c.c0 < 6 && c.c1 > 6 || c.c0 >= 12)
      EXPECT_TRUE(testing::bit_equal(got.data, channel_slice(whole, c))) << c.to_string();
  }
  // Input tiles may hold a channel range, when it covers what the nodes read.
  const Tile part =
      ex.run_region(nodes,
                    {{x, {channel_slice(in, {0, 3}), full_region(in.shape()), Channels{0, 3}}}},
                    want, {{y, {12, 15}}})
          .at(y);
  EXPECT_TRUE(testing::bit_equal(part.data, channel_slice(whole, {12, 15})));
  EXPECT_THROW(
      ex.run_region(nodes,
                    {{x, {channel_slice(in, {0, 3}), full_region(in.shape()), Channels{0, 3}}}},
                    want, {{y, {7, 14}}}),
      InvalidArgument);
  EXPECT_THROW(ex.run_region(nodes, inputs, want, {{y, {18, 21}}}), InvalidArgument);
  EXPECT_THROW(ex.run_region(nodes, inputs, want, {{y, {4, 4}}}), InvalidArgument);
  EXPECT_THROW(ex.run_region(nodes, inputs, want, {{a, {0, 4}}}), InvalidArgument);
}

TEST(CnnRegion, CutTensorsAreTheDominators) {
  const Graph g = residual_block();
  const auto cuts = cut_tensors(g);
  std::vector<std::string> names;
  for (int t : cuts) names.push_back(g.tensor(t).name);
  // a, b and c are bypassed by the other branch; x, y and z are on every path.
  EXPECT_EQ(names, (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(nodes_between(g, g.find_tensor("x"), g.find_tensor("y")),
            (std::vector<int>{0, 1, 2, 3}));
  EXPECT_THROW(nodes_between(g, g.find_tensor("a"), g.find_tensor("y")), InvalidArgument);
  const Tensor in = random_tensor({1, 2, 16, 12}, 9);
  EXPECT_EQ(testing::check_random_regions(g, in, 40, 1), 40);
}

}  // namespace
}  // namespace tandem::cnn
