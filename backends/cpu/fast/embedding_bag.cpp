// SPDX-License-Identifier: Apache-2.0
// Fast embedding_bag: bags are split over the OpenMP team (work sized by the bytes read); each bag
// accumulates its rows in f32, row by row in index order (prefetching the rows a few indices
// ahead), then scales by 1/size for the mean.
#include <algorithm>
#include <cstring>
#include <vector>

#include "fast/fast_ops.h"
#include "fast/isa.h"
#include "kernels/parallel.h"
#include "tandem/core/backend.h"
#include "tandem/core/dtype.h"

namespace tandem::cpu::fast {
namespace {

constexpr int64_t kPrefetch = 8;  // indices ahead

template <class I>
void pool_bags(const Tensor& table, int64_t dim, const I* idx, const int64_t* off, int64_t bags,
               ops::BagMode mode, float* out) {
  const auto* base = static_cast<const uint8_t*>(table.raw_data());
  const DType t = table.dtype();
  const int64_t rb = t == DType::kU8 ? dim + 8 : dtype_row_bytes(t, dim);
  const int64_t bytes = off[bags] * rb;
  const int64_t chunk = 32, chunks = (bags + chunk - 1) / chunk;
  parallel_for(chunks, parallel_threads(0, bytes, cpu_num_threads()), [&](int64_t c, int) {
    std::vector<float> buf(t == DType::kF16 ? static_cast<size_t>(dim) : 0);
    for (int64_t b = c * chunk; b < std::min(bags, (c + 1) * chunk); ++b) {
      float* acc = out + b * dim;
      std::fill(acc, acc + dim, 0.0f);
      for (int64_t i = off[b]; i < off[b + 1]; ++i) {
        // Rows are random accesses: ask for the row kPrefetch indices ahead now.
        if (i + kPrefetch < off[bags]) {
          const uint8_t* next = base + static_cast<int64_t>(idx[i + kPrefetch]) * rb;
          for (int64_t o = 0; o < rb; o += 64) __builtin_prefetch(next + o);
        }
        const uint8_t* row = base + static_cast<int64_t>(idx[i]) * rb;
        if (t == DType::kF32) {
          const float* __restrict v = reinterpret_cast<const float*>(row);
          float* __restrict a = acc;
          for (int64_t j = 0; j < dim; ++j) a[j] += v[j];
        } else if (t == DType::kF16) {
          isa().dequantize_row(DType::kF16, row, buf.data(), dim);  // exact, vectorised
          const float* __restrict v = buf.data();
          float* __restrict a = acc;
          for (int64_t j = 0; j < dim; ++j) a[j] += v[j];
        } else {
          float scale, bias;
          std::memcpy(&scale, row + dim, 4);
          std::memcpy(&bias, row + dim + 4, 4);
          for (int64_t j = 0; j < dim; ++j) acc[j] += static_cast<float>(row[j]) * scale + bias;
        }
      }
      const int64_t n = off[b + 1] - off[b];
      if (mode == ops::BagMode::kMean && n > 0) {
        const float inv = 1.0f / static_cast<float>(n);
        for (int64_t j = 0; j < dim; ++j) acc[j] *= inv;
      }
    }
  });
}

}  // namespace

void embedding_bag(const Tensor& table, const Tensor& indices, const Tensor& offsets,
                   const Tensor& out, ops::BagMode mode) {
  const int64_t dim = ops::embedding_bag_dim(table), bags = offsets.size(0) - 1;
  ops::check_embedding_bag_indices(indices.raw_data(), indices.dtype(), indices.numel(),
                                   offsets.raw_data(), offsets.dtype(), bags, table.size(0));
  std::vector<int64_t> off(static_cast<size_t>(bags + 1));
  for (int64_t b = 0; b <= bags; ++b)
    off[b] =
        offsets.dtype() == DType::kI64 ? offsets.data<int64_t>()[b] : offsets.data<int32_t>()[b];
  if (indices.dtype() == DType::kI64)
    pool_bags(table, dim, indices.data<int64_t>(), off.data(), bags, mode, out.data<float>());
  else
    pool_bags(table, dim, indices.data<int32_t>(), off.data(), bags, mode, out.data<float>());
}

}  // namespace tandem::cpu::fast
