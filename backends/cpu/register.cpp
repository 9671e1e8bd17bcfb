// SPDX-License-Identifier: Apache-2.0
// The CPU backend: host allocator with byte accounting, CPU streams, memcpy copies, fast kernels.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "cpu_kernels.h"
#include "cpu_stream.h"
#include "kernels/cpu_info.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/core/tensor.h"

namespace tandem {
namespace {

class CpuAllocator final : public Allocator {
 public:
  CpuAllocator() : Allocator(Device::cpu()) {}

 protected:
  void* raw_allocate(size_t bytes, size_t alignment) override {
    const size_t align = std::max(alignment, sizeof(void*));
    const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    if (!p) throw OutOfMemory(cat("cpu: cannot allocate ", bytes, " bytes"));
    return p;
  }
  void raw_deallocate(void* ptr, size_t) override { std::free(ptr); }
};

class CpuBackend final : public Backend {
 public:
  CpuBackend() : kernels_(cpu::make_fast_kernels()) {}
  DeviceType type() const override { return DeviceType::kCpu; }
  std::string name() const override { return "cpu"; }
  int device_count() const override { return 1; }
  DeviceInfo device_info(int index) const override {
    check_index(index);
    const auto& c = cpu::cpu_info();
    DeviceInfo d;
    d.device = Device::cpu();
    d.name = cat(c.model, " (", c.threads, " threads)");
    d.memory_bytes = c.memory_bytes;
    d.compute_units = c.threads;
    d.features = c.features();
    return d;
  }
  Allocator& allocator(int index) override {
    check_index(index);
    return allocator_;
  }
  std::unique_ptr<Stream> create_stream(int index) override {
    check_index(index);
    return cpu::make_stream();
  }
  std::unique_ptr<Event> create_event(int index) override {
    check_index(index);
    return cpu::make_event();
  }
  void copy(const Tensor& src, Tensor& dst, Stream* s) override {
    TANDEM_CHECK(src.device().is_cpu() && dst.device().is_cpu())
        << "cpu backend copy between " << src.device().to_string() << " and "
        << dst.device().to_string();
    TANDEM_CHECK(src.is_contiguous() && dst.is_contiguous() && src.nbytes() == dst.nbytes());
    cpu::run_on(s, [src, dst] {
      std::memcpy(dst.raw_data(), src.raw_data(), static_cast<size_t>(src.nbytes()));
    });
  }
  void synchronize(int index) override { check_index(index); }
  ops::OpKernels& kernels() override { return *kernels_; }

 private:
  static void check_index(int index) {
    if (index != 0) throw NotFound(cat("no device cpu:", index, " (the CPU is cpu:0)"));
  }
  CpuAllocator allocator_;
  std::unique_ptr<ops::OpKernels> kernels_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

ops::OpKernels& ops::cpu_reference_kernels() { return cpu::reference_kernels(); }

namespace {
std::atomic<int>& thread_setting() {
  static std::atomic<int> n = [] {
    if (const char* env = std::getenv("TANDEM_NUM_THREADS"); env && std::atoi(env) > 0)
      return std::atoi(env);
    return cpu::cpu_info().threads;
  }();
  return n;
}
}  // namespace

int cpu_num_threads() { return thread_setting().load(std::memory_order_relaxed); }

void set_cpu_num_threads(int n) {
  if (n < 1) throw InvalidArgument(cat("set_cpu_num_threads(", n, "): need at least 1"));
  thread_setting().store(n, std::memory_order_relaxed);
}

}  // namespace tandem
