// SPDX-License-Identifier: Apache-2.0
#include "cuda_stream.h"

#include "cuda_check.h"
#include "tandem/core/error.h"
#include "tandem/core/log.h"

namespace tandem::cuda {

// -----------------------------------------------------------------------------------------------
// events

CudaEvent::CudaEvent(int index, int ordinal) : index_(index), ordinal_(ordinal) {
  check_not_in_host_function("create_event");
  DeviceGuard g(ordinal_);
  TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_) TANDEM_CUDA_WARN(cudaEventDestroy(event_));
}

bool CudaEvent::query() const {
  const cudaError_t e = cudaEventQuery(event_);
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) return false;
  throw_cuda_error(e, "cudaEventQuery(event)", __FILE__, __LINE__);
}

void CudaEvent::synchronize() { TANDEM_CUDA_CHECK(cudaEventSynchronize(event_)); }

// ----------------------------------------------------------------------------------------------
// streams

struct HostCall;

struct CudaStream::Shared {
  std::mutex mu;
  std::exception_ptr error;                      // first error a host function raised
  std::vector<std::unique_ptr<HostCall>> spent;  // closures that ran, destroyed off the callback
};

struct HostCall {
  std::function<void()> fn;
  std::shared_ptr<CudaStream::Shared> shared;
};

namespace {

void CUDART_CB run_host_call(void* arg) {
  std::unique_ptr<HostCall> call(static_cast<HostCall*>(arg));
  detail::set_in_host_function(true);
  try {
    call->fn();
  } catch (...) {
    std::lock_guard lk(call->shared->mu);
    if (!call->shared->error) call->shared->error = std::current_exception();
  }
  detail::set_in_host_function(false);
  // Destroying the closure may release CUDA tensors; CUDA calls are not allowed here, so hand it
  // back to the stream, which destroys it from an ordinary thread.
  auto shared = call->shared;
  std::lock_guard lk(shared->mu);
  shared->spent.push_back(std::move(call));
}

}  // namespace

CudaStream::CudaStream(int index, int ordinal)
    : index_(index), ordinal_(ordinal), shared_(std::make_shared<Shared>()) {
  check_not_in_host_function("create_stream");
  DeviceGuard g(ordinal_);
  TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  if (!stream_) return;
  TANDEM_CUDA_WARN(cudaStreamSynchronize(stream_));
  try {
    release_through(UINT64_MAX);
  } catch (const std::exception& e) {
    log().warn("cuda:{}: releasing a stream's retained tensors failed: {}", index_, e.what());
  }
  for (cudaEvent_t e : free_events_) TANDEM_CUDA_WARN(cudaEventDestroy(e));
  if (cublas_) {
    const cublasStatus_t st = cublasDestroy(cublas_);
    if (st != CUBLAS_STATUS_SUCCESS)
      log().warn("cuda:{}: cublasDestroy failed: {}", index_, cublasGetStatusName(st));
  }
  TANDEM_CUDA_WARN(cudaStreamDestroy(stream_));
}

void CudaStream::launch(std::function<void()> fn) {
  check_not_in_host_function("Stream::launch");
  maybe_release();
  auto call = std::make_unique<HostCall>(HostCall{std::move(fn), shared_});
  TANDEM_CUDA_CHECK(cudaLaunchHostFunc(stream_, run_host_call, call.get()));
  call.release();  // owned by the host function from now on
}

void CudaStream::record(Event& event) {
  check_not_in_host_function("Stream::record");
  auto* e = dynamic_cast<CudaEvent*>(&event);
  if (!e)
    throw InvalidArgument(cat("a CUDA stream (cuda:", index_,
                              ") can only record CUDA events, got an event of ",
                              event.device().to_string()));
  if (!(e->device() == device()))
    throw InvalidArgument(cat("cannot record an event of ", e->device().to_string(),
                              " on a stream of ", device().to_string(),
                              " (create the event on the stream's device)"));
  TANDEM_CUDA_CHECK(cudaEventRecord(e->handle(), stream_));
}

void CudaStream::wait(Event& event) {
  check_not_in_host_function("Stream::wait");
  if (auto* e = dynamic_cast<CudaEvent*>(&event)) {
    TANDEM_CUDA_CHECK(cudaStreamWaitEvent(stream_, e->handle(), 0));
    return;
  }
  // A foreign event (a CPU event): park the stream in a host function until it completes.
  launch([&event] { event.synchronize(); });
}

void CudaStream::wait_idle() {
  check_not_in_host_function("Stream::synchronize");
  uint64_t last;
  {
    std::lock_guard lk(mu_);
    last = next_seq_ - 1;  // work retained so far is complete once the stream is idle
  }
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  release_through(last);
}

void CudaStream::synchronize() {
  wait_idle();
  std::exception_ptr error;
  {
    std::lock_guard lk(shared_->mu);
    error = std::exchange(shared_->error, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void CudaStream::retain(std::vector<Tensor> keep) {
  maybe_release();
  cudaEvent_t done = nullptr;
  {
    std::lock_guard lk(mu_);
    if (!free_events_.empty()) {
      done = free_events_.back();
      free_events_.pop_back();
    }
  }
  if (!done) {
    DeviceGuard g(ordinal_);
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  }
  const cudaError_t e = cudaEventRecord(done, stream_);
  if (e != cudaSuccess) {
    // The work may still be running: keep the tensors until the stream is idle instead of failing
    // open.
    TANDEM_CUDA_WARN(cudaStreamSynchronize(stream_));
    TANDEM_CUDA_WARN(cudaEventDestroy(done));
    throw_cuda_error(e, "cudaEventRecord(done, stream)", __FILE__, __LINE__);
  }
  std::lock_guard lk(mu_);
  pending_.push_back(Pending{done, std::move(keep), next_seq_++});
}

void CudaStream::maybe_release() {
  bool many;
  {
    std::lock_guard lk(mu_);
    many = pending_.size() >= kReleaseBatch;
  }
  if (!many) {
    std::lock_guard lk(shared_->mu);
    many = shared_->spent.size() >= kReleaseBatch;
  }
  if (many) release_completed();
}

void CudaStream::release_completed() {
  std::vector<std::vector<Tensor>> released;  // destroyed outside the lock
  std::vector<std::unique_ptr<HostCall>> spent;
  {
    std::lock_guard lk(mu_);
    while (!pending_.empty()) {
      const cudaError_t e = cudaEventQuery(pending_.front().done);
      if (e == cudaErrorNotReady) break;
      if (e != cudaSuccess)
        throw_cuda_error(e, "cudaEventQuery(retained work)", __FILE__, __LINE__);
      free_events_.push_back(pending_.front().done);
      released.push_back(std::move(pending_.front().keep));
      pending_.pop_front();
    }
  }
  {
    std::lock_guard lk(shared_->mu);
    spent.swap(shared_->spent);
  }
}

void CudaStream::release_through(uint64_t last) {
  std::vector<std::vector<Tensor>> released;  // destroyed outside the lock
  std::vector<std::unique_ptr<HostCall>> spent;
  {
    std::lock_guard lk(mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->seq <= last) {
        free_events_.push_back(it->done);
        released.push_back(std::move(it->keep));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }
  {
    std::lock_guard lk(shared_->mu);
    spent.swap(shared_->spent);
  }
}

cublasHandle_t CudaStream::cublas() {
  // Called with cublas_mu_ held.
  if (!cublas_) {
    DeviceGuard g(ordinal_);
    cublasHandle_t h = nullptr;
    TANDEM_CUBLAS_CHECK(cublasCreate(&h));
    const cublasStatus_t st = cublasSetStream(h, stream_);
    if (st != CUBLAS_STATUS_SUCCESS) {
      cublasDestroy(h);
      throw_cublas_error(st, "cublasSetStream(handle, stream)", __FILE__, __LINE__);
    }
    cublas_ = h;
  }
  return cublas_;
}

}  // namespace tandem::cuda
