// SPDX-License-Identifier: Apache-2.0
// Error wrapping for CUDA runtime and cuBLAS calls. Every call goes through one of these macros,
// which throw tandem::DeviceError naming the call, the file and line, and the runtime's
// description:
//   TANDEM_CUDA_CHECK(cudaMalloc(&p, n));
//   -> "cuda_allocator.cpp:40: cudaMalloc(&p, n) failed: cudaErrorInvalidValue (invalid argument)"
// Nothing here aborts or exits. Destructors use TANDEM_CUDA_WARN, which logs instead of throwing.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "tandem/core/error.h"

namespace tandem::cuda {

// "cudaErrorNoDevice (no CUDA-capable device is detected)"
std::string describe(cudaError_t e);

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t s, const char* call, const char* file,
                                     int line);
void warn_cuda_error(cudaError_t e, const char* call, const char* file, int line);

// Set while a host function launched on a CUDA stream runs: CUDA API calls are not allowed there.
bool in_host_function();
// Throws DeviceError when called from inside a host function (`what` names the operation).
void check_not_in_host_function(const char* what);
namespace detail {
void set_in_host_function(bool v);  // used by the stream's host-function trampoline
}  // namespace detail

// Makes `device` current for the scope and restores the previous current device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool changed_ = false;
};

}  // namespace tandem::cuda

#define TANDEM_CUDA_CHECK(call)                                                 \
  do {                                                                          \
    const cudaError_t tandem_err_ = (call);                                     \
    if (tandem_err_ != cudaSuccess)                                             \
      ::tandem::cuda::throw_cuda_error(tandem_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define TANDEM_CUBLAS_CHECK(call)                                                \
  do {                                                                           \
    const cublasStatus_t tandem_st_ = (call);                                    \
    if (tandem_st_ != CUBLAS_STATUS_SUCCESS)                                     \
      ::tandem::cuda::throw_cublas_error(tandem_st_, #call, __FILE__, __LINE__); \
  } while (0)

#define TANDEM_CUDA_WARN(call)                                                 \
  do {                                                                         \
    const cudaError_t tandem_err_ = (call);                                    \
    if (tandem_err_ != cudaSuccess)                                            \
      ::tandem::cuda::warn_cuda_error(tandem_err_, #call, __FILE__, __LINE__); \
  } while (0)
