// SPDX-License-Identifier: Apache-2.0
#include "cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "cuda_check.h"
#include "tandem/core/error.h"

namespace tandem::cuda {

namespace {
constexpr size_t kCudaMallocAlignment = 256;  // cudaMalloc guarantees at least this
}  // namespace

void* CudaAllocator::raw_allocate(size_t bytes, size_t alignment) {
  check_not_in_host_function("allocate");
  if (alignment > kCudaMallocAlignment)
    throw InvalidArgument(cat(device().to_string(), ": alignment ", alignment, " exceeds the ",
                              kCudaMallocAlignment, " bytes cudaMalloc guarantees"));
  free_deferred();
  DeviceGuard g(ordinal_);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    cudaGetLastError();
    throw OutOfMemory(cat(device().to_string(), ": cannot allocate ", bytes, " bytes (", free_b,
                          " of ", total_b, " bytes free; tandem holds ", stats().current_bytes,
                          ")"));
  }
  if (e != cudaSuccess) throw_cuda_error(e, "cudaMalloc(&p, bytes)", __FILE__, __LINE__);
  return p;
}

void CudaAllocator::raw_deallocate(void* ptr, size_t) {
  if (ptr == nullptr) return;
  if (in_host_function()) {
    std::lock_guard lk(mu_);
    deferred_.push_back(ptr);
    return;
  }
  free_deferred();
  free_now(ptr);
}

void CudaAllocator::free_now(void* ptr) noexcept {
  int previous = -1;
  const bool switch_device = cudaGetDevice(&previous) == cudaSuccess && previous != ordinal_;
  if (switch_device) TANDEM_CUDA_WARN(cudaSetDevice(ordinal_));
  TANDEM_CUDA_WARN(cudaFree(ptr));
  if (switch_device) TANDEM_CUDA_WARN(cudaSetDevice(previous));
}

void CudaAllocator::free_deferred() noexcept {
  std::vector<void*> ptrs;
  {
    std::lock_guard lk(mu_);
    if (deferred_.empty()) return;
    ptrs.swap(deferred_);
  }
  for (void* p : ptrs) free_now(p);
}

}  // namespace tandem::cuda
