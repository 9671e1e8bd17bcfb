// SPDX-License-Identifier: Apache-2.0
// Reference embedding_bag: the index data are checked first, then each bag's rows are decoded
// element by element and summed in double precision; mean divides by the bag size (empty bag: 0).
#include <cstring>

#include "reference/reference.h"
#include "tandem/core/dtype.h"

namespace tandem::cpu::ref {
namespace {

int64_t index_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kI64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
}

// Element j of table row r as double (f32, f16, or a u8 row-wise int8 row).
double table_value(const Tensor& table, int64_t dim, int64_t r, int64_t j) {
  const auto* base = static_cast<const uint8_t*>(table.raw_data());
  if (table.dtype() == DType::kU8) {
    const uint8_t* row = base + r * (dim + 8);
    float scale, bias;
    std::memcpy(&scale, row + dim, 4);
    std::memcpy(&bias, row + dim + 4, 4);
    return static_cast<double>(row[j]) * scale + bias;
  }
  return load_value(table.dtype(), base + r * dtype_row_bytes(table.dtype(), dim), j);
}

}  // namespace

void embedding_bag(const Tensor& table, const Tensor& indices, const Tensor& offsets, Tensor& out,
                   ops::BagMode mode) {
  const int64_t dim = ops::embedding_bag_dim(table), bags = offsets.size(0) - 1;
  ops::check_embedding_bag_indices(indices.raw_data(), indices.dtype(), indices.numel(),
                                   offsets.raw_data(), offsets.dtype(), bags, table.size(0));
  float* o = out.data<float>();
  for (int64_t b = 0; b < bags; ++b) {
    const int64_t lo = index_at(offsets, b), hi = index_at(offsets, b + 1);
    for (int64_t j = 0; j < dim; ++j) {
      double acc = 0.0;
      for (int64_t i = lo; i < hi; ++i) acc += table_value(table, dim, index_at(indices, i), j);
      if (mode == ops::BagMode::kMean && hi > lo) acc /= static_cast<double>(hi - lo);
      o[b * dim + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace tandem::cpu::ref
