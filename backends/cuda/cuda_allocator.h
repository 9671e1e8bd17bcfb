// SPDX-License-Identifier: Apache-2.0
// CudaAllocator: device memory of one GPU through cudaMalloc/cudaFree, with the byte accounting of
// tandem::Allocator. No caching: cudaFree synchronizes the device, so a freed block is never reused
// while a kernel still reads it (tensors used by queued work are kept alive by the streams, see
// cuda_stream.h). A free requested inside a CUDA host function (where CUDA calls are not allowed)
// is deferred to the next allocation or free on an ordinary thread. Thread-safety: all methods may
// be called from any thread.
#pragma once

#include <mutex>
#include <vector>

#include "tandem/core/allocator.h"

namespace tandem::cuda {

class CudaAllocator final : public Allocator {
 public:
  // `index` is the tandem device index (cuda:index), `ordinal` the CUDA runtime's device number.
  CudaAllocator(int index, int ordinal) : Allocator(Device::cuda(index)), ordinal_(ordinal) {}

 protected:
  void* raw_allocate(size_t bytes, size_t alignment) override;
  void raw_deallocate(void* ptr, size_t bytes) override;

 private:
  void free_now(void* ptr) noexcept;
  void free_deferred() noexcept;

  int ordinal_;
  std::mutex mu_;
  std::vector<void*> deferred_;
};

}  // namespace tandem::cuda
