// SPDX-License-Identifier: Apache-2.0
// GgufWriter -> GgufFile round trips: every metadata value type (nested arrays included), every
// supported tensor type, v2 files, alignment, zero-copy tensors that outlive the file object.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "llm/gguf_test_util.h"
#include "tandem/core/allocator.h"
#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"

namespace tandem::llm {
namespace {

using testing::append;
using testing::TempDir;

std::vector<uint8_t> nested_int_arrays() {
  // array of 2 arrays of i32: {1, 2, 3}, {-4}
  std::vector<uint8_t> p;
  append<uint32_t>(p, static_cast<uint32_t>(GgufType::kArray));
  append<uint64_t>(p, 2);
  append<uint32_t>(p, static_cast<uint32_t>(GgufType::kI32));
  append<uint64_t>(p, 3);
  for (int32_t v : {1, 2, 3}) append<int32_t>(p, v);
  append<uint32_t>(p, static_cast<uint32_t>(GgufType::kI32));
  append<uint64_t>(p, 1);
  append<int32_t>(p, -4);
  return p;
}

TEST(GgufReader, EveryValueTypeRoundTrips) {
  TempDir dir;
  GgufWriter w;
  w.set_int("u8", 200, GgufType::kU8);
  w.set_int("i8", -100, GgufType::kI8);
  w.set_int("u16", 60000, GgufType::kU16);
  w.set_int("i16", -30000, GgufType::kI16);
  w.set_int("u32", 4000000000, GgufType::kU32);
  w.set_int("i32", -2000000000, GgufType::kI32);
  w.set_float("f32", 0.25, GgufType::kF32);
  w.set_bool("bool", true);
  w.set_string("string", "héllo");
  w.set_int("u64", int64_t{1} << 60, GgufType::kU64);
  w.set_int("i64", -(int64_t{1} << 60), GgufType::kI64);
  w.set_float("f64", 1.0 / 3.0, GgufType::kF64);
  w.set_string_array("strings", {"a", "", "ccc"});
  w.set_int_array("u16s", {1, 65535}, GgufType::kU16);
  w.set_int_array("bools", {1, 0, 1}, GgufType::kBool);
  w.set_float_array("f64s", {0.5, -2.0}, GgufType::kF64);
  w.set_raw("nested", GgufType::kArray, nested_int_arrays());
  std::vector<uint8_t> big;
  append<uint64_t>(big, UINT64_MAX);
  w.set_raw("u64max", GgufType::kU64, big);
  w.write(dir.file("v.gguf"));

  GgufFile f(dir.file("v.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_int("u8"), 200);
  EXPECT_EQ(f.get_int("i8"), -100);
  EXPECT_EQ(f.get_int("u16"), 60000);
  EXPECT_EQ(f.get_int("i16"), -30000);
  EXPECT_EQ(f.get_int("u32"), 4000000000);
  EXPECT_EQ(f.get_int("i32"), -2000000000);
  EXPECT_EQ(f.get_float("f32"), 0.25);
  EXPECT_TRUE(f.get_bool("bool"));
  EXPECT_EQ(f.get_string("string"), "héllo");
  EXPECT_EQ(f.get_int("u64"), int64_t{1} << 60);
  EXPECT_EQ(f.get_int("i64"), -(int64_t{1} << 60));
  EXPECT_DOUBLE_EQ(f.get_float("f64"), 1.0 / 3.0);
  EXPECT_EQ(f.get_float("u32"), 4e9);  // integers convert to float
  EXPECT_EQ(f.get_string_array("strings"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f.get_int_array("u16s"), (std::vector<int64_t>{1, 65535}));
  EXPECT_EQ(f.get_float_array("f64s"), (std::vector<double>{0.5, -2.0}));
  EXPECT_EQ(f.type_of("bools"), GgufType::kArray);
  EXPECT_EQ(f.type_of("u8"), GgufType::kU8);
  EXPECT_EQ(f.type_of("f64"), GgufType::kF64);
  EXPECT_THROW(f.get_int("u64max"), ParseError);  // does not fit int64
  EXPECT_EQ(f.get_float("u64max"), 18446744073709551615.0);

  // Keys in file order; JSON of everything, nested arrays included.
  const auto keys = f.keys();
  ASSERT_EQ(keys.size(), 18u);
  EXPECT_EQ(keys.front(), "u8");
  EXPECT_EQ(keys.back(), "u64max");
  const nlohmann::json j = f.metadata_json();
  EXPECT_EQ(j["nested"], nlohmann::json::parse("[[1, 2, 3], [-4]]"));
  EXPECT_EQ(j["bools"], nlohmann::json::parse("[true, false, true]"));
  EXPECT_EQ(j["string"], "héllo");
  EXPECT_EQ(j["u64max"].get<uint64_t>(), UINT64_MAX);
  // Summaries of long arrays.
  const nlohmann::json s = f.metadata_json(2);
  EXPECT_EQ(s["strings"]["count"], 3);
  EXPECT_EQ(s["strings"]["array"], "string");
  EXPECT_EQ(s["strings"]["first"], nlohmann::json::parse(R"(["a", ""])"));
}

TEST(GgufReader, TypedGettersRejectOtherTypesAndMissingKeys) {
  TempDir dir;
  GgufWriter w;
  w.set_string("s", "x");
  w.set_int("n", 3, GgufType::kU32);
  w.set_string_array("a", {"x"});
  w.write(dir.file("t.gguf"));
  GgufFile f(dir.file("t.gguf"));
  EXPECT_THROW(f.get_int("s"), ParseError);
  EXPECT_THROW(f.get_string("n"), ParseError);
  EXPECT_THROW(f.get_bool("n"), ParseError);
  EXPECT_THROW(f.get_int_array("a"), ParseError);
  EXPECT_THROW(f.get_string_array("n"), ParseError);
  EXPECT_THROW(f.get_float("a"), ParseError);
  EXPECT_THROW(f.get_int("missing"), NotFound);
  EXPECT_THROW(f.type_of("missing"), NotFound);
  EXPECT_FALSE(f.find_int("missing").has_value());
  EXPECT_EQ(f.find_int("n").value(), 3);
  EXPECT_EQ(f.find_string("s").value(), "x");
  try {
    f.get_int("s");
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("metadata 's' is a string, expected an integer"),
              std::string::npos)
        << e.what();
  }
}

std::vector<uint8_t> pattern_bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

TEST(GgufReader, EveryTensorTypeRoundTripsZeroCopy) {
  TempDir dir;
  GgufWriter w;
  struct Case {
    const char* name;
    DType dtype;
    Shape shape;
    uint32_t ggml;
  };
  const std::vector<Case> cases = {
      {"f32", DType::kF32, {3, 5}, 0},    {"f16", DType::kF16, {2, 3, 4}, 1},
      {"bf16", DType::kBF16, {7}, 30},    {"q8_0", DType::kQ8_0, {2, 64}, 8},
      {"q4_0", DType::kQ4_0, {3, 32}, 2}, {"q4_1", DType::kQ4_1, {1, 2, 2, 96}, 3},
      {"i8", DType::kI8, {5}, 24},        {"i32", DType::kI32, {2, 2}, 26},
  };
  std::vector<std::vector<uint8_t>> payloads;
  for (size_t i = 0; i < cases.size(); ++i) {
    Tensor t = Tensor::empty(cases[i].shape, cases[i].dtype);
    payloads.push_back(pattern_bytes(static_cast<size_t>(t.nbytes()), static_cast<uint8_t>(i)));
    std::memcpy(t.raw_data(), payloads.back().data(), payloads.back().size());
    w.add_tensor(cases[i].name, t);
  }
  w.write(dir.file("t.gguf"));

  Tensor keep;
  {
    GgufFile f(dir.file("t.gguf"));
    ASSERT_EQ(f.tensors().size(), cases.size());
    EXPECT_EQ(f.data_offset() % 32, 0u);
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(cases[i].name);
      const GgufTensorInfo* info = f.find_tensor(cases[i].name);
      ASSERT_NE(info, nullptr);
      EXPECT_EQ(info->ggml_type, cases[i].ggml);
      EXPECT_EQ(info->shape, cases[i].shape);
      EXPECT_EQ(info->nbytes, payloads[i].size());
      EXPECT_EQ(info->offset % 32, 0u);
      const Tensor t = f.tensor(cases[i].name);
      EXPECT_EQ(t.dtype(), cases[i].dtype);
      EXPECT_EQ(t.shape(), cases[i].shape);
      ASSERT_EQ(static_cast<size_t>(t.nbytes()), payloads[i].size());
      EXPECT_EQ(std::memcmp(t.raw_data(), payloads[i].data(), payloads[i].size()), 0);
    }
    keep = f.tensor("f32");
    EXPECT_EQ(f.find_tensor("nope"), nullptr);
    EXPECT_THROW(f.tensor("nope"), NotFound);
  }
  // The mapping outlives the GgufFile through the tensor's buffer.
  EXPECT_EQ(std::memcmp(keep.raw_data(), payloads[0].data(), payloads[0].size()), 0);
}

TEST(GgufReader, FloatValuesSurviveAndDequantize) {
  TempDir dir;
  std::vector<float> v(64);
  for (int i = 0; i < 64; ++i) v[i] = std::sin(0.1f * i);
  GgufWriter w;
  w.add_tensor("x", Tensor::from_vector(v, {2, 32}, DType::kF32));
  std::vector<uint16_t> h(64);
  for (int i = 0; i < 64; ++i) h[i] = f32_to_f16(v[i]);
  w.add_tensor("h", Tensor::from_vector(h, {64}, DType::kF16));
  w.write(dir.file("f.gguf"));
  GgufFile f(dir.file("f.gguf"));
  EXPECT_EQ(f.tensor("x").to_float_vector(), v);
  const auto back = f.tensor("h").to_float_vector();
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(back[i], v[i], 1e-3);
}

TEST(GgufReader, OtherGgmlTypesListButAreUnsupportedAsTensors) {
  TempDir dir;
  GgufWriter w;
  w.add_tensor_raw("k", 13, {2, 256}, pattern_bytes(2 * 176, 1));  // Q5_K
  w.add_tensor_raw("q2", 10, {256}, pattern_bytes(84, 2));         // Q2_K
  w.write(dir.file("k.gguf"));
  GgufFile f(dir.file("k.gguf"));
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].nbytes, 352u);
  EXPECT_EQ(ggml_type_name(f.tensors()[1].ggml_type), "Q2_K");
  try {
    f.tensor("k");
    FAIL() << "Q5_K tensor did not throw";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("Q5_K"), std::string::npos) << e.what();
  }
}

TEST(GgufReader, VersionTwoAndCustomAlignment) {
  TempDir dir;
  GgufWriter w;
  w.set_version(2);
  w.set_alignment(64);
  w.set_string("general.architecture", "llama");
  std::vector<float> a(3, 1.5f), b(5, -2.0f);
  w.add_tensor("a", Tensor::from_vector(a, {3}, DType::kF32));
  w.add_tensor("b", Tensor::from_vector(b, {5}, DType::kF32));
  w.write(dir.file("v2.gguf"));
  GgufFile f(dir.file("v2.gguf"));
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get_int("general.alignment"), 64);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.find_tensor("b")->offset, 64u);
  EXPECT_EQ(f.tensor("b").to_float_vector(), b);
}

TEST(GgufReader, MisalignedDataIsCopiedNotViewed) {
  TempDir dir;
  GgufWriter w;
  w.set_alignment(1);
  w.add_tensor("i8", Tensor::from_vector(std::vector<int8_t>{1, 2, 3}, {3}, DType::kI8));
  std::vector<float> v = {1.0f, 2.0f, 3.0f};
  w.add_tensor("f", Tensor::from_vector(v, {3}, DType::kF32));
  w.write(dir.file("a1.gguf"));
  GgufFile f(dir.file("a1.gguf"));
  EXPECT_EQ(f.alignment(), 1u);
  const Tensor t = f.tensor("f");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 4, 0u);
  EXPECT_EQ(t.to_float_vector(), v);
}

TEST(GgufReader, EmptyFileAndNoTensors) {
  TempDir dir;
  GgufWriter w;
  w.write(dir.file("empty.gguf"));
  GgufFile f(dir.file("empty.gguf"));
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.keys().empty());
  EXPECT_THROW(GgufFile(dir.file("missing.gguf")), NotFound);
}

TEST(GgufWriter, RejectsBadInput) {
  GgufWriter w;
  EXPECT_THROW(w.set_int("x", 256, GgufType::kU8), InvalidArgument);
  EXPECT_THROW(w.set_int("x", -1, GgufType::kU32), InvalidArgument);
  EXPECT_THROW(w.set_int("x", 1, GgufType::kString), InvalidArgument);
  EXPECT_THROW(w.set_float("x", 1, GgufType::kI32), InvalidArgument);
  EXPECT_THROW(w.set_alignment(24), InvalidArgument);
  EXPECT_THROW(w.set_version(1), InvalidArgument);
  EXPECT_THROW(w.set_string("", "x"), InvalidArgument);
  w.add_tensor("t", Tensor::zeros({4}, DType::kF32));
  EXPECT_THROW(w.add_tensor("t", Tensor::zeros({4}, DType::kF32)), InvalidArgument);
  EXPECT_THROW(w.add_tensor("u4", Tensor::zeros({4}, DType::kU4)), Unsupported);
  EXPECT_THROW(w.add_tensor_raw("k", 12, {100}, std::vector<uint8_t>(144)), InvalidArgument);
  EXPECT_THROW(w.add_tensor_raw("k", 12, {256}, std::vector<uint8_t>(143)), InvalidArgument);
  EXPECT_THROW(w.add_tensor_raw("k", 99, {256}, std::vector<uint8_t>(1)), InvalidArgument);
  // A key set twice keeps one entry with the last value.
  w.set_int("dup", 1, GgufType::kI32);
  w.set_string("dup", "two");
  TempDir dir;
  w.write(dir.file("d.gguf"));
  GgufFile f(dir.file("d.gguf"));
  EXPECT_EQ(f.keys().size(), 1u);
  EXPECT_EQ(f.get_string("dup"), "two");
}

TEST(GgufTypes, NumberingMatchesGgml) {
  EXPECT_EQ(dtype_from_ggml_type(0), DType::kF32);
  EXPECT_EQ(dtype_from_ggml_type(1), DType::kF16);
  EXPECT_EQ(dtype_from_ggml_type(2), DType::kQ4_0);
  EXPECT_EQ(dtype_from_ggml_type(3), DType::kQ4_1);
  EXPECT_EQ(dtype_from_ggml_type(8), DType::kQ8_0);
  EXPECT_EQ(dtype_from_ggml_type(24), DType::kI8);
  EXPECT_EQ(dtype_from_ggml_type(26), DType::kI32);
  EXPECT_EQ(dtype_from_ggml_type(30), DType::kBF16);
  EXPECT_EQ(dtype_from_ggml_type(12), DType::kQ4_K);
  EXPECT_EQ(dtype_from_ggml_type(14), DType::kQ6_K);
  EXPECT_THROW(dtype_from_ggml_type(13), Unsupported);
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kI8, DType::kI32}) {
    EXPECT_EQ(dtype_from_ggml_type(ggml_type_from_dtype(d)), d);
    int64_t elems = 0, bytes = 0;
    ASSERT_TRUE(ggml_type_layout(ggml_type_from_dtype(d), &elems, &bytes));
    EXPECT_EQ(elems, dtype_block_size(d));
    EXPECT_EQ(bytes, dtype_block_bytes(d));
  }
  EXPECT_THROW(ggml_type_from_dtype(DType::kU4), Unsupported);
  EXPECT_EQ(ggml_type_name(12), "Q4_K");
  EXPECT_EQ(ggml_type_name(4), "type 4");
  EXPECT_EQ(ggml_type_name(99), "type 99");
  EXPECT_FALSE(ggml_type_layout(99, nullptr, nullptr));
  EXPECT_EQ(gguf_type_name(GgufType::kString), "string");
}

}  // namespace
}  // namespace tandem::llm

namespace tandem::llm {
namespace {

// A file written by the Python `gguf` package's GGUFWriter (0.19.0), stored in the fuzz corpus;
// tests/llm/gguf_python_check.py regenerates it and checks the reverse direction.
TEST(GgufReader, ReadsFilesFromThePythonWriter) {
  const auto path = (std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/llm") /
                    "../fuzz/corpus/gguf/python_writer.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path.string();
  GgufFile f(path.string());
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 1);
  EXPECT_EQ(f.type_of("u64"), GgufType::kU64);
  EXPECT_THROW(f.get_int("u64"), ParseError);  // 2^63 + 5 does not fit int64
  EXPECT_EQ(f.metadata_json()["u64"].get<uint64_t>(), (uint64_t{1} << 63) + 5);
  EXPECT_EQ(f.get_float_array("floats"), (std::vector<double>{0.5, 1.5}));
  EXPECT_EQ(f.get_string("s"), "python");
  EXPECT_FALSE(f.get_bool("b"));
  EXPECT_EQ(f.metadata_json()["nested"], nlohmann::json::parse("[[1, 2], [3]]"));
  const Tensor w = f.tensor("w");
  EXPECT_EQ(w.shape(), (Shape{3, 4}));
  std::vector<float> expect(12);
  for (int i = 0; i < 12; ++i) expect[i] = static_cast<float>(i);
  EXPECT_EQ(w.to_float_vector(), expect);
  const Tensor h = f.tensor("h");
  EXPECT_EQ(h.dtype(), DType::kF16);
  EXPECT_EQ(h.shape(), (Shape{2, 32}));
  EXPECT_EQ(h.to_float_vector(), std::vector<float>(64, 1.0f));
}

}  // namespace
}  // namespace tandem::llm
