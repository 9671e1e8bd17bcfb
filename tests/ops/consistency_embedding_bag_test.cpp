// SPDX-License-Identifier: Apache-2.0
// Consistency of embedding_bag with the reference kernels: f32, f16 and row-wise int8 (u8) tables,
// i32 and i64 indices and offsets, sum and mean pooling, odd widths, empty bags (zeros, also for
// the mean), no bags at all, and bad index data (an index outside the table, offsets that do not
// start at 0, decrease or miss the end) rejected with InvalidArgument before anything runs.
#include <memory>
#include <random>

#include "consistency_common.h"
#include "tandem/core/error.h"

namespace tandem::testing {
namespace {

// A table of `rows` rows of width dim on the CPU: f32/f16 from random values, or u8 row-wise int8
// rows (random codes, then an f32 scale and bias per row).
Tensor make_table(int64_t rows, int64_t dim, DType t, uint32_t seed) {
  if (t != DType::kU8) return converted(random_tensor({rows, dim}, seed), t);
  Tensor table = Tensor::empty({rows, dim + 8}, DType::kU8);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f), bias(-1.0f, 1.0f);
  auto* p = table.data<uint8_t>();
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = p + r * (dim + 8);
    for (int64_t j = 0; j < dim; ++j) row[j] = static_cast<uint8_t>(code(rng));
    const float s = scale(rng), b = bias(rng);
    std::memcpy(row + dim, &s, 4);
    std::memcpy(row + dim + 4, &b, 4);
  }
  return table;
}

// An index tensor of dtype t (i32 or i64) holding v.
Tensor index_tensor(const std::vector<int64_t>& v, DType t) {
  Tensor out = Tensor::empty({static_cast<int64_t>(v.size())}, t);
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kI64)
      out.data<int64_t>()[i] = v[i];
    else
      out.data<int32_t>()[i] = static_cast<int32_t>(v[i]);
  }
  return out;
}

// Bags of 0..max_bag random rows (every fourth bag empty).
void make_bags(int64_t bags, int64_t rows, int max_bag, uint32_t seed, std::vector<int64_t>& idx,
               std::vector<int64_t>& off) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> size(1, max_bag);
  std::uniform_int_distribution<int64_t> row(0, rows - 1);
  off.assign(1, 0);
  idx.clear();
  for (int64_t b = 0; b < bags; ++b) {
    const int n = b % 4 == 3 ? 0 : size(rng);
    for (int i = 0; i < n; ++i) idx.push_back(row(rng));
    off.push_back(static_cast<int64_t>(idx.size()));
  }
}

constexpr Tol kBagTol{1e-5, 1e-5};  // f32 sums of up to a dozen rows vs double

void check_case(int64_t rows, int64_t dim, int64_t bags, DType table_t, DType idx_t, DType off_t,
                ops::BagMode mode, uint32_t seed) {
  const std::string what =
      cat("embedding_bag ", dtype_name(table_t), " rows=", rows, " dim=", dim, " bags=", bags,
          " idx=", dtype_name(idx_t), " off=", dtype_name(off_t),
          mode == ops::BagMode::kMean ? " mean" : " sum");
  SCOPED_TRACE(what);
  std::vector<int64_t> idx, off;
  make_bags(bags, rows, 12, seed, idx, off);
  const Tensor table = make_table(rows, dim, table_t, seed + 1);
  const Tensor indices = index_tensor(idx, idx_t), offsets = index_tensor(off, off_t);
  Tensor want = Tensor::empty({bags, dim}, DType::kF32);
  reference().embedding_bag(table, indices, offsets, want, mode, nullptr);
  Guarded out({bags, dim}, DType::kF32);
  ops::embedding_bag(on_device(table), on_device(indices), on_device(offsets), out.view(), mode);
  const Tensor got = out.result(what);
  expect_close(got, want, kBagTol, what);
  // Empty bags give exact zeros in both modes.
  for (int64_t b = 0; b < bags; ++b) {
    if (off[b] != off[b + 1]) continue;
    for (int64_t j = 0; j < dim; ++j)
      ASSERT_EQ(got.data<float>()[b * dim + j], 0.0f) << what << ": empty bag " << b;
  }
}

TEST(EmbeddingBag, MatchesReferenceAcrossDtypesAndModes) {
  TANDEM_OPS_PROLOGUE();
  uint32_t seed = 100;
  for (DType table_t : {DType::kF32, DType::kF16, DType::kU8})
    for (ops::BagMode mode : {ops::BagMode::kSum, ops::BagMode::kMean})
      for (int64_t dim : {1, 7, 33, 130}) {
        check_case(97, dim, 23, table_t, DType::kI64, DType::kI64, mode, seed++);
        check_case(50, dim, 9, table_t, DType::kI32, DType::kI64, mode, seed++);
      }
}

TEST(EmbeddingBag, IndexAndOffsetDtypes) {
  TANDEM_OPS_PROLOGUE();
  uint32_t seed = 500;
  for (DType idx_t : {DType::kI32, DType::kI64})
    for (DType off_t : {DType::kI32, DType::kI64})
      check_case(300, 16, 64, DType::kF32, idx_t, off_t, ops::BagMode::kSum, seed++);
}

TEST(EmbeddingBag, ManyBagsAndNoBags) {
  TANDEM_OPS_PROLOGUE();
  check_case(1000, 64, 700, DType::kF16, DType::kI64, DType::kI64, ops::BagMode::kMean, 900);
  check_case(10, 5, 0, DType::kF32, DType::kI64, DType::kI64, ops::BagMode::kSum, 901);
}

TEST(EmbeddingBag, MeanOfAnEmptyBagIsZero) {
  TANDEM_OPS_PROLOGUE();
  const Tensor table = make_table(4, 3, DType::kF32, 7);
  const Tensor indices = index_tensor({}, DType::kI64);
  const Tensor offsets = index_tensor({0, 0, 0}, DType::kI64);
  Guarded out({2, 3}, DType::kF32);
  ops::embedding_bag(on_device(table), on_device(indices), on_device(offsets), out.view(),
                     ops::BagMode::kMean);
  const Tensor got = out.result("empty mean");
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(got.data<float>()[i], 0.0f) << i;
}

TEST(EmbeddingBag, BadIndexDataThrowsInvalidArgument) {
  TANDEM_OPS_PROLOGUE();
  const Tensor table = on_device(make_table(10, 4, DType::kU8, 3));
  Tensor out = Tensor::empty({2, 4}, DType::kF32, test_device());
  auto run = [&](const std::vector<int64_t>& idx, const std::vector<int64_t>& off, DType t) {
    ops::embedding_bag(table, on_device(index_tensor(idx, t)), on_device(index_tensor(off, t)),
                       out);
  };
  for (DType t : {DType::kI32, DType::kI64}) {
    EXPECT_THROW(run({1, 10, 2}, {0, 1, 3}, t), InvalidArgument);  // index == rows
    EXPECT_THROW(run({1, -1, 2}, {0, 1, 3}, t), InvalidArgument);  // negative index
    EXPECT_THROW(run({1, 2, 3}, {1, 2, 3}, t), InvalidArgument);   // offsets[0] != 0
    EXPECT_THROW(run({1, 2, 3}, {0, 2, 1}, t), InvalidArgument);   // decreasing
    EXPECT_THROW(run({1, 2, 3}, {0, 1, 2}, t), InvalidArgument);   // last offset != n
    EXPECT_NO_THROW(run({1, 9, 0}, {0, 1, 3}, t));
  }
  try {
    run({1, 10, 2}, {0, 1, 3}, DType::kI64);
    ADD_FAILURE() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("index 10 at position 1"), std::string::npos) << e.what();
  }
}

// On a stream of the device: the result after synchronize() equals the reference, and bad index
// data still throw at the call (the index check waits for the stream's earlier work).
TEST(EmbeddingBag, OnAStream) {
  TANDEM_OPS_PROLOGUE();
  std::unique_ptr<Stream> stream = create_stream(test_device());
  std::vector<int64_t> idx, off;
  make_bags(40, 200, 9, 77, idx, off);
  const Tensor table = make_table(200, 24, DType::kU8, 78);
  const Tensor indices = index_tensor(idx, DType::kI64), offsets = index_tensor(off, DType::kI32);
  Tensor want = Tensor::empty({40, 24}, DType::kF32);
  reference().embedding_bag(table, indices, offsets, want, ops::BagMode::kMean, nullptr);
  const Tensor dev_table = table.to(test_device(), stream.get());
  const Tensor dev_idx = indices.to(test_device(), stream.get());
  const Tensor dev_off = offsets.to(test_device(), stream.get());
  Tensor out = Tensor::empty({40, 24}, DType::kF32, test_device());
  ops::embedding_bag(dev_table, dev_idx, dev_off, out, ops::BagMode::kMean, stream.get());
  stream->synchronize();
  expect_close(out.to(Device::cpu()), want, kBagTol, "embedding_bag on a stream");
  std::vector<int64_t> bad = idx;
  bad.back() = 200;
  const Tensor dev_bad = index_tensor(bad, DType::kI64).to(test_device(), stream.get());
  EXPECT_THROW(
      ops::embedding_bag(dev_table, dev_bad, dev_off, out, ops::BagMode::kSum, stream.get()),
      InvalidArgument);
  stream->synchronize();
}

TEST(EmbeddingBag, BadShapesAndDtypesThrowInvalidArgument) {
  TANDEM_OPS_PROLOGUE();
  const Device d = test_device();
  const Tensor idx = on_device(index_tensor({0, 1}, DType::kI64));
  const Tensor off = on_device(index_tensor({0, 2}, DType::kI64));
  Tensor out = Tensor::empty({1, 4}, DType::kF32, d);
  Tensor wrong_out = Tensor::empty({1, 5}, DType::kF32, d);
  const Tensor f32 = Tensor::zeros({3, 4}, DType::kF32, d);
  const Tensor bf16 = Tensor::zeros({3, 4}, DType::kBF16, d);
  const Tensor tiny_u8 = Tensor::zeros({3, 6}, DType::kU8, d);  // rows shorter than the 8 bytes
  const Tensor f_idx = Tensor::zeros({2}, DType::kF32, d);
  EXPECT_THROW(ops::embedding_bag(bf16, idx, off, out), InvalidArgument);
  EXPECT_THROW(ops::embedding_bag(tiny_u8, idx, off, out), InvalidArgument);
  EXPECT_THROW(ops::embedding_bag(f32, f_idx, off, out), InvalidArgument);
  EXPECT_THROW(ops::embedding_bag(f32, idx, off, wrong_out), InvalidArgument);
  EXPECT_NO_THROW(ops::embedding_bag(f32, idx, off, out));
}

}  // namespace
}  // namespace tandem::testing
