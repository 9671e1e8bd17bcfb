// SPDX-License-Identifier: Apache-2.0
// Cost models: roofline on hand-computed cases, profiled-table lookup and interpolation, error
// reports.
#include "tandem/core/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tandem/core/error.h"

namespace tandem {
namespace {

DeviceProfile device(double peak_flops, double bandwidth) {
  DeviceProfile d;
  d.name = "dev";
  d.peak_flops = peak_flops;
  d.mem_bandwidth_bytes_per_s = bandwidth;
  d.mem_bytes = 1e9;
  return d;
}

TEST(Roofline, ComputeBoundGemm) {
  const DeviceProfile d = device(1e12, 1e11);
  const OpNode g = make_gemm_node("g", 1024, 1024, 1024);
  // 2 * 1024^3 FLOPs at 1 TFLOP/s; 12 MiB at 100 GB/s is faster.
  const double compute_s = 2.0 * 1024 * 1024 * 1024 / 1e12;
  ASSERT_GT(compute_s, 3.0 * 4 * 1024 * 1024 / 1e11);
  RooflineCostModel m;
  EXPECT_DOUBLE_EQ(m.predict_op_s(g, d), compute_s);
}

TEST(Roofline, MemoryBoundElementwise) {
  const DeviceProfile d = device(1e12, 1e11);
  const OpNode s = make_unary_node("s", "silu", {1000, 1000});
  // 4e6 FLOPs take 4 us; 8e6 bytes at 100 GB/s take 80 us.
  RooflineCostModel m;
  EXPECT_DOUBLE_EQ(m.predict_op_s(s, d), 8e6 / 1e11);
  // Decode GEMV with q4_1 weights: 1 x 576 x 576, bytes = 4*576 + 360*576 + 4*576.
  const OpNode v = make_gemm_node("v", 1, 576, 576, {}, DType::kQ4_1);
  EXPECT_DOUBLE_EQ(m.predict_op_s(v, d), (4.0 * 576 + 360.0 * 576 + 4.0 * 576) / 1e11);
}

TEST(Roofline, EfficiencyAndLaunchOverhead) {
  const DeviceProfile d = device(1e12, 1e11);
  RooflineOptions o;
  o.launch_overhead_s = 1e-5;
  o.efficiency["gemm"] = 0.5;
  o.default_efficiency = 0.8;
  RooflineCostModel m(o);
  const OpNode g = make_gemm_node("g", 1024, 1024, 1024);
  EXPECT_DOUBLE_EQ(m.predict_op_s(g, d), 2.0 * 1024 * 1024 * 1024 / 1e12 / 0.5 + 1e-5);
  const OpNode s = make_unary_node("s", "relu", {1000});
  EXPECT_DOUBLE_EQ(m.predict_op_s(s, d), 8000.0 / 1e11 / 0.8 + 1e-5);
  EXPECT_DOUBLE_EQ(m.efficiency("softmax"), 0.8);
  // Inputs cost nothing, not even the launch overhead.
  EXPECT_EQ(m.predict_op_s(make_input_node("x", {4}), d), 0.0);
}

TEST(Roofline, RejectsBadOptionsAndDevices) {
  RooflineOptions o;
  o.efficiency["gemm"] = 0;
  EXPECT_THROW(RooflineCostModel{o}, InvalidArgument);
  o = {};
  o.default_efficiency = NAN;
  EXPECT_THROW(RooflineCostModel{o}, InvalidArgument);
  o = {};
  o.launch_overhead_s = -1;
  EXPECT_THROW(RooflineCostModel{o}, InvalidArgument);
  RooflineCostModel m;
  const OpNode g = make_gemm_node("g", 4, 4, 4);
  EXPECT_THROW(m.predict_op_s(g, device(0, 1e9)), InvalidArgument);
  EXPECT_THROW(m.predict_op_s(g, device(1e9, 0)), InvalidArgument);
}

TEST(CostModel, TransferAndGraph) {
  RooflineCostModel m;
  LinkProfile l;
  l.from = "a";
  l.to = "b";
  l.bandwidth_bytes_per_s = 1e8;
  l.latency_s = 0.002;
  EXPECT_DOUBLE_EQ(m.predict_transfer_s(5e7, l), 0.502);
  EXPECT_DOUBLE_EQ(m.predict_transfer_s(0, l), 0.002);
  EXPECT_THROW(m.predict_transfer_s(-1, l), InvalidArgument);
  l.bandwidth_bytes_per_s = 0;
  EXPECT_THROW(m.predict_transfer_s(1, l), InvalidArgument);

  const DeviceProfile d = device(1e12, 1e11);
  Graph g;
  int x = g.add_node(make_input_node("x", {128, 576}));
  int h = g.add_node(make_gemm_node("up", 128, 1536, 576, {x}));
  g.add_node(make_unary_node("act", "silu", {128, 1536}, {h}));
  const double expect = m.predict_op_s(g.node(1), d) + m.predict_op_s(g.node(2), d);
  EXPECT_DOUBLE_EQ(m.predict_graph_s(g, d), expect);
  g.add_edge(2, 1);  // a cycle
  EXPECT_THROW(m.predict_graph_s(g, d), InvalidArgument);
}

// A table with two f32 GEMM entries 1x576x576 and 128x576x576.
DeviceProfile profiled_device() {
  DeviceProfile d = device(1e12, 1e11);
  d.op_latency_s[op_key(make_gemm_node("a", 1, 576, 576))] = 1e-5;
  d.op_latency_s[op_key(make_gemm_node("b", 128, 576, 576))] = 1e-3;
  return d;
}

TEST(Profiled, ExactHit) {
  const DeviceProfile d = profiled_device();
  ProfiledCostModel m;
  const auto p = m.predict(make_gemm_node("q", 128, 576, 576), d);
  EXPECT_EQ(p.source, ProfiledCostModel::Source::kExact);
  EXPECT_DOUBLE_EQ(p.seconds, 1e-3);
  EXPECT_STREQ(to_string(p.source), "exact");
}

TEST(Profiled, InterpolatesInFlops) {
  const DeviceProfile d = profiled_device();
  ProfiledCostModel m;
  // FLOPs grow linearly with m, so m = 64 sits (64 - 1) / (128 - 1) of the way between the entries.
  const auto p = m.predict(make_gemm_node("q", 64, 576, 576), d);
  EXPECT_EQ(p.source, ProfiledCostModel::Source::kInterpolated);
  EXPECT_NEAR(p.seconds, 1e-5 + (1e-3 - 1e-5) * 63.0 / 127.0, 1e-15);
  // Different shape, same FLOPs as an entry (m and n swapped): that entry's time.
  const auto q = m.predict(make_gemm_node("t", 576, 1, 576), d);
  EXPECT_EQ(q.source, ProfiledCostModel::Source::kInterpolated);
  EXPECT_DOUBLE_EQ(q.seconds, 1e-5);
}

TEST(Profiled, AveragesEntriesWithEqualFlops) {
  DeviceProfile d = profiled_device();
  d.op_latency_s[op_key(make_gemm_node("c", 576, 1, 576))] = 3e-5;  // same FLOPs as 1x576x576
  ProfiledCostModel m;
  const auto p = m.predict(make_gemm_node("q", 1, 1, 576 * 576), d);
  EXPECT_EQ(p.source, ProfiledCostModel::Source::kInterpolated);
  EXPECT_DOUBLE_EQ(p.seconds, 2e-5);
}

TEST(Profiled, FallsBackToRoofline) {
  const DeviceProfile d = profiled_device();
  RooflineOptions o;
  o.launch_overhead_s = 1e-6;
  ProfiledCostModel m(o);
  const RooflineCostModel r(o);
  // Outside the measured range.
  const OpNode big = make_gemm_node("big", 1024, 576, 576);
  auto p = m.predict(big, d);
  EXPECT_EQ(p.source, ProfiledCostModel::Source::kRoofline);
  EXPECT_DOUBLE_EQ(p.seconds, r.predict_op_s(big, d));
  // Same kind, other weight dtype: not comparable.
  const OpNode q4 = make_gemm_node("q4", 64, 576, 576, {}, DType::kQ4_1);
  EXPECT_EQ(m.predict(q4, d).source, ProfiledCostModel::Source::kRoofline);
  // No entries of the kind.
  const OpNode s = make_softmax_node("s", {128, 512});
  EXPECT_EQ(m.predict(s, d).source, ProfiledCostModel::Source::kRoofline);
  EXPECT_DOUBLE_EQ(m.predict_op_s(s, d), r.predict_op_s(s, d));
  // Nothing to do.
  EXPECT_EQ(m.predict(make_input_node("x", {3}), d).source, ProfiledCostModel::Source::kNoCost);
}

TEST(Profiled, SkipsMalformedAndForeignEntries) {
  DeviceProfile d = profiled_device();
  d.op_latency_s["gemm:m=oops"] = 5.0;                  // unparseable: ignored
  d.op_latency_s["gemm_fused:m=64,n=576,k=576"] = 5.0;  // another kind
  ProfiledCostModel m;
  const auto p = m.predict(make_gemm_node("q", 64, 576, 576), d);
  EXPECT_EQ(p.source, ProfiledCostModel::Source::kInterpolated);
  EXPECT_LT(p.seconds, 1e-3);
  EXPECT_EQ(table_samples(d).size(), 2u);
}

TEST(Profiled, InterpolatesAttentionAndNorms) {
  DeviceProfile d = device(1e12, 1e11);
  AttentionDims a;
  a.hq = 9;
  a.hkv = 3;
  a.head_dim = 64;
  a.tq = 1;
  a.tk = 128;
  d.op_latency_s[op_key(make_attention_node("a", a))] = 2e-5;
  a.tk = 512;
  d.op_latency_s[op_key(make_attention_node("a", a))] = 8e-5;
  d.op_latency_s[op_key(make_norm_node("n", "rms_norm", {1, 576}))] = 1e-6;
  d.op_latency_s[op_key(make_norm_node("n", "rms_norm", {128, 576}))] = 1.28e-4;
  ProfiledCostModel m;
  a.tk = 320;  // decode: FLOPs linear in tk, halfway
  const auto p = m.predict(make_attention_node("q", a), d);
  EXPECT_EQ(p.source, ProfiledCostModel::Source::kInterpolated);
  EXPECT_NEAR(p.seconds, 5e-5, 1e-15);
  a.causal = false;  // a different class
  EXPECT_EQ(m.predict(make_attention_node("q", a), d).source, ProfiledCostModel::Source::kRoofline);
  const auto n = m.predict(make_norm_node("n", "rms_norm", {64, 576}), d);
  EXPECT_EQ(n.source, ProfiledCostModel::Source::kInterpolated);
  EXPECT_NEAR(n.seconds, 1e-6 + (1.28e-4 - 1e-6) * 63.0 / 127.0, 1e-15);
}

TEST(PredictionError, HandComputed) {
  const PredictionError e = relative_error({1, 2, 3}, {1, 1, 4}, {"a", "b", "c"});
  EXPECT_EQ(e.count, 3);
  EXPECT_DOUBLE_EQ(e.mean_abs_rel_error, (0.0 + 1.0 + 0.25) / 3);
  EXPECT_DOUBLE_EQ(e.max_abs_rel_error, 1.0);
  EXPECT_EQ(e.worst, "b");
  EXPECT_EQ(relative_error({}, {}).count, 0);
  EXPECT_THROW(relative_error({1}, {0}), InvalidArgument);
  EXPECT_THROW(relative_error({1, 2}, {1}), InvalidArgument);
  EXPECT_THROW(relative_error({-1}, {1}), InvalidArgument);
}

TEST(PredictionError, ModelsAgainstTables) {
  const DeviceProfile d = profiled_device();
  const std::vector<MeasuredOp> samples = table_samples(d);
  ASSERT_EQ(samples.size(), 2u);
  // The profiled model reproduces its own table exactly.
  const PredictionError exact = prediction_error(ProfiledCostModel(), d, samples);
  EXPECT_EQ(exact.count, 2);
  EXPECT_EQ(exact.max_abs_rel_error, 0.0);
  // The roofline: 1x576x576 is memory bound (1331712 bytes / 1e11), 128x576x576 compute bound.
  const PredictionError roof = prediction_error(RooflineCostModel(), d, samples);
  const double p0 = (4.0 * 576 + 4.0 * 576 * 576 + 4.0 * 576) / 1e11;
  const double p1 = 2.0 * 128 * 576 * 576 / 1e12;
  const double e0 = std::abs(p0 - 1e-5) / 1e-5, e1 = std::abs(p1 - 1e-3) / 1e-3;
  EXPECT_NEAR(roof.mean_abs_rel_error, (e0 + e1) / 2, 1e-12);
  EXPECT_NEAR(roof.max_abs_rel_error, std::max(e0, e1), 1e-12);
}

}  // namespace
}  // namespace tandem
