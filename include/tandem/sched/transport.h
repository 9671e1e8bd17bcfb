// SPDX-License-Identifier: Apache-2.0
// ZeroMQ transport for the pipeline runtime: sockets, CURVE keys, framed send/receive with
// timeouts.
//
// One process-wide zmq context (so inproc:// endpoints connect across threads). A worker binds a
// ROUTER socket (`tcp://127.0.0.1:0` picks a free port; endpoint() reports the bound one; or
// `inproc://name` for an in-process worker); each coordinator-side stage connects a DEALER. With a
// ClusterKey the worker is a CURVE server and the coordinator a CURVE client presenting the
// cluster's key pair: the worker's ZAP handler accepts only that public key and logs (and counts)
// every refused peer; a coordinator holding another key fails its handshake and times out with an
// error that says so. Keys are files of two Z85 lines (public, secret), `tandem worker --gen-key`.
//
//   ClusterKey key = ClusterKey::generate(); key.save("cluster.key");
//   ZmqSocket s(ZMQ_DEALER); s.set_client_key(key); s.connect("tcp://127.0.0.1:5555");
//   s.send(encode(msg)); auto frame = s.recv(0.5);   // std::nullopt after 0.5 s
//
// Thread-safety: a ZmqSocket belongs to one thread (zmq's rule); ClusterKey is a plain value.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/export.h"

namespace tandem::sched {

class TANDEM_API TransportError : public Error {
  using Error::Error;
};

// A CURVE key pair in Z85 (40 characters each).
struct TANDEM_API ClusterKey {
  std::string public_z85;
  std::string secret_z85;
  static ClusterKey generate();
  // Two lines: public, secret. IoError / ParseError (naming the file) when unreadable or malformed.
  static ClusterKey load(const std::string& path);
  void save(const std::string& path) const;  // IoError; the file is made readable by its owner only
};

// True when the linked libzmq has CURVE (it does with Debian's libsodium build).
TANDEM_API bool zmq_has_curve();
// The process-wide context (created on first use, never destroyed before exit).
TANDEM_API void* zmq_context();

class TANDEM_API ZmqSocket {
 public:
  explicit ZmqSocket(int type);  // ZMQ_ROUTER, ZMQ_DEALER, ...
  ~ZmqSocket();
  ZmqSocket(const ZmqSocket&) = delete;
  ZmqSocket& operator=(const ZmqSocket&) = delete;

  void set_server_key(const ClusterKey& key);  // before bind
  void set_client_key(const ClusterKey& key);  // before connect
  void bind(const std::string& endpoint);      // TransportError naming the endpoint
  void connect(const std::string& endpoint);
  std::string endpoint() const;  // ZMQ_LAST_ENDPOINT after bind

  // One message of one or more frames. send: TransportError when it cannot be queued in
  // `timeout_s` (peer gone and queue full).
  void send(const std::vector<std::string>& frames, double timeout_s = 5.0);
  void send(const std::string& frame, double timeout_s = 5.0) {
    send(std::vector{frame}, timeout_s);
  }
  // As send(), but the last frame is handed to ZeroMQ without a copy (it keeps `last` alive until
  // the frame has been sent).
  void send_shared(const std::vector<std::string>& head, std::shared_ptr<const std::string> last,
                   double timeout_s = 5.0);
  // Waits up to timeout_s for a message; nullopt on timeout.
  std::optional<std::vector<std::string>> recv(double timeout_s);
  // A received message whose last frame stays in ZeroMQ's buffer (no copy): head = the frames
  // before it.
  struct Received {
    std::vector<std::string> head;
    std::shared_ptr<void> owner;  // keeps the last frame alive
    const void* data = nullptr;
    size_t size = 0;
  };
  std::optional<Received> recv_zero_copy(double timeout_s);
  void* raw() const { return sock_; }

 private:
  // Waits up to timeout_s for a message; false on timeout or EINTR. TransportError if poll fails.
  bool wait_readable(double timeout_s);
  void* sock_ = nullptr;
};

// The process's ZAP handler (started on first use, lives until exit): accepts CURVE clients whose
// public key was allowed, refuses and logs the others. Every CURVE server socket of the process
// goes through it.
TANDEM_API void zap_allow(const std::string& public_z85);
TANDEM_API uint64_t zap_refused();  // peers refused so far in this process
TANDEM_API uint64_t zap_accepted();

}  // namespace tandem::sched
