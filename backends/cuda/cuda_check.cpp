// SPDX-License-Identifier: Apache-2.0
#include "cuda_check.h"

#include <cstring>

#include "tandem/core/log.h"

namespace tandem::cuda {
namespace {

const char* base_name(const char* file) {
  const char* slash = std::strrchr(file, '/');
  return slash ? slash + 1 : file;
}

}  // namespace

std::string describe(cudaError_t e) {
  return cat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so that later calls are not reported against it
  if (e == cudaErrorMemoryAllocation)
    throw OutOfMemory(cat(base_name(file), ":", line, ": ", call, " failed: ", describe(e)));
  throw DeviceError(cat(base_name(file), ":", line, ": ", call, " failed: ", describe(e)));
}

void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line) {
  const std::string msg =
      cat(base_name(file), ":", line, ": ", call, " failed: ", cublasGetStatusName(s), " (",
          cublasGetStatusString(s), ")");
  if (s == CUBLAS_STATUS_ALLOC_FAILED) throw OutOfMemory(msg);
  throw DeviceError(msg);
}

void warn_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  cudaGetLastError();
  // At process exit the runtime may already be unloaded; that is not worth a warning.
  if (e == cudaErrorCudartUnloading) return;
  log().warn("{}:{}: {} failed: {}", base_name(file), line, call, describe(e));
}

namespace {
thread_local bool t_in_host_function = false;
}  // namespace

bool in_host_function() { return t_in_host_function; }

void check_not_in_host_function(const char* what) {
  if (t_in_host_function)
    throw DeviceError(cat(what,
                          ": CUDA calls are not allowed inside a host function launched on a CUDA "
                          "stream; enqueue the work from the launching thread instead"));
}

namespace detail {
void set_in_host_function(bool v) { t_in_host_function = v; }
}  // namespace detail

DeviceGuard::DeviceGuard(int device) {
  TANDEM_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) TANDEM_CUDA_WARN(cudaSetDevice(previous_));
}

}  // namespace tandem::cuda
