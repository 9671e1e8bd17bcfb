// SPDX-License-Identifier: Apache-2.0
// Per-operator checks against the ONNX project's own node tests (Debian libonnx-testdata:
// /usr/share/libonnx-testdata/data/node/<test>/model.onnx + test_data_set_0/{input,output}_N.pb).
// The engine takes weights as constants, so every input after the first becomes an initializer
// holding the test's data before import. Skipped (with the package to install) when the data is
// absent.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>

#include "cnn_test_util.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/onnx_import.h"

namespace tandem::cnn {
namespace {

const std::filesystem::path kRoot = "/usr/share/libonnx-testdata/data/node";

template <class Proto>
bool read_proto(const std::filesystem::path& p, Proto* out) {
  std::ifstream f(p, std::ios::binary);
  return f && out->ParseFromIstream(&f);
}

Tensor to_tensor(const onnx::TensorProto& t) {
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  const Shape s = dims.empty() ? Shape{1} : Shape(dims);
  std::vector<float> v(static_cast<size_t>(s.numel()));
  if (t.has_raw_data()) {
    EXPECT_EQ(t.raw_data().size(), v.size() * 4) << t.name();
    std::memcpy(v.data(), t.raw_data().data(), std::min(t.raw_data().size(), v.size() * 4));
  } else {
    for (size_t i = 0; i < v.size() && static_cast<int>(i) < t.float_data_size(); ++i)
      v[i] = t.float_data(static_cast<int>(i));
  }
  return Tensor::from_vector(v, s, DType::kF32);
}

class OnnxNodeTest : public ::testing::TestWithParam<const char*> {};

TEST_P(OnnxNodeTest, MatchesTheReferenceOutput) {
  const std::filesystem::path dir = kRoot / GetParam();
  if (!std::filesystem::exists(dir / "model.onnx"))
    GTEST_SKIP() << dir << " not found: apt-get install libonnx-testdata";
  onnx::ModelProto m;
  ASSERT_TRUE(read_proto(dir / "model.onnx", &m));
  const auto data = dir / "test_data_set_0";
  // Inputs 1.. become initializers with the test's values.
  onnx::GraphProto* g = m.mutable_graph();
  onnx::TensorProto x0;
  ASSERT_TRUE(read_proto(data / "input_0.pb", &x0));
  std::vector<onnx::ValueInfoProto> keep;
  for (int i = 0; i < g->input_size(); ++i) {
    if (i == 0) {
      keep.push_back(g->input(i));
      continue;
    }
    onnx::TensorProto t;
    ASSERT_TRUE(read_proto(data / ("input_" + std::to_string(i) + ".pb"), &t));
    t.set_name(g->input(i).name());
    *g->add_initializer() = t;
  }
  g->clear_input();
  for (auto& v : keep) *g->add_input() = v;
  const std::string bytes = m.SerializeAsString();
  const Graph graph = import_onnx_bytes(bytes.data(), bytes.size(), GetParam(), {.fuse = false});
  Executor ex(graph);
  const Tensor x = to_tensor(x0);
  const std::vector<Tensor> ys = ex.run({x});
  for (size_t i = 0; i < ys.size(); ++i) {
    onnx::TensorProto ref;
    ASSERT_TRUE(read_proto(data / ("output_" + std::to_string(i) + ".pb"), &ref));
    const Tensor r = to_tensor(ref);
    ASSERT_EQ(ys[i].numel(), r.numel()) << "output " << i;
    EXPECT_LE(testing::scaled_max_error(ys[i].reshape(r.shape()), r), 1e-5) << "output " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cnn, OnnxNodeTest,
    ::testing::Values(
        "test_conv_with_autopad_same", "test_conv_with_strides_and_asymmetric_padding",
        "test_conv_with_strides_no_padding", "test_conv_with_strides_padding",
        "test_averagepool_2d_ceil", "test_averagepool_2d_default", "test_averagepool_2d_pads",
        "test_averagepool_2d_pads_count_include_pad", "test_averagepool_2d_precomputed_pads",
        "test_averagepool_2d_precomputed_pads_count_include_pad",
        "test_averagepool_2d_precomputed_same_upper", "test_averagepool_2d_precomputed_strides",
        "test_averagepool_2d_same_lower", "test_averagepool_2d_same_upper",
        "test_averagepool_2d_strides", "test_maxpool_2d_ceil", "test_maxpool_2d_default",
        "test_maxpool_2d_dilations", "test_maxpool_2d_pads", "test_maxpool_2d_precomputed_pads",
        "test_maxpool_2d_precomputed_same_upper", "test_maxpool_2d_precomputed_strides",
        "test_maxpool_2d_same_lower", "test_maxpool_2d_same_upper", "test_maxpool_2d_strides",
        "test_globalaveragepool", "test_globalaveragepool_precomputed", "test_batchnorm_epsilon",
        "test_batchnorm_example", "test_relu", "test_leakyrelu", "test_leakyrelu_default",
        "test_leakyrelu_example", "test_sigmoid", "test_sigmoid_example", "test_clip",
        "test_clip_example", "test_clip_inbounds", "test_clip_outbounds", "test_clip_splitbounds",
        "test_clip_default_min", "test_clip_default_max", "test_clip_default_inbounds",
        "test_flatten_axis0", "test_flatten_axis1", "test_flatten_axis2", "test_flatten_axis3",
        "test_flatten_default_axis", "test_flatten_negative_axis1", "test_gemm_alpha",
        "test_gemm_beta", "test_gemm_default_no_bias", "test_gemm_default_scalar_bias",
        "test_gemm_default_single_elem_vector_bias", "test_gemm_default_vector_bias",
        "test_gemm_transposeB", "test_matmul_2d", "test_softmax_example",
        "test_softmax_default_axis", "test_softmax_negative_axis", "test_softmax_axis_2",
        "test_softmax_large_number", "test_split_equal_parts_2d", "test_split_variable_parts_2d",
        "test_resize_upsample_scales_nearest", "test_upsample_nearest", "test_add", "test_mul",
        "test_mul_example", "test_identity", "test_reshape_negative_dim",
        "test_reshape_reordered_all_dims", "test_reshape_zero_and_negative_dim",
        "test_reshape_zero_dim", "test_reshape_one_dim", "test_reshape_reduced_dims"));

}  // namespace
}  // namespace tandem::cnn
