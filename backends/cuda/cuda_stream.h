// SPDX-License-Identifier: Apache-2.0
// CUDA streams and events (see tandem/core/stream.h for the contract).
//
// CudaStream wraps a non-blocking cudaStream_t of one device. launch(fn) enqueues fn with
// cudaLaunchHostFunc; the closure lives until it has run, an exception it throws is stored and
// re-thrown by the next synchronize(), and the spent closure is destroyed later on an ordinary
// thread (its captures may free CUDA memory, which a host function must not do). wait() on a CUDA
// event uses cudaStreamWaitEvent (any device); on a foreign (CPU) event it enqueues a host function
// that blocks in that event's synchronize(), so the caller must keep such an event alive until the
// stream has passed it. Ops enqueued on a stream keep their tensors alive with retain(): an event
// is recorded after the work and the tensors are released once it has completed (checked at the
// next retain() and at synchronize()). Caveat of a stream parked on a foreign event: under CUDA's
// lazy module loading (the default) the first launch of a kernel in the process may synchronize
// the context, so launching a never-used kernel while a stream waits for a CPU event that only the
// launching thread will complete deadlocks; launch such kernels once beforehand. CudaEvent wraps a
// cudaEvent_t created with cudaEventDisableTiming; it can only be recorded on a stream of its own
// device. Thread-safety: every method may be called from any thread.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "tandem/core/stream.h"
#include "tandem/core/tensor.h"

namespace tandem::cuda {

class CudaEvent final : public Event {
 public:
  // `index` is the tandem device index (cuda:index), `ordinal` the CUDA runtime's device number.
  CudaEvent(int index, int ordinal);
  ~CudaEvent() override;
  Device device() const override { return Device::cuda(index_); }
  bool query() const override;
  void synchronize() override;
  cudaEvent_t handle() const { return event_; }

 private:
  int index_;
  int ordinal_;
  cudaEvent_t event_ = nullptr;
};

class CudaStream final : public Stream {
 public:
  CudaStream(int index, int ordinal);
  ~CudaStream() override;
  Device device() const override { return Device::cuda(index_); }
  void launch(std::function<void()> fn) override;
  void record(Event& event) override;
  void wait(Event& event) override;
  void synchronize() override;
  void* native_handle() const override { return stream_; }

  cudaStream_t handle() const { return stream_; }
  int index() const { return index_; }
  int ordinal() const { return ordinal_; }
  // Keeps `keep` alive until the work enqueued so far on this stream has completed.
  void retain(std::vector<Tensor> keep);
  // Waits for the stream without re-throwing host-function errors (for synchronous op calls).
  void wait_idle();
  // The cuBLAS handle bound to this stream (created on first use). Hold cublas_mutex() while using
  // it.
  cublasHandle_t cublas();
  std::mutex& cublas_mutex() { return cublas_mu_; }

  struct Shared;  // state shared with host functions in flight

 private:
  struct Pending {
    cudaEvent_t done;
    std::vector<Tensor> keep;
    uint64_t seq;
  };
  static constexpr size_t kReleaseBatch = 64;
  void maybe_release();      // release_completed() when kReleaseBatch items are waiting
  void release_completed();  // drops retained tensors whose work completed and spent host closures
  // Drops retained tensors with seq <= last (their work is known to be complete).
  void release_through(uint64_t last);

  int index_;
  int ordinal_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<Shared> shared_;
  std::mutex mu_;  // pending_ and free_events_
  std::deque<Pending> pending_;
  uint64_t next_seq_ = 1;
  std::vector<cudaEvent_t> free_events_;
  std::mutex cublas_mu_;
  cublasHandle_t cublas_ = nullptr;
};

}  // namespace tandem::cuda
