// SPDX-License-Identifier: Apache-2.0
// The coordinator's side of the worker protocol (client.h): requests with sequence numbers,
// heartbeats while waiting, loss detected by silence.
#include "tandem/sched/client.h"

#include <zmq.h>

#include <chrono>
#include <random>

#include "tandem/core/log.h"

namespace tandem::sched {
namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

WorkerClient::WorkerClient(std::string endpoint, const std::optional<ClusterKey>& key,
                           ClientOptions options)
    : endpoint_(std::move(endpoint)), options_(options), sock_(ZMQ_DEALER) {
  if (!(options_.heartbeat_interval_s > 0) ||
      options_.heartbeat_timeout_s < options_.heartbeat_interval_s)
    throw InvalidArgument("worker client: need 0 < heartbeat_interval_s <= heartbeat_timeout_s");
  if (!(options_.configure_timeout_s > 0))
    throw InvalidArgument("worker client: configure_timeout_s must be positive");
  if (key) sock_.set_client_key(*key);
  // A stable routing id: after a reconnect the worker still knows which requests it holds for us
  // (its "lost" answers stay right) and where to send their answers.
  std::random_device rd;
  std::string id(16, '\0');
  for (auto& c : id) c = static_cast<char>(rd());
  id[0] = 't';  // ids starting with a zero byte are reserved by ZeroMQ
  zmq_setsockopt(sock_.raw(), ZMQ_ROUTING_ID, id.data(), id.size());
  int64_t max_msg = static_cast<int64_t>(options_.limits.max_message_bytes);
  zmq_setsockopt(sock_.raw(), ZMQ_MAXMSGSIZE, &max_msg, sizeof(max_msg));
  sock_.connect(endpoint_);
}

void WorkerClient::send_or_lost(std::shared_ptr<const std::string> frame, MsgType what,
                                uint64_t seq) {
  try {
    sock_.send_shared({}, std::move(frame), options_.heartbeat_timeout_s);
  } catch (const TransportError& e) {
    // A DEALER with no live connection cannot queue: the worker is gone or never accepted us.
    throw WorkerLost("worker " + endpoint_ + ": cannot send " + msg_type_name(what) + " seq " +
                     std::to_string(seq) + " (no connection: down, unreachable, or it refused " +
                     "our cluster key): " + e.what());
  }
}

Message WorkerClient::call(Message m, double first_answer_timeout_s, double total_timeout_s) {
  m.seq = next_seq_++;
  const uint64_t seq = m.seq;
  const auto frame = std::make_shared<const std::string>(encode(m, options_.checksum));
  send_or_lost(frame, m.type, seq);
  bytes_sent_ += frame->size();
  const auto start = Clock::now();
  auto last_heard = start;
  auto last_ping = start;
  bool heard_any = ever_heard_;
  int resends = 0;
  for (;;) {
    const double wait = std::min(options_.heartbeat_interval_s, options_.heartbeat_timeout_s);
    auto got = sock_.recv_zero_copy(wait);
    if (got) {
      heard_any = ever_heard_ = true;
      last_heard = Clock::now();
      if (!got->head.empty()) continue;
      bytes_received_ += got->size;
      Message r = decode(got->data, got->size, options_.limits);
      if (r.type == MsgType::kPong) {
        // Only a pong about this request counts: one about an earlier request (answered since)
        // can arrive late.
        if (r.json.value("lost", false) && r.json.contains("awaiting") &&
            r.json["awaiting"].is_number_unsigned() && r.json["awaiting"].get<uint64_t>() == seq) {
          // The worker never got the request (ZeroMQ dropped it with a connection): send it again.
          if (++resends > options_.max_resends)
            throw TransportError("worker " + endpoint_ + ": " + msg_type_name(m.type) + " seq " +
                                 std::to_string(seq) + " was lost " + std::to_string(resends) +
                                 " times on the way (larger than the worker accepts?)");
          log().warn("worker client: {} seq {} to {} was lost; re-sending", msg_type_name(m.type),
                     seq, endpoint_);
          send_or_lost(frame, m.type, seq);
          bytes_sent_ += frame->size();
        }
        continue;
      }
      if (r.type == MsgType::kError && (r.seq == seq || r.seq == 0)) {
        std::string what = r.json.value("what", std::string("unknown error"));
        if (r.json.contains("successor_lost") && r.json["successor_lost"].is_string())
          throw SuccessorLost("worker " + endpoint_ + ": " + what,
                              r.json["successor_lost"].get<std::string>());
        throw RemoteError("worker " + endpoint_ + ": " + what);
      }
      if (r.seq != seq) continue;  // a stale answer (from before a timeout or reset)
      return r;
    }
    if (since(start) > total_timeout_s)
      throw TransportError("worker " + endpoint_ + ": no answer to " + msg_type_name(m.type) +
                           " seq " + std::to_string(seq) + " within " +
                           std::to_string(total_timeout_s) + " s (the worker is alive but still " +
                           "busy with it)");
    const double limit = heard_any ? options_.heartbeat_timeout_s : first_answer_timeout_s;
    if (since(last_heard) > limit)
      throw WorkerLost("worker " + endpoint_ + " " +
                       (heard_any ? "stopped answering (no heartbeat for " +
                                        std::to_string(options_.heartbeat_timeout_s) + " s)"
                                  : "did not answer within " + std::to_string(limit) +
                                        " s (down, unreachable, or it refused our cluster key)") +
                       " while waiting for " + msg_type_name(m.type) + " seq " +
                       std::to_string(seq));
    if (since(last_ping) >= options_.heartbeat_interval_s) {
      Message ping;
      ping.type = MsgType::kPing;
      ping.seq = next_seq_++;
      ping.json = {{"awaiting", seq}};
      send_or_lost(std::make_shared<const std::string>(encode(ping)), m.type, seq);
      last_ping = Clock::now();
    }
  }
}

nlohmann::json WorkerClient::hello() {
  Message m;
  m.type = MsgType::kHello;
  m.json = {{"protocol", kWireVersion}};
  Message r = call(std::move(m), options_.connect_timeout_s);
  if (r.type != MsgType::kHello)
    throw RemoteError("worker " + endpoint_ + ": answered hello with " + msg_type_name(r.type));
  return r.json;
}

void WorkerClient::configure(uint32_t stage_id, const nlohmann::json& stage,
                             const EmulatedDevice& device, const StageRoute& route) {
  Message m;
  m.type = MsgType::kConfig;
  m.stage = stage_id;
  m.json = {{"stage", stage}, {"device", device.to_json()}};
  if (route.routed()) m.json["route"] = route.to_json();
  // Building a stage may load a model: allow the connect timeout for the first answer, then
  // heartbeats keep it alive up to configure_timeout_s.
  Message r = call(std::move(m), options_.connect_timeout_s, options_.configure_timeout_s);
  if (r.type != MsgType::kConfigAck)
    throw RemoteError("worker " + endpoint_ + ": answered config with " + msg_type_name(r.type));
  if (route.routed() && !r.json.value("routed", false))
    throw RemoteError("worker " + endpoint_ + " ignored the worker-to-worker route of stage " +
                      std::to_string(stage_id) +
                      " (an older tandem worker?); run with the hub-and-spoke topology");
}

Packet WorkerClient::process(uint32_t stage_id, const Packet& in, double* compute_s) {
  Message r =
      call(packet_to_message(MsgType::kPacket, 0, stage_id, in), options_.heartbeat_timeout_s);
  if (r.type != MsgType::kResult)
    throw RemoteError("worker " + endpoint_ + ": answered a packet with " + msg_type_name(r.type));
  if (compute_s) *compute_s = r.json.value("compute_s", 0.0);
  if (r.json.contains("forwarded_bytes") && r.json["forwarded_bytes"].is_number_unsigned())
    forwarded_bytes_ += r.json["forwarded_bytes"].get<uint64_t>();
  return message_to_packet(std::move(r));
}

uint64_t WorkerClient::forward(uint32_t stage_id, uint64_t epoch, const Packet& p) {
  Message m = packet_to_message(MsgType::kForward, 0, stage_id, p);
  m.json["epoch"] = epoch;
  const uint64_t before = bytes_sent_;
  Message r = call(std::move(m), options_.heartbeat_timeout_s);
  if (r.type != MsgType::kAck)
    throw RemoteError("worker " + endpoint_ + ": answered a forward with " + msg_type_name(r.type));
  return bytes_sent_ - before;
}

void WorkerClient::reset(uint32_t stage_id, uint64_t request_id) {
  Message m;
  m.type = MsgType::kReset;
  m.stage = stage_id;
  m.json = {{"request_id", request_id}};
  call(std::move(m), options_.heartbeat_timeout_s);
}

void WorkerClient::shutdown() {
  Message m;
  m.type = MsgType::kShutdown;
  try {
    call(std::move(m), options_.heartbeat_timeout_s);
  } catch (const Error& e) {
    log().debug("worker client: shutdown of {}: {}", endpoint_, e.what());
  }
}

}  // namespace tandem::sched
