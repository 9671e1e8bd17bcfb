// SPDX-License-Identifier: Apache-2.0
// WorkerClient: the coordinator's connection to one worker (worker.h), for one pipeline stage.
//
// Each call sends one request with a fresh sequence number and waits for the answer with that
// number (anything else, e.g. a late answer from before a reset, is dropped). While it waits it
// pings every heartbeat_interval_s; when nothing at all has come back for heartbeat_timeout_s it
// throws WorkerLost, so a killed or stopped (SIGSTOP) worker is detected within about
// heartbeat_timeout_s + heartbeat_interval_s. ZeroMQ queues and silently drops what a dead peer
// had in flight; these acknowledgements and timeouts are what make loss visible. Each ping names
// the request awaited; a worker that never received it says so in its pong, and the request is
// sent again (at most max_resends times: it cannot have been applied twice).
//
//   WorkerClient c("tcp://127.0.0.1:5555", key);
//   c.hello();                                   // WorkerLost when it never answers (wrong key)
//   c.configure(0, {{"kind", "sched.mlp"}, ...}, EmulatedDevice{});
//   Packet out = c.process(0, std::move(in));
//
// Worker to worker (a StageRoute in configure): the worker sends the stage's output straight to
// the next stage's worker and process() returns the header only; a worker whose successor stops
// answering during that forward answers so, and process() throws SuccessorLost naming it.
//
// Thread-safety: one thread per client (it owns a zmq socket).
#pragma once

#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "tandem/export.h"
#include "tandem/sched/emulation.h"
#include "tandem/sched/transport.h"
#include "tandem/sched/wire.h"

namespace tandem::sched {

// The worker died, stalled or never answered (bad address, wrong key).
class TANDEM_API WorkerLost : public TransportError {
  using TransportError::TransportError;
};
// The worker answered kError (its stage failed, or it rejected our message).
class TANDEM_API RemoteError : public Error {
  using Error::Error;
};
// The worker computed the packet but its successor (worker-to-worker route) stopped answering
// while it forwarded the output: the successor, not this worker, is the one lost.
class TANDEM_API SuccessorLost : public WorkerLost {
 public:
  SuccessorLost(const std::string& what, std::string successor)
      : WorkerLost(what), successor_(std::move(successor)) {}
  const std::string& successor() const { return successor_; }

 private:
  std::string successor_;
};

struct ClientOptions {
  double heartbeat_interval_s = 0.1;
  double heartbeat_timeout_s = 1.0;
  double connect_timeout_s = 5.0;  // for hello(): handshake + first answer
  // configure(): building a stage (loading its model) must finish within this, heartbeats or
  // not; TransportError past it. A worker whose stage never finishes loading cannot hold the
  // coordinator forever.
  double configure_timeout_s = 300.0;
  bool checksum = true;
  int max_resends = 3;  // re-sends of a request the worker reports it never received
  WireLimits limits;
};

class TANDEM_API WorkerClient {
 public:
  WorkerClient(std::string endpoint, const std::optional<ClusterKey>& key,
               ClientOptions options = {});
  const std::string& endpoint() const { return endpoint_; }

  nlohmann::json hello();  // the worker's info {"pid", "threads", "kinds", "protocol"}
  // Builds stage `stage_id` on the worker (replacing one with the same id, dropping its state).
  // A route with a successor makes the worker connect to it first (RemoteError naming both
  // workers when it cannot reach it).
  void configure(uint32_t stage_id, const nlohmann::json& stage, const EmulatedDevice& device,
                 const StageRoute& route = {});
  // The stage's output; only its header (no tensors) when the route forwards it to a successor.
  // SuccessorLost when the successor stopped answering during the forward.
  Packet process(uint32_t stage_id, const Packet& in, double* compute_s = nullptr);
  // Worker to worker: hands `p` to stage `stage_id` of this (successor) worker as the input of a
  // later kPacket; returns once the worker holds it. Returns the bytes sent.
  uint64_t forward(uint32_t stage_id, uint64_t epoch, const Packet& p);
  // Stage stage_id drops its state for request_id (Stage::reset).
  void reset(uint32_t stage_id, uint64_t request_id);
  void shutdown();  // best effort: asks the worker to exit

  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }
  // Tensor bytes the worker forwarded to its successor for this client's packets.
  uint64_t forwarded_bytes() const { return forwarded_bytes_; }

 private:
  // total_timeout_s: the longest wait for the answer even while the worker keeps answering pings.
  Message call(Message m, double first_answer_timeout_s,
               double total_timeout_s = std::numeric_limits<double>::infinity());
  void send_or_lost(std::shared_ptr<const std::string> frame, MsgType what, uint64_t seq);
  bool ever_heard_ = false;
  std::string endpoint_;
  ClientOptions options_;
  ZmqSocket sock_;
  uint64_t next_seq_ = 1;
  uint64_t bytes_sent_ = 0, bytes_received_ = 0, forwarded_bytes_ = 0;
};

}  // namespace tandem::sched
