// SPDX-License-Identifier: Apache-2.0
#include "tandem/core/allocator.h"

#include "tandem/core/backend.h"
#include "tandem/core/error.h"

namespace tandem {

void* Allocator::allocate(size_t bytes, size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw InvalidArgument(cat("allocate: alignment ", alignment, " is not a power of two"));
  void* p = raw_allocate(bytes, alignment);
  const auto n = static_cast<int64_t>(bytes);
  const int64_t now = current_.fetch_add(n, std::memory_order_relaxed) + n;
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  total_.fetch_add(n, std::memory_order_relaxed);
  allocs_.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void Allocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr && bytes == 0) return;
  raw_deallocate(ptr, bytes);
  current_.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  frees_.fetch_add(1, std::memory_order_relaxed);
}

MemoryStats Allocator::stats() const {
  MemoryStats s;
  s.current_bytes = current_.load(std::memory_order_relaxed);
  s.peak_bytes = peak_.load(std::memory_order_relaxed);
  s.allocated_bytes = total_.load(std::memory_order_relaxed);
  s.num_allocs = allocs_.load(std::memory_order_relaxed);
  s.num_frees = frees_.load(std::memory_order_relaxed);
  return s;
}

void Allocator::reset_peak() {
  peak_.store(current_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

Allocator& allocator(Device device) {
  auto& b = BackendRegistry::global().get(device);
  return b.allocator(device.index);
}

MemoryStats memory_stats(Device device) { return allocator(device).stats(); }

}  // namespace tandem
