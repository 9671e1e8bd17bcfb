// SPDX-License-Identifier: Apache-2.0
// Worker: the process (or in-process thread) that runs pipeline stages for a coordinator.
//
// `tandem worker --listen tcp://127.0.0.1:0 --key cluster.key` constructs one and calls run(). It
// binds a ROUTER socket (CURVE server when given a key: peers without the cluster's key are
// refused by the handshake and logged), then serves the protocol of wire.h: kHello (answers with
// its pid, thread budget and stage kinds), kConfig (builds the stage through make_stage, e.g. an
// llm.layers stage that loads and hash-checks its GGUF, with an emulated device), kPacket (runs the
// stage, answers kResult with meta "compute_s"), kReset, kShutdown. Compute runs on a separate
// thread so that kPing is answered while a stage computes: a coordinator that hears nothing for
// its heartbeat timeout declares the worker dead or stalled. A malformed message is answered with
// kError and counted, never acted upon.
//
// Worker to worker: a kConfig may carry a StageRoute (wire.h). With a successor, the worker
// connects to it (hello, with its own cluster key; a successor it cannot reach fails the config
// with a message naming both workers) and sends each output of the stage there as kForward,
// answering the coordinator with the header only; it answers an error marked "successor_lost"
// when the successor stops answering mid-forward. A stage whose input comes from its predecessor
// takes each packet's tensors from the kForwards it holds (answered kAck on arrival, by the
// serving loop) for the same request and micro-batch and the route's epoch.
//
//   Worker w({.listen = "inproc://w0"});
//   std::thread t([&] { w.run(); });   ...   w.stop(); t.join();
//
// Thread-safety: run() on one thread; stop(), endpoint() and the counters from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tandem/export.h"
#include "tandem/sched/transport.h"
#include "tandem/sched/wire.h"

namespace tandem::sched {

struct WorkerOptions {
  std::string listen = "tcp://127.0.0.1:0";  // bind address; port 0 picks a free one
  std::optional<ClusterKey> key;             // CURVE server key; none: plain (inproc, tests)
  int threads = 0;                           // default CPU thread budget (0: the process's)
  std::string endpoint_file;  // when set, the bound endpoint is written here once ready
  WireLimits limits;
};

class TANDEM_API Worker {
 public:
  explicit Worker(WorkerOptions options);  // binds; TransportError when it cannot
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  // Serves until kShutdown or stop(). Exceptions escape only for transport failures.
  void run();
  void stop() { stop_.store(true); }

  uint64_t packets() const { return packets_.load(); }
  uint64_t rejected() const { return rejected_.load(); }  // malformed messages
  uint64_t refused() const { return refused_.load(); }    // failed security handshakes

 private:
  struct Impl;
  WorkerOptions options_;
  std::string endpoint_;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> packets_{0}, rejected_{0}, refused_{0};
};

}  // namespace tandem::sched
