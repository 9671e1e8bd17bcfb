// SPDX-License-Identifier: Apache-2.0
// The CUDA backend object, its copies, and the module entry point tandem_backend_create().
#include "cuda_backend.h"

#include <cuda_runtime_api.h>

#include "cuda_check.h"
#include "tandem/core/error.h"
#include "tandem/core/log.h"
#include "tandem/export.h"

#ifndef TANDEM_CUDA_MIN_ARCH
#define TANDEM_CUDA_MIN_ARCH 0
#endif

namespace tandem::cuda {
namespace {

// 13000 -> "13.0"
std::string version_string(int v) { return cat(v / 1000, ".", (v % 1000) / 10); }

}  // namespace

CudaBackend::CudaBackend() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    reason_ = "no usable CUDA device: " + describe(e);
  } else if (n == 0) {
    reason_ = "no usable CUDA device: the CUDA runtime found 0 devices";
  } else {
    std::string skipped;
    for (int ordinal = 0; ordinal < n; ++ordinal) {
      int major = 0, minor = 0;
      const cudaError_t e1 =
          cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal);
      const cudaError_t e2 =
          cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal);
      std::string why;
      if (e1 != cudaSuccess || e2 != cudaSuccess) {
        cudaGetLastError();
        why = cat("CUDA device ", ordinal, ": ", describe(e1 != cudaSuccess ? e1 : e2));
      } else if (major * 10 + minor < TANDEM_CUDA_MIN_ARCH) {
        why = cat("CUDA device ", ordinal, " is sm_", major, minor,
                  " but libtandem_cuda targets sm_", TANDEM_CUDA_MIN_ARCH, " and newer");
      }
      if (!why.empty()) {
        skipped += (skipped.empty() ? "" : "; ") + why;
        continue;
      }
      auto d = std::make_unique<PerDevice>();
      d->ordinal = ordinal;
      d->allocator = std::make_unique<CudaAllocator>(static_cast<int>(devices_.size()), ordinal);
      devices_.push_back(std::move(d));
    }
    if (devices_.empty()) {
      reason_ = "no usable CUDA device: " + skipped;
    } else if (!skipped.empty()) {
      log().info("cuda: skipping unusable devices: {}", skipped);
    }
  }
  kernels_ = make_cuda_kernels(*this);
}

CudaBackend::~CudaBackend() = default;

CudaBackend::PerDevice& CudaBackend::at(int index) const {
  if (index < 0 || index >= device_count()) {
    throw NotFound(cat("device cuda:", index, " does not exist (", device_count(),
                       " usable CUDA device(s)", reason_.empty() ? "" : ": " + reason_, ")"));
  }
  return *devices_[static_cast<size_t>(index)];
}

int CudaBackend::ordinal(int index) const { return at(index).ordinal; }

DeviceInfo CudaBackend::device_info(int index) const {
  const PerDevice& d = at(index);
  cudaDeviceProp prop{};
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, d.ordinal));
  int driver = 0, runtime = 0;
  TANDEM_CUDA_CHECK(cudaDriverGetVersion(&driver));
  TANDEM_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  DeviceInfo info;
  info.device = Device::cuda(index);
  info.name = prop.name;
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.compute_units = prop.multiProcessorCount;
  info.features = cat("sm_", prop.major, prop.minor, ", driver ", version_string(driver),
                      ", runtime ", version_string(runtime));
  return info;
}

Allocator& CudaBackend::allocator(int index) { return *at(index).allocator; }

std::unique_ptr<Stream> CudaBackend::create_stream(int index) {
  return std::make_unique<CudaStream>(index, at(index).ordinal);
}

std::unique_ptr<Event> CudaBackend::create_event(int index) {
  return std::make_unique<CudaEvent>(index, at(index).ordinal);
}

CudaStream& CudaBackend::internal_stream(int index) {
  PerDevice& d = at(index);
  std::call_once(d.stream_once, [&] { d.stream = std::make_unique<CudaStream>(index, d.ordinal); });
  return *d.stream;
}

void CudaBackend::synchronize(int index) {
  check_not_in_host_function("synchronize");
  DeviceGuard g(at(index).ordinal);
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
}

void CudaBackend::copy(const Tensor& src, Tensor& dst, Stream* s) {
  check_not_in_host_function("copy");
  if (!src.defined() || !dst.defined()) throw InvalidArgument("cuda copy: undefined tensor");
  if (src.dtype() != dst.dtype() || src.nbytes() != dst.nbytes())
    throw InvalidArgument(cat("cuda copy: ", src.to_string(), " into ", dst.to_string()));
  if (!src.is_contiguous() || !dst.is_contiguous())
    throw InvalidArgument(
        cat("cuda copy needs contiguous tensors: ", src.to_string(), " into ", dst.to_string()));
  if (!src.device().is_cuda() && !dst.device().is_cuda())
    throw InvalidArgument(
        cat("cuda copy between ", src.device().to_string(), " and ", dst.device().to_string()));
  for (const Tensor* t : {&src, static_cast<const Tensor*>(&dst)})
    if (t->device().is_cuda()) at(t->device().index);  // throws NotFound for absent devices
  if (src.nbytes() == 0) return;
  if (s == nullptr) {
    CudaStream& st =
        internal_stream(dst.device().is_cuda() ? dst.device().index : src.device().index);
    copy_now(src, dst, st);
    st.wait_idle();
    return;
  }
  if (auto* cs = dynamic_cast<CudaStream*>(s)) {
    copy_now(src, dst, *cs);
    cs->retain({src, dst});
    return;
  }
  // A foreign (CPU) stream: copy synchronously when that stream reaches this point.
  s->launch([this, src, dst]() mutable { copy(src, dst, nullptr); });
}

void CudaBackend::copy_now(const Tensor& src, Tensor& dst, CudaStream& stream) {
  const auto bytes = static_cast<size_t>(src.nbytes());
  void* to = dst.raw_data();
  const void* from = src.raw_data();
  DeviceGuard g(stream.ordinal());
  if (src.device().is_cpu()) {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, stream.handle()));
  } else if (dst.device().is_cpu()) {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToHost, stream.handle()));
  } else {
    const int src_ord = ordinal(src.device().index), dst_ord = ordinal(dst.device().index);
    if (src_ord == dst_ord) {
      TANDEM_CUDA_CHECK(
          cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, stream.handle()));
    } else {
      TANDEM_CUDA_CHECK(cudaMemcpyPeerAsync(to, dst_ord, from, src_ord, bytes, stream.handle()));
    }
  }
}

}  // namespace tandem::cuda

extern "C" TANDEM_API tandem::Backend* tandem_backend_create() {
  return new tandem::cuda::CudaBackend();
}
