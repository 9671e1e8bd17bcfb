// SPDX-License-Identifier: Apache-2.0
// ZeroMQ sockets, CURVE keys and the in-process ZAP handler (transport.h).
#include "tandem/sched/transport.h"

#include <zmq.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "tandem/core/log.h"

namespace tandem::sched {
namespace {

std::string zmq_err(const std::string& what) { return what + ": " + zmq_strerror(zmq_errno()); }

bool is_z85_key(const std::string& s) {
  if (s.size() != 40) return false;
  static const std::string kAlphabet =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
  for (char c : s)
    if (kAlphabet.find(c) == std::string::npos) return false;
  return true;
}

struct Zap {
  std::mutex mutex;
  std::set<std::string> allowed;
  std::atomic<uint64_t> refused{0}, accepted{0};
  std::thread thread;

  Zap() {
    // Bind in the constructor so that no CURVE server can handshake before the handler exists.
    void* sock = zmq_socket(zmq_context(), ZMQ_REP);
    if (!sock || zmq_bind(sock, "inproc://zeromq.zap.01") != 0)
      throw TransportError(zmq_err("ZAP handler: cannot bind inproc://zeromq.zap.01"));
    thread = std::thread([this, sock] { loop(sock); });
    thread.detach();
  }

  void loop(void* sock) {
    // ZAP request (RFC 27): version, request id, domain, address, identity, mechanism,
    // credentials...; reply: version, request id, status code, status text, user id, metadata.
    for (;;) {
      std::vector<std::string> frames;
      int more = 0;
      do {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, sock, 0) < 0) {
          zmq_msg_close(&msg);
          if (zmq_errno() == ETERM) return;
          break;
        }
        frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
        more = zmq_msg_more(&msg);
        zmq_msg_close(&msg);
      } while (more);
      if (frames.size() < 6) continue;
      bool ok = false;
      std::string who = frames[3];
      if (frames[5] == "CURVE" && frames.size() >= 7 && frames[6].size() == 32) {
        char z85[41];
        zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(frames[6].data()), 32);
        std::lock_guard lock(mutex);
        ok = allowed.count(z85) > 0;
        if (!ok) who += " (public key " + std::string(z85) + ")";
      }
      if (ok) {
        ++accepted;
      } else {
        ++refused;
        log().warn("transport: refused a peer from {}: its CURVE key is not the cluster's", who);
      }
      const std::vector<std::string> reply = {
          "1.0", frames[1], ok ? "200" : "400", ok ? "OK" : "unknown key", "", ""};
      for (size_t i = 0; i < reply.size(); ++i)
        zmq_send(sock, reply[i].data(), reply[i].size(), i + 1 < reply.size() ? ZMQ_SNDMORE : 0);
    }
  }
};

Zap& zap() {
  static Zap* z = new Zap();  // lives until exit (its thread blocks in zmq_msg_recv)
  return *z;
}

}  // namespace

bool zmq_has_curve() { return zmq_has("curve") == 1; }

void* zmq_context() {
  static void* ctx = [] {
    void* c = zmq_ctx_new();
    if (!c) throw TransportError(zmq_err("zmq_ctx_new"));
    return c;
  }();
  return ctx;
}

ClusterKey ClusterKey::generate() {
  if (!zmq_has_curve()) throw Unsupported("CURVE keys: this libzmq was built without CURVE");
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0) throw TransportError(zmq_err("zmq_curve_keypair"));
  return {pub, sec};
}

ClusterKey ClusterKey::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("cluster key: cannot read '" + path + "'");
  ClusterKey k;
  std::getline(in, k.public_z85);
  std::getline(in, k.secret_z85);
  if (!is_z85_key(k.public_z85) || !is_z85_key(k.secret_z85))
    throw ParseError(path, -1,
                     "cluster key: expected two lines of 40 Z85 characters (public, secret)");
  char derived[41];
  if (zmq_curve_public(derived, k.secret_z85.c_str()) != 0 || k.public_z85 != derived)
    throw ParseError(path, -1, "cluster key: the public key does not belong to the secret key");
  return k;
}

void ClusterKey::save(const std::string& path) const {
  {
    std::ofstream out(path, std::ios::trunc);
    if (!out) throw IoError("cluster key: cannot write '" + path + "'");
    out << public_z85 << "\n" << secret_z85 << "\n";
    if (!out) throw IoError("cluster key: cannot write '" + path + "'");
  }
  std::error_code ec;
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
      std::filesystem::perm_options::replace, ec);
}

void zap_allow(const std::string& public_z85) {
  Zap& z = zap();
  std::lock_guard lock(z.mutex);
  z.allowed.insert(public_z85);
}
uint64_t zap_refused() { return zap().refused.load(); }
uint64_t zap_accepted() { return zap().accepted.load(); }

ZmqSocket::ZmqSocket(int type) {
  sock_ = zmq_socket(zmq_context(), type);
  if (!sock_) throw TransportError(zmq_err("zmq_socket"));
  int linger = 0;  // never block close on a dead peer; delivery is acknowledged by the runtime
  zmq_setsockopt(sock_, ZMQ_LINGER, &linger, sizeof(linger));
}

ZmqSocket::~ZmqSocket() {
  if (sock_) zmq_close(sock_);
}

void ZmqSocket::set_server_key(const ClusterKey& key) {
  zap_allow(key.public_z85);
  int on = 1;
  if (zmq_setsockopt(sock_, ZMQ_CURVE_SERVER, &on, sizeof(on)) != 0 ||
      zmq_setsockopt(sock_, ZMQ_CURVE_SECRETKEY, key.secret_z85.c_str(), 40) != 0)
    throw TransportError(zmq_err("CURVE server key"));
}

void ZmqSocket::set_client_key(const ClusterKey& key) {
  if (zmq_setsockopt(sock_, ZMQ_CURVE_SERVERKEY, key.public_z85.c_str(), 40) != 0 ||
      zmq_setsockopt(sock_, ZMQ_CURVE_PUBLICKEY, key.public_z85.c_str(), 40) != 0 ||
      zmq_setsockopt(sock_, ZMQ_CURVE_SECRETKEY, key.secret_z85.c_str(), 40) != 0)
    throw TransportError(zmq_err("CURVE client key"));
}

void ZmqSocket::bind(const std::string& endpoint) {
  if (zmq_bind(sock_, endpoint.c_str()) != 0)
    throw TransportError(zmq_err("transport: cannot bind '" + endpoint + "'"));
}

void ZmqSocket::connect(const std::string& endpoint) {
  if (zmq_connect(sock_, endpoint.c_str()) != 0)
    throw TransportError(zmq_err("transport: cannot connect to '" + endpoint + "'"));
}

std::string ZmqSocket::endpoint() const {
  char buf[512];
  size_t len = sizeof(buf);
  if (zmq_getsockopt(sock_, ZMQ_LAST_ENDPOINT, buf, &len) != 0) return "";
  return std::string(buf, strnlen(buf, len));
}

void ZmqSocket::send(const std::vector<std::string>& frames, double timeout_s) {
  int ms = static_cast<int>(timeout_s * 1000);
  zmq_setsockopt(sock_, ZMQ_SNDTIMEO, &ms, sizeof(ms));
  for (size_t i = 0; i < frames.size(); ++i) {
    const int flags = i + 1 < frames.size() ? ZMQ_SNDMORE : 0;
    if (zmq_send(sock_, frames[i].data(), frames[i].size(), flags) < 0)
      throw TransportError(zmq_err("transport: send failed"));
  }
}

void ZmqSocket::send_shared(const std::vector<std::string>& head,
                            std::shared_ptr<const std::string> last, double timeout_s) {
  int ms = static_cast<int>(timeout_s * 1000);
  zmq_setsockopt(sock_, ZMQ_SNDTIMEO, &ms, sizeof(ms));
  for (const auto& f : head)
    if (zmq_send(sock_, f.data(), f.size(), ZMQ_SNDMORE) < 0)
      throw TransportError(zmq_err("transport: send failed"));
  auto* keep = new std::shared_ptr<const std::string>(std::move(last));
  zmq_msg_t msg;
  if (zmq_msg_init_data(
          &msg, const_cast<char*>((*keep)->data()), (*keep)->size(),
          [](void*, void* hint) { delete static_cast<std::shared_ptr<const std::string>*>(hint); },
          keep) != 0) {
    delete keep;
    throw TransportError(zmq_err("transport: zmq_msg_init_data"));
  }
  if (zmq_msg_send(&msg, sock_, 0) < 0) {
    const std::string what = zmq_err("transport: send failed");
    zmq_msg_close(&msg);  // releases `keep`
    throw TransportError(what);
  }
}

bool ZmqSocket::wait_readable(double timeout_s) {
  zmq_pollitem_t item{sock_, 0, ZMQ_POLLIN, 0};
  const long ms = timeout_s <= 0 ? 0 : static_cast<long>(timeout_s * 1000 + 0.5);
  const int rc = zmq_poll(&item, 1, ms);
  if (rc < 0) {
    if (zmq_errno() == EINTR) return false;
    throw TransportError(zmq_err("transport: poll failed"));
  }
  return rc > 0 && (item.revents & ZMQ_POLLIN);
}

std::optional<ZmqSocket::Received> ZmqSocket::recv_zero_copy(double timeout_s) {
  if (!wait_readable(timeout_s)) return std::nullopt;
  Received r;
  for (;;) {
    auto* msg = new zmq_msg_t;
    zmq_msg_init(msg);
    std::shared_ptr<void> owner(msg, [](void* m) {
      zmq_msg_close(static_cast<zmq_msg_t*>(m));
      delete static_cast<zmq_msg_t*>(m);
    });
    if (zmq_msg_recv(msg, sock_, ZMQ_DONTWAIT) < 0)
      throw TransportError(zmq_err("transport: receive failed"));
    if (!zmq_msg_more(msg)) {
      r.data = zmq_msg_data(msg);
      r.size = zmq_msg_size(msg);
      r.owner = std::move(owner);
      return r;
    }
    r.head.emplace_back(static_cast<const char*>(zmq_msg_data(msg)), zmq_msg_size(msg));
  }
}

std::optional<std::vector<std::string>> ZmqSocket::recv(double timeout_s) {
  if (!wait_readable(timeout_s)) return std::nullopt;
  std::vector<std::string> frames;
  int more = 0;
  do {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, sock_, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&msg);
      throw TransportError(zmq_err("transport: receive failed"));
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
  } while (more);
  return frames;
}

}  // namespace tandem::sched
