// SPDX-License-Identifier: Apache-2.0
// CudaBackend: the tandem::Backend of the CUDA module. It enumerates the usable GPUs (those the
// module's kernels were compiled for), owns one allocator and one internal stream per device (ops
// and copies called with a null stream run on it and wait for it), and copies between host and
// devices and between devices. With no driver or no GPU it still constructs, reports device_count()
// == 0 and says why in unavailable_reason(). Thread-safety: all methods may be called from any
// thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_allocator.h"
#include "cuda_stream.h"
#include "tandem/core/backend.h"

namespace tandem::cuda {

class CudaBackend final : public Backend {
 public:
  CudaBackend();
  ~CudaBackend() override;

  DeviceType type() const override { return DeviceType::kCuda; }
  std::string name() const override { return "cuda"; }
  int device_count() const override { return static_cast<int>(devices_.size()); }
  std::string unavailable_reason() const override { return reason_; }
  DeviceInfo device_info(int index) const override;
  Allocator& allocator(int index) override;
  std::unique_ptr<Stream> create_stream(int index) override;
  std::unique_ptr<Event> create_event(int index) override;
  void copy(const Tensor& src, Tensor& dst, Stream* s) override;
  void synchronize(int index) override;
  ops::OpKernels& kernels() override { return *kernels_; }

  // The CUDA runtime's device number of cuda:index; throws NotFound for bad indices.
  int ordinal(int index) const;
  // The internal stream of cuda:index that calls with a null stream run on (created on first use).
  CudaStream& internal_stream(int index);

 private:
  struct PerDevice {
    int ordinal = 0;
    std::unique_ptr<CudaAllocator> allocator;
    std::once_flag stream_once;
    std::unique_ptr<CudaStream> stream;
  };
  PerDevice& at(int index) const;
  void copy_now(const Tensor& src, Tensor& dst, CudaStream& stream);

  std::vector<std::unique_ptr<PerDevice>> devices_;
  std::string reason_;
  std::unique_ptr<ops::OpKernels> kernels_;
};

// The kernel table of the backend (cuda_ops.cpp).
std::unique_ptr<ops::OpKernels> make_cuda_kernels(CudaBackend& backend);

}  // namespace tandem::cuda
