// SPDX-License-Identifier: Apache-2.0
// The worker's serving loop (worker.h): a ROUTER socket served on the calling thread, stages run on
// a compute thread that hands answers back through an inproc PAIR socket.
#include "tandem/sched/worker.h"

#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "tandem/core/backend.h"
#include "tandem/core/log.h"
#include "tandem/sched/client.h"
#include "tandem/sched/emulation.h"

namespace tandem::sched {
namespace {

struct Job {
  std::string peer;  // ROUTER routing id
  Message msg;
};
struct Reply {
  std::string peer;
  uint64_t seq = 0;
  std::string frame;
};

std::string reply_frame(MsgType type, uint64_t seq, uint32_t stage, nlohmann::json json) {
  Message m;
  m.type = type;
  m.seq = seq;
  m.stage = stage;
  m.json = std::move(json);
  return encode(m);
}

std::string error_frame(uint64_t seq, uint32_t stage, const std::string& what) {
  return reply_frame(MsgType::kError, seq, stage, {{"what", what}});
}

// A stage's route (wire.h StageRoute) and, when it forwards, its connection to the successor.
struct RouteState {
  StageRoute route;
  std::unique_ptr<WorkerClient> successor;
  std::string lost;  // why the successor was lost: later outputs fail at once, not one timeout each
};

// A kForward's input, held until the coordinator's kPacket for the same (stage, request, micro).
using InboxKey = std::tuple<uint32_t, uint64_t, int32_t>;
constexpr size_t kMaxInbox = 4096;

}  // namespace

struct Worker::Impl {
  ZmqSocket router{ZMQ_ROUTER};
  ZmqSocket notify{ZMQ_PAIR};
  std::unique_ptr<ZmqSocket> monitor;
  std::string notify_endpoint;

  std::mutex mutex;
  std::condition_variable cv;
  std::deque<Job> jobs;
  std::deque<Reply> outbox;
  bool closing = false;
  // Requests received and not yet answered, by (peer, seq): a ping naming a seq that is not here
  // (and was not answered) tells the client its request was lost on the way.
  std::set<std::pair<std::string, uint64_t>> in_hand;
  // Worker to worker: the epoch of each stage whose input comes from its predecessor, and the
  // inputs forwarded to it and not yet consumed.
  std::map<uint32_t, uint64_t> inbox_epoch;
  std::map<InboxKey, std::vector<Tensor>> inbox;

  // Touched by the compute thread only.
  std::map<uint32_t, std::unique_ptr<Stage>> stages;
  std::map<uint32_t, EmulatedDevice> devices;

  // Stage `stage` takes forwarded inputs of `epoch` from now on (none: it takes none); drops the
  // inputs held for it.
  void set_inbox(uint32_t stage, std::optional<uint64_t> epoch) {
    std::lock_guard lock(mutex);
    std::erase_if(inbox, [&](const auto& e) { return std::get<0>(e.first) == stage; });
    if (epoch)
      inbox_epoch[stage] = *epoch;
    else
      inbox_epoch.erase(stage);
  }
  // The tensors forwarded for `in`; InvalidArgument when the predecessor's never arrived.
  std::vector<Tensor> take_forwarded(uint32_t stage, const Packet& in, uint64_t epoch) {
    std::lock_guard lock(mutex);
    auto it = inbox.find({stage, in.request_id, in.micro});
    if (it == inbox.end())
      throw InvalidArgument(cat("stage ", stage, ": no input was forwarded by the predecessor's ",
                                "worker for request ", in.request_id, " micro ", in.micro,
                                " (epoch ", epoch, ")"));
    std::vector<Tensor> t = std::move(it->second);
    inbox.erase(it);
    return t;
  }
  // The serving loop's answer to a kForward: holds its tensors for the stage (kAck), or kError.
  std::string accept_forward(Message m) {
    const uint64_t seq = m.seq;
    const uint32_t stage = m.stage;
    if (!m.json.contains("epoch") || !m.json["epoch"].is_number_unsigned())
      return error_frame(seq, stage, "forward: missing unsigned \"epoch\"");
    const uint64_t epoch = m.json["epoch"].get<uint64_t>();
    Packet p = message_to_packet(std::move(m));
    std::lock_guard lock(mutex);
    auto it = inbox_epoch.find(stage);
    if (it == inbox_epoch.end())
      return error_frame(
          seq, stage,
          cat("forward for stage ", stage,
              ", which this worker was not configured to take forwarded inputs for"));
    if (it->second != epoch)
      return error_frame(seq, stage,
                         cat("forward for stage ", stage, " of epoch ", epoch, ", but the stage ",
                             "runs epoch ", it->second, " (a generation the coordinator ended)"));
    if (inbox.size() >= kMaxInbox)
      return error_frame(seq, stage, cat("forward: ", kMaxInbox, " inputs already held"));
    inbox[{stage, p.request_id, p.micro}] = std::move(p.tensors);
    return reply_frame(MsgType::kAck, seq, stage, nlohmann::json::object());
  }
};

namespace {

// Connects stage `stage`'s successor when its route has one. RemoteError naming both workers when
// the successor does not answer (down, unreachable from here, or another cluster key).
RouteState connect_route(uint32_t stage, StageRoute route, const std::string& self,
                         const std::optional<ClusterKey>& key, const WireLimits& limits) {
  RouteState rs;
  rs.route = std::move(route);
  if (rs.route.next_endpoint.empty()) return rs;
  ClientOptions co;
  co.heartbeat_interval_s = rs.route.heartbeat_interval_s;
  co.heartbeat_timeout_s = std::max(rs.route.heartbeat_timeout_s, co.heartbeat_interval_s);
  co.connect_timeout_s = rs.route.connect_timeout_s;
  co.limits = limits;
  const bool inproc = rs.route.next_endpoint.rfind("inproc://", 0) == 0;
  try {
    rs.successor =
        std::make_unique<WorkerClient>(rs.route.next_endpoint, inproc ? std::nullopt : key, co);
    rs.successor->hello();
  } catch (const Error& e) {
    throw RemoteError(cat("worker ", self, " (stage ", stage, ") cannot reach its successor ",
                          rs.route.next_endpoint, " (stage ", rs.route.next_stage,
                          "): ", e.what()));
  }
  return rs;
}

// Sends stage `stage`'s output to the successor; the bytes sent, or nullopt with `frame` set to
// the error answer (meta "successor_lost") when the successor stopped answering.
std::optional<uint64_t> forward(RouteState& rs, uint32_t stage, const Packet& out, uint64_t seq,
                                std::string& frame) {
  if (rs.lost.empty()) {
    try {
      return rs.successor->forward(rs.route.next_stage, rs.route.epoch, out);
    } catch (const WorkerLost& e) {
      rs.lost = e.what();
    }
  }
  frame = reply_frame(MsgType::kError, seq, stage,
                      {{"what", cat("stage ", stage, ": lost its successor ",
                                    rs.route.next_endpoint, " while forwarding request ",
                                    out.request_id, " micro ", out.micro, ": ", rs.lost)},
                       {"successor_lost", rs.route.next_endpoint}});
  return std::nullopt;
}

}  // namespace

Worker::Worker(WorkerOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  if (options_.key) impl_->router.set_server_key(*options_.key);
  int hwm = 1000;
  zmq_setsockopt(impl_->router.raw(), ZMQ_SNDHWM, &hwm, sizeof(hwm));
  int handover = 1;  // a client that reconnects with its routing id takes over its old pipe
  zmq_setsockopt(impl_->router.raw(), ZMQ_ROUTER_HANDOVER, &handover, sizeof(handover));
  int mandatory = 0;  // answers to a vanished peer are dropped, not an error
  zmq_setsockopt(impl_->router.raw(), ZMQ_ROUTER_MANDATORY, &mandatory, sizeof(mandatory));
  int64_t max_msg = static_cast<int64_t>(options_.limits.max_message_bytes);
  zmq_setsockopt(impl_->router.raw(), ZMQ_MAXMSGSIZE, &max_msg, sizeof(max_msg));
  // inproc names are unbound asynchronously after close: never reuse one within a process.
  static std::atomic<uint64_t> counter{0};
  const std::string tag = std::to_string(::getpid()) + "." + std::to_string(counter++);
  if (options_.key) {
    const std::string mon = std::string("inproc://tandem.worker.monitor.") + tag;
    if (zmq_socket_monitor(impl_->router.raw(), mon.c_str(),
                           ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) == 0) {
      impl_->monitor = std::make_unique<ZmqSocket>(ZMQ_PAIR);
      impl_->monitor->connect(mon);
    }
  }
  impl_->router.bind(options_.listen);
  endpoint_ = impl_->router.endpoint();
  impl_->notify_endpoint = std::string("inproc://tandem.worker.notify.") + tag;
  impl_->notify.bind(impl_->notify_endpoint);
  if (!options_.endpoint_file.empty()) {
    const std::string tmp = options_.endpoint_file + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << endpoint_ << "\n";
      if (!out) throw IoError("worker: cannot write endpoint file '" + tmp + "'");
    }
    std::filesystem::rename(tmp, options_.endpoint_file);
  }
  log().info("worker: listening on {}{}", endpoint_, options_.key ? " (CURVE)" : "");
}

Worker::~Worker() = default;

void Worker::run() {
  Impl& im = *impl_;
  std::thread compute([this, &im] {
    std::map<uint32_t, RouteState> routes;  // successor sockets live on this thread
    ZmqSocket signal(ZMQ_PAIR);
    signal.connect(im.notify_endpoint);
    for (;;) {
      Job job;
      {
        std::unique_lock lock(im.mutex);
        im.cv.wait(lock, [&] { return im.closing || !im.jobs.empty(); });
        if (im.jobs.empty()) return;
        job = std::move(im.jobs.front());
        im.jobs.pop_front();
      }
      const Message& m = job.msg;
      std::string frame;
      try {
        switch (m.type) {
          case MsgType::kConfig: {
            if (!m.json.contains("stage") || !m.json["stage"].is_object())
              throw WireError("config: missing object \"stage\"");
            EmulatedDevice dev = EmulatedDevice::from_json(
                m.json.contains("device") ? m.json["device"] : nlohmann::json::object());
            if (dev.threads == 0) dev.threads = options_.threads;
            routes.erase(m.stage);
            im.set_inbox(m.stage, std::nullopt);
            im.stages.erase(m.stage);  // free the old stage's memory before building the new one
            im.stages[m.stage] = make_stage(m.json["stage"]);
            im.devices[m.stage] = dev;
            nlohmann::json ack = {{"kind", im.stages[m.stage]->kind()}};
            if (m.json.contains("route")) {
              routes[m.stage] = connect_route(m.stage, StageRoute::from_json(m.json["route"]),
                                              endpoint_, options_.key, options_.limits);
              const StageRoute& r = routes[m.stage].route;
              if (r.input_from_prev) im.set_inbox(m.stage, r.epoch);
              ack["routed"] = true;
            }
            frame = reply_frame(MsgType::kConfigAck, m.seq, m.stage, ack);
            log().info("worker: stage {} configured ({})", m.stage, im.stages[m.stage]->kind());
            break;
          }
          case MsgType::kPacket: {
            auto it = im.stages.find(m.stage);
            if (it == im.stages.end())
              throw InvalidArgument("packet for stage " + std::to_string(m.stage) +
                                    ", which this worker was not configured with");
            const uint64_t seq = m.seq;
            const uint32_t stage = m.stage;
            Packet in = message_to_packet(std::move(job.msg));
            auto route = routes.find(stage);
            if (route != routes.end() && route->second.route.input_from_prev)
              in.tensors = im.take_forwarded(stage, in, route->second.route.epoch);
            double compute_s = 0;
            Packet out = im.devices[stage].run(*it->second, std::move(in), &compute_s);
            uint64_t forwarded = 0;
            if (route != routes.end() && route->second.successor) {
              const std::optional<uint64_t> sent = forward(route->second, stage, out, seq, frame);
              if (!sent) break;  // `frame` holds the error naming the lost successor
              forwarded = *sent;
              out.tensors.clear();  // the coordinator gets the header only
            }
            Message r = packet_to_message(MsgType::kResult, seq, stage, out);
            r.json["compute_s"] = compute_s;
            if (forwarded) r.json["forwarded_bytes"] = forwarded;
            frame = encode(r);
            ++packets_;
            break;
          }
          case MsgType::kReset: {
            if (!m.json.contains("request_id") || !m.json["request_id"].is_number_unsigned())
              throw WireError("reset: missing unsigned \"request_id\"");
            auto it = im.stages.find(m.stage);
            if (it == im.stages.end())
              throw InvalidArgument("reset for stage " + std::to_string(m.stage) +
                                    ", which this worker was not configured with");
            it->second->reset(m.json["request_id"].get<uint64_t>());
            frame = reply_frame(MsgType::kAck, m.seq, m.stage, nlohmann::json::object());
            break;
          }
          default:
            throw WireError(std::string("unexpected message type ") + msg_type_name(m.type));
        }
      } catch (const std::exception& e) {
        log().warn("worker: {} (seq {}, stage {}): {}", msg_type_name(job.msg.type), job.msg.seq,
                   job.msg.stage, e.what());
        frame = error_frame(job.msg.seq, job.msg.stage, e.what());
      }
      {
        std::lock_guard lock(im.mutex);
        im.outbox.push_back({std::move(job.peer), job.msg.seq, std::move(frame)});
      }
      signal.send(std::string(1, '\1'));
    }
  });

  auto reply = [&](const std::string& peer, std::string frame) {
    try {
      im.router.send_shared({peer}, std::make_shared<const std::string>(std::move(frame)), 1.0);
    } catch (const TransportError& e) {
      log().warn("worker: could not answer a peer: {}", e.what());
    }
  };

  while (!stop_.load()) {
    zmq_pollitem_t items[3] = {{im.router.raw(), 0, ZMQ_POLLIN, 0},
                               {im.notify.raw(), 0, ZMQ_POLLIN, 0},
                               {im.monitor ? im.monitor->raw() : nullptr, 0, ZMQ_POLLIN, 0}};
    const int n = zmq_poll(items, im.monitor ? 3 : 2, 100);
    if (n < 0) {
      if (zmq_errno() == EINTR) continue;
      break;
    }
    if (items[1].revents & ZMQ_POLLIN) {
      while (im.notify.recv(0)) {
      }
      std::deque<Reply> out;
      {
        std::lock_guard lock(im.mutex);
        out.swap(im.outbox);
      }
      for (auto& r : out) {
        im.in_hand.erase({r.peer, r.seq});
        reply(r.peer, std::move(r.frame));
      }
    }
    if (im.monitor && (items[2].revents & ZMQ_POLLIN)) {
      while (auto ev = im.monitor->recv(0)) {
        if (ev->empty() || (*ev)[0].size() < 6) continue;
        ++refused_;
        log().warn("worker: refused a peer at {}: security handshake failed (wrong cluster key?)",
                   ev->size() > 1 ? (*ev)[1] : endpoint_);
      }
    }
    if (!(items[0].revents & ZMQ_POLLIN)) continue;
    auto got = im.router.recv_zero_copy(0);
    if (!got) continue;
    if (got->head.size() != 1) {
      ++rejected_;
      log().warn("worker: rejected a message of {} frames (expected 1 after the routing id)",
                 got->head.size());
      if (!got->head.empty()) reply(got->head[0], error_frame(0, 0, "expected exactly one frame"));
      continue;
    }
    const std::string peer = got->head[0];
    Message m;
    try {
      m = decode(got->data, got->size, options_.limits);
    } catch (const std::exception& e) {
      ++rejected_;
      log().warn("worker: rejected a message: {}", e.what());
      reply(peer, error_frame(0, 0, e.what()));
      continue;
    }
    switch (m.type) {
      case MsgType::kHello: {
        nlohmann::json info = {
            {"protocol", kWireVersion},
            {"pid", static_cast<int64_t>(::getpid())},
            {"threads", options_.threads > 0 ? options_.threads : cpu_num_threads()},
            {"kinds", stage_kinds()}};
        reply(peer, reply_frame(MsgType::kHello, m.seq, 0, info));
        break;
      }
      case MsgType::kPing: {
        nlohmann::json pong = nlohmann::json::object();
        if (m.json.contains("awaiting") && m.json["awaiting"].is_number_unsigned()) {
          const uint64_t awaited = m.json["awaiting"].get<uint64_t>();
          pong["awaiting"] = awaited;
          pong["lost"] = !im.in_hand.count({peer, awaited});
        }
        reply(peer, reply_frame(MsgType::kPong, m.seq, m.stage, pong));
        break;
      }
      case MsgType::kForward: {
        const uint64_t seq = m.seq;
        const uint32_t stage = m.stage;
        std::string answer;
        try {
          answer = im.accept_forward(std::move(m));
        } catch (const std::exception& e) {
          ++rejected_;
          answer = error_frame(seq, stage, e.what());
        }
        reply(peer, std::move(answer));
        break;
      }
      case MsgType::kShutdown:
        reply(peer, reply_frame(MsgType::kAck, m.seq, 0, nlohmann::json::object()));
        stop_.store(true);
        break;
      case MsgType::kConfig:
      case MsgType::kPacket:
      case MsgType::kReset: {
        im.in_hand.insert({peer, m.seq});
        std::lock_guard lock(im.mutex);
        im.jobs.push_back({peer, std::move(m)});
        im.cv.notify_one();
        break;
      }
      default:
        ++rejected_;
        reply(peer, error_frame(m.seq, m.stage,
                                std::string("a worker does not accept ") + msg_type_name(m.type)));
    }
  }
  {
    std::lock_guard lock(im.mutex);
    im.closing = true;
    im.jobs.clear();
  }
  im.cv.notify_all();
  compute.join();
  // Answers the compute thread finished after the loop ended are flushed (e.g. the last result).
  for (auto& r : im.outbox) reply(r.peer, r.frame);
  im.outbox.clear();
  im.stages.clear();
  log().info("worker: {} stopped after {} packets", endpoint_, packets_.load());
}

}  // namespace tandem::sched
