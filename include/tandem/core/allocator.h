// SPDX-License-Identifier: Apache-2.0
// Allocator: device memory with byte accounting. Every tensor buffer is obtained here, so the
// current and peak bytes per device are measured facts (memory claims in tandem come from these
// counters).
//
//   auto& a = tandem::allocator(tandem::Device::cpu());
//   a.reset_peak();
//   { auto t = tandem::Tensor::empty({1024, 1024}, tandem::DType::kF32); }
//   a.stats().peak_bytes;   // >= 4 MiB
//
// Thread-safety: allocate/deallocate/stats may be called from any thread (counters are atomic).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tandem/core/device.h"
#include "tandem/export.h"

namespace tandem {

struct MemoryStats {
  int64_t current_bytes = 0;    // live bytes now
  int64_t peak_bytes = 0;       // maximum of current_bytes since creation or the last reset_peak()
  int64_t allocated_bytes = 0;  // total bytes ever allocated (monotonic)
  int64_t num_allocs = 0;
  int64_t num_frees = 0;
};

class TANDEM_API Allocator {
 public:
  explicit Allocator(Device device) : device_(device) {}
  virtual ~Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Returns memory of at least `bytes` (0 allowed) aligned to `alignment` (a power of two);
  // throws OutOfMemory when the device cannot provide it.
  void* allocate(size_t bytes, size_t alignment = 64);
  void deallocate(void* ptr, size_t bytes);

  Device device() const { return device_; }
  MemoryStats stats() const;
  void reset_peak();  // peak := current

 protected:
  virtual void* raw_allocate(size_t bytes, size_t alignment) = 0;
  virtual void raw_deallocate(void* ptr, size_t bytes) = 0;

 private:
  Device device_;
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> total_{0};
  std::atomic<int64_t> allocs_{0};
  std::atomic<int64_t> frees_{0};
};

// The allocator of a device (through the backend registry); throws NotFound for absent devices.
TANDEM_API Allocator& allocator(Device device);
TANDEM_API MemoryStats memory_stats(Device device);

}  // namespace tandem
