// SPDX-License-Identifier: Apache-2.0
// Stream and Event: in-order asynchronous work queues and the markers that order them.
//
// A Stream runs what is submitted to it in submission order, asynchronously to the caller. On the
// CPU it is a serial queue whose items are executed by a shared pool of worker threads (a stream
// occupies a worker only while it has runnable work, so thousands of streams are cheap). On CUDA it
// is a cudaStream_t. An Event is recorded on a stream and completes when everything submitted
// before the record has run; another stream can wait() on it without blocking the host, and the
// host can synchronize() on it.
//
//   auto s1 = tandem::create_stream(tandem::Device::cpu());
//   auto s2 = tandem::create_stream(tandem::Device::cpu());
//   auto e = tandem::create_event(tandem::Device::cpu());
//   s1->launch([&] { produce(); });
//   s1->record(*e);
//   s2->wait(*e);                       // s2's later work runs after produce()
//   s2->launch([&] { consume(); });
//   s2->synchronize();
//
// Ops take an optional Stream*: nullptr means "run now, synchronously"; a stream means "enqueue".
// Errors thrown by a host function are kept and re-thrown by the next synchronize() of that stream.
// Thread-safety: all methods may be called concurrently from any thread.
#pragma once

#include <functional>
#include <memory>

#include "tandem/core/device.h"
#include "tandem/export.h"

namespace tandem {

class TANDEM_API Event {
 public:
  virtual ~Event() = default;
  virtual Device device() const = 0;
  // True when the last record() has completed (or the event was never recorded).
  virtual bool query() const = 0;
  // Blocks the calling thread until the last record() has completed.
  virtual void synchronize() = 0;
};

class TANDEM_API Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;
  // Enqueues a host function; it runs after all earlier work of this stream.
  virtual void launch(std::function<void()> fn) = 0;
  // Marks the current end of the queue on `event`.
  virtual void record(Event& event) = 0;
  // Later work of this stream starts only after `event`'s last record completed. Does not block the
  // caller.
  virtual void wait(Event& event) = 0;
  // Blocks until all submitted work has run; re-throws the first error a host function raised since
  // the last synchronize().
  virtual void synchronize() = 0;
  // cudaStream_t for CUDA streams, nullptr for CPU streams.
  virtual void* native_handle() const { return nullptr; }
};

TANDEM_API std::unique_ptr<Stream> create_stream(Device device);
TANDEM_API std::unique_ptr<Event> create_event(Device device);

}  // namespace tandem
