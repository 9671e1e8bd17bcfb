// SPDX-License-Identifier: Apache-2.0
// Backend: one kind of device (CPU, CUDA) with its allocators, streams, copies and op kernels.
// BackendRegistry: the backends of this process. Registration is explicit: the first call to
// BackendRegistry::global() registers the CPU backend (always present) and tries to load the CUDA
// module (libtandem_cuda.so next to libtandem.so, or the path in TANDEM_BACKEND_PATH). A missing or
// unusable module is recorded in load_errors() and the process goes on with the CPU.
//
//   auto& reg = tandem::BackendRegistry::global();
//   for (auto& d : reg.devices()) fmt::print("{}\n", reg.get(d).device_info(d.index).name);
//   if (auto* cuda = reg.find(tandem::DeviceType::kCuda); !cuda || cuda->device_count() == 0) ...
//
// Thread-safety: the registry and backends may be used from any thread after global() returned.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/core/allocator.h"
#include "tandem/core/device.h"
#include "tandem/core/stream.h"
#include "tandem/export.h"
#include "tandem/ops/ops.h"

namespace tandem {

struct DeviceInfo {
  Device device;
  std::string name;          // "AMD EPYC 9B14 (2 threads)", "NVIDIA H200"
  int64_t memory_bytes = 0;  // total device memory (host RAM for the CPU)
  int compute_units = 0;     // CPU threads or CUDA SMs
  std::string features;      // "avx2 fma avx512f ..." or "sm_90, driver 13.0"
};

class TANDEM_API Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual int device_count() const = 0;
  // Why device_count() is 0 ("no usable CUDA device: cudaErrorNoDevice"); empty when devices exist.
  virtual std::string unavailable_reason() const { return {}; }
  virtual DeviceInfo device_info(int index) const = 0;
  virtual Allocator& allocator(int index) = 0;
  virtual std::unique_ptr<Stream> create_stream(int index) = 0;
  virtual std::unique_ptr<Event> create_event(int index) = 0;
  // Copies src into dst: same dtype and shape, both contiguous; one side is on this backend, the
  // other on this backend or the CPU. Synchronous when s is nullptr, else ordered on s.
  virtual void copy(const Tensor& src, Tensor& dst, Stream* s) = 0;
  // Blocks until all work this backend started on the device is done.
  virtual void synchronize(int index) = 0;
  virtual ops::OpKernels& kernels() = 0;
};

class TANDEM_API BackendRegistry {
 public:
  static BackendRegistry& global();

  // Adds a backend; replaces an earlier one of the same type (the replaced one stays alive: a
  // tensor or a thread may still hold it).
  void add(std::unique_ptr<Backend> backend);
  // The backend of a type, or nullptr. Lock-free: every op looks its backend up here.
  Backend* find(DeviceType type) const;
  // The backend owning a device; throws NotFound when the backend or device index does not exist.
  Backend& get(Device device) const;
  std::vector<Backend*> backends() const;
  // Every usable device, CPU first.
  std::vector<Device> devices() const;
  // Messages from backend modules that could not be loaded.
  std::vector<std::string> load_errors() const;
  // Loads a backend module (a shared library exporting tandem_backend_create); false + error on
  // failure.
  bool load_module(const std::string& path, std::string* error = nullptr);

 private:
  BackendRegistry() = default;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Backend>> backends_;  // in order of addition, never removed
  std::array<std::atomic<Backend*>, 2> by_type_{};  // the current one per DeviceType
  std::vector<std::string> load_errors_;
};

// The CPU backend (also what a backend module's copy() uses for the host side).
TANDEM_API std::unique_ptr<Backend> make_cpu_backend();

// Number of threads CPU kernels use (default: hardware threads, or TANDEM_NUM_THREADS).
TANDEM_API int cpu_num_threads();
TANDEM_API void set_cpu_num_threads(int n);

}  // namespace tandem

// A backend module exports this C function: returns a new backend (ownership passes to the caller).
extern "C" {
typedef tandem::Backend* (*tandem_backend_create_fn)();
}
