// SPDX-License-Identifier: Apache-2.0
// embedding_bag: one thread per output element (bag, column), grid-stride; each thread walks its
// bag's indices in order and accumulates the decoded column in f32, which keeps the kernel small
// and its summation order that of the CPU fast kernel. Consecutive threads read consecutive
// columns of one row, so the row reads coalesce.
#include "common.cuh"

namespace tandem::cuda::k {
namespace {

__device__ __forceinline__ int64_t load_index(const void* p, int is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i]
              : static_cast<int64_t>(static_cast<const int32_t*>(p)[i]);
}

__global__ void embedding_bag_kernel(EmbeddingBagArgs a) {
  const auto* base = static_cast<const uint8_t*>(a.table);
  const bool u8 = a.table_dtype == DType::kU8;
  const int64_t rb = u8 ? a.dim + 8 : (a.table_dtype == DType::kF16 ? 2 * a.dim : 4 * a.dim);
  const int64_t n = a.bags * a.dim;
  for (int64_t e = global_thread(); e < n; e += grid_threads()) {
    const int64_t b = e / a.dim, j = e - b * a.dim;
    const int64_t lo = load_index(a.offsets, a.offsets_64, b);
    const int64_t hi = load_index(a.offsets, a.offsets_64, b + 1);
    float acc = 0.0f;
    for (int64_t i = lo; i < hi; ++i) {
      int64_t r = load_index(a.indices, a.indices_64, i);
      r = r < 0 ? 0 : (r >= a.rows ? a.rows - 1 : r);
      const uint8_t* row = base + r * rb;
      if (u8) {
        float scale, bias;
        memcpy(&scale, row + a.dim, 4);
        memcpy(&bias, row + a.dim + 4, 4);
        acc += static_cast<float>(row[j]) * scale + bias;
      } else {
        acc += load_weight(a.table_dtype, row, j);
      }
    }
    if (a.mean && hi > lo) acc *= 1.0f / static_cast<float>(hi - lo);
    a.out[e] = acc;
  }
}

}  // namespace

cudaError_t embedding_bag(const EmbeddingBagArgs& a, cudaStream_t s) {
  if (a.bags * a.dim == 0) return cudaSuccess;
  embedding_bag_kernel<<<grid_for(a.bags * a.dim), kThreads, 0, s>>>(a);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::k
