// SPDX-License-Identifier: Apache-2.0
// Hostile and broken GGUF files: every truncation of a small file, single-byte corruptions, huge
// counts and lengths, bad offsets, bad dims, duplicates, bad magic and versions. Each must raise a
// tandem::Error (ParseError where the bytes are at fault) naming the problem, never crash or
// allocate what the file cannot back.
#include <gtest/gtest.h>

#include "llm/gguf_test_util.h"
#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"

namespace tandem::llm {
namespace {

using testing::append;
using testing::append_string;
using testing::find_bytes;
using testing::patch;
using testing::TempDir;
using testing::write_file;

// A small valid file with several value types and two tensors.
std::vector<uint8_t> small_file() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_int("llama.block_count", 2, GgufType::kU32);
  w.set_float("llama.rope.freq_base", 10000.0, GgufType::kF32);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "<s>"});
  w.set_int_array("tokenizer.ggml.token_type", {1, 1, 3}, GgufType::kI32);
  w.add_tensor("w", Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, DType::kF32));
  w.add_tensor("q", Tensor::zeros({1, 32}, DType::kQ8_0));
  return w.to_bytes();
}

// Expects ParseError whose message contains `needle`.
void expect_parse_error(const std::vector<uint8_t>& bytes, const std::string& needle) {
  TempDir dir;
  write_file(dir.file("bad.gguf"), bytes);
  try {
    GgufFile f(dir.file("bad.gguf"));
    FAIL() << "no error; expected one mentioning \"" << needle << "\"";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(e.source(), dir.file("bad.gguf"));
  }
}

// Header for hand-made files.
std::vector<uint8_t> header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
  std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
  append<uint32_t>(b, version);
  append<uint64_t>(b, tensors);
  append<uint64_t>(b, kvs);
  return b;
}

// One tensor info with the given raw dims (innermost first), type and offset.
void tensor_info(std::vector<uint8_t>& b, const std::string& name, std::vector<uint64_t> dims,
                 uint32_t type, uint64_t offset) {
  append_string(b, name);
  append<uint32_t>(b, static_cast<uint32_t>(dims.size()));
  for (uint64_t d : dims) append<uint64_t>(b, d);
  append<uint32_t>(b, type);
  append<uint64_t>(b, offset);
}

void pad_to(std::vector<uint8_t>& b, size_t n) { b.resize(n, 0); }

TEST(GgufMalformed, EveryTruncationThrowsParseError) {
  const std::vector<uint8_t> full = small_file();
  TempDir dir;
  {
    write_file(dir.file("full.gguf"), full);
    GgufFile ok(dir.file("full.gguf"));
    ASSERT_EQ(ok.tensors().size(), 2u);
  }
  for (size_t n = 0; n < full.size(); ++n) {
    write_file(dir.file("cut.gguf"), full, n);
    EXPECT_THROW(GgufFile(dir.file("cut.gguf")), ParseError) << "truncated at " << n;
  }
}

TEST(GgufMalformed, SingleByteCorruptionsNeverCrash) {
  const std::vector<uint8_t> full = small_file();
  TempDir dir;
  int accepted = 0, rejected = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0x80}}) {
      std::vector<uint8_t> b = full;
      if (b[i] == v) continue;
      b[i] = v;
      write_file(dir.file("c.gguf"), b);
      try {
        GgufFile f(dir.file("c.gguf"));
        for (const auto& k : f.keys()) (void)f.metadata_json();
        for (const auto& t : f.tensors()) {
          try {
            (void)f.tensor(t.name).to_float_vector();
          } catch (const Unsupported&) {
          }
        }
        ++accepted;
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  // Most header bytes matter; tensor data bytes do not.
  EXPECT_GT(rejected, 0);
  EXPECT_GT(accepted, 0);
}

TEST(GgufMalformed, BadMagicAndVersions) {
  std::vector<uint8_t> b = small_file();
  b[0] = 'X';
  expect_parse_error(b, "bad magic");
  b = small_file();
  patch<uint32_t>(b, 4, 1);
  expect_parse_error(b, "version 1 is not supported");
  patch<uint32_t>(b, 4, 4);
  expect_parse_error(b, "unsupported GGUF version 4");
  patch<uint32_t>(b, 4, 0x03000000u);
  expect_parse_error(b, "big-endian");
  expect_parse_error({'G', 'G'}, "bad magic");
  expect_parse_error({}, "empty file");
}

TEST(GgufMalformed, HugeCountsAndLengthsDoNotAllocate) {
  expect_parse_error(header(0, UINT64_MAX), "metadata count 18446744073709551615 exceeds");
  expect_parse_error(header(UINT64_MAX, 0), "tensor count 18446744073709551615 exceeds");

  std::vector<uint8_t> b = header(0, 1);
  append<uint64_t>(b, UINT64_MAX);  // key length
  append<uint64_t>(b, 0);           // enough bytes for the count check, not for the key
  expect_parse_error(b, "metadata key 0: string length 18446744073709551615 exceeds");

  b = header(0, 1);
  append_string(b, "arr");
  append<uint32_t>(b, static_cast<uint32_t>(GgufType::kArray));
  append<uint32_t>(b, static_cast<uint32_t>(GgufType::kU64));
  append<uint64_t>(b, uint64_t{1} << 61);
  expect_parse_error(b, "metadata 'arr': array of 2305843009213693952 u64 elements exceeds");

  b = header(0, 1);
  append_string(b, "strs");
  append<uint32_t>(b, static_cast<uint32_t>(GgufType::kArray));
  append<uint32_t>(b, static_cast<uint32_t>(GgufType::kString));
  append<uint64_t>(b, 2);
  append<uint64_t>(b, 1);
  b.push_back('x');
  append<uint64_t>(b, 1000);  // second string longer than the file
  expect_parse_error(b, "metadata 'strs': string length 1000 exceeds");
}

TEST(GgufMalformed, BadMetadataValues) {
  std::vector<uint8_t> b = header(0, 1);
  append_string(b, "k");
  append<uint32_t>(b, 13);
  append<uint32_t>(b, 0);
  expect_parse_error(b, "metadata 'k': unknown value type 13");

  b = header(0, 1);
  append_string(b, "flag");
  append<uint32_t>(b, static_cast<uint32_t>(GgufType::kBool));
  b.push_back(2);
  expect_parse_error(b, "metadata 'flag': bool value is 2");

  b = header(0, 1);
  append_string(b, "");
  append<uint32_t>(b, static_cast<uint32_t>(GgufType::kU8));
  b.push_back(0);
  expect_parse_error(b, "metadata key 0 is empty");

  b = header(0, 2);
  for (int i = 0; i < 2; ++i) {
    append_string(b, "same");
    append<uint32_t>(b, static_cast<uint32_t>(GgufType::kU8));
    b.push_back(0);
  }
  expect_parse_error(b, "metadata 'same': duplicate key");

  // Arrays nested 9 deep.
  b = header(0, 1);
  append_string(b, "deep");
  append<uint32_t>(b, static_cast<uint32_t>(GgufType::kArray));
  for (int i = 0; i < 9; ++i) {
    append<uint32_t>(b, static_cast<uint32_t>(GgufType::kArray));
    append<uint64_t>(b, 1);
  }
  append<uint32_t>(b, static_cast<uint32_t>(GgufType::kU8));
  append<uint64_t>(b, 0);
  expect_parse_error(b, "nested deeper than 8");

  b = header(0, 1);
  append_string(b, "general.alignment");
  append<uint32_t>(b, static_cast<uint32_t>(GgufType::kU32));
  append<uint32_t>(b, 24);
  expect_parse_error(b, "general.alignment 24 is not a power of two");

  b = header(0, 1);
  append_string(b, "general.alignment");
  append<uint32_t>(b, static_cast<uint32_t>(GgufType::kString));
  append_string(b, "32");
  expect_parse_error(b, "general.alignment is a string");
}

TEST(GgufMalformed, BadTensorInfos) {
  auto one = [](std::vector<uint64_t> dims, uint32_t type, uint64_t offset, size_t data) {
    std::vector<uint8_t> b = header(1, 0);
    tensor_info(b, "t", std::move(dims), type, offset);
    pad_to(b, (b.size() + 31) / 32 * 32 + data);
    return b;
  };
  EXPECT_NO_THROW({
    TempDir dir;
    write_file(dir.file("ok.gguf"), one({4}, 0, 0, 16));
    GgufFile f(dir.file("ok.gguf"));
  });
  expect_parse_error(one({1, 1, 1, 1, 1}, 0, 0, 4), "tensor 't': n_dims 5 (at most 4)");
  expect_parse_error(one({4, 0}, 0, 0, 16), "tensor 't': dimension 1 is 0");
  expect_parse_error(one({uint64_t{1} << 63}, 0, 0, 16), "dimension 0 is negative");
  expect_parse_error(one({uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0, 16),
                     "element count overflows");
  expect_parse_error(one({uint64_t{1} << 62}, 0, 0, 16), "byte size overflows");
  expect_parse_error(one({4}, 99, 0, 16), "tensor 't': unknown ggml type 99");
  expect_parse_error(one({4}, 4, 0, 16), "unknown ggml type 4");
  expect_parse_error(one({48}, 2, 0, 64), "first dimension 48 is not a multiple of Q4_0's block");
  expect_parse_error(one({4}, 0, 8, 64), "data offset 8 is not a multiple of the alignment 32");
  expect_parse_error(one({4}, 0, 0, 15), "ends past the end of the file");
  expect_parse_error(one({4}, 0, uint64_t{1} << 63, 16), "ends past the end of the file");
  expect_parse_error(one({uint64_t{1} << 40}, 0, 0, 16), "ends past the end of the file");

  std::vector<uint8_t> b = header(1, 0);
  tensor_info(b, "", {4}, 0, 0);
  pad_to(b, 96);
  expect_parse_error(b, "tensor info 0: empty name");

  b = header(2, 0);
  tensor_info(b, "t", {4}, 0, 0);
  tensor_info(b, "t", {4}, 0, 32);
  pad_to(b, 256);
  expect_parse_error(b, "tensor 't': duplicate tensor name");

  b = header(2, 0);
  tensor_info(b, "a", {16}, 0, 0);  // 64 bytes at [0, 64)
  tensor_info(b, "b", {4}, 0, 32);  // overlaps a
  pad_to(b, 256);
  expect_parse_error(b, "tensor 'b': data at offset 32 overlaps tensor 'a' [0, 64)");
}

TEST(GgufMalformed, ErrorsNameTheByteOffset) {
  std::vector<uint8_t> b = small_file();
  const size_t at = find_bytes(b, "llama.block_count");
  ASSERT_NE(at, std::string::npos);
  // Turn the u32 value type of llama.block_count into 200.
  patch<uint32_t>(b, at + 17, 200);
  TempDir dir;
  write_file(dir.file("o.gguf"), b);
  try {
    GgufFile f(dir.file("o.gguf"));
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_EQ(e.offset(), static_cast<int64_t>(at + 17));
    EXPECT_NE(std::string(e.what()).find("metadata 'llama.block_count': unknown value type 200"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem::llm
