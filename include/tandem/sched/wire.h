// SPDX-License-Identifier: Apache-2.0
// The pipeline runtime's wire format: one ZeroMQ frame per message, versioned and validated.
//
// Why: workers and coordinators run on different hosts and must never trust what arrives. Every
// message starts with a fixed 48-byte little-endian header (magic "TDM1", protocol version, type,
// flags, sequence number, stage id, JSON length, tensor count, body length, body checksum), then a
// small JSON document (packet metadata, stage configs, errors), then the tensors, each as
// {dtype u8, rank u8, 6 pad bytes, dims i64[rank], nbytes u64, data}. decode() checks every
// length against the frame and the limits before it allocates, recomputes the checksum (a 4-lane
// 64-bit multiply-xor hash, ~GB/s, catches corruption, not an adversary: CURVE does that), and
// throws WireError naming the field on anything malformed, oversized or of another version.
//
//   Message m{MsgType::kPacket, /*seq=*/7, /*stage=*/1, packet_json(p), p.tensors};
//   std::string frame = encode(m);
//   Message back = decode(frame.data(), frame.size());   // WireError when malformed
//
// Only plain dtypes travel (f32, f16, bf16, i8, u8, i32, i64); block-quantised weights stay with
// the worker that loaded them. Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/tensor.h"
#include "tandem/export.h"
#include "tandem/sched/stage.h"

namespace tandem::sched {

inline constexpr uint32_t kWireMagic = 0x314D4454;  // "TDM1" little-endian
inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kWireHeaderBytes = 48;

enum class MsgType : uint8_t {
  kHello = 1,      // coordinator -> worker: {"protocol":1}; worker answers kHello with its info
  kConfig = 2,     // {"stage_id", "stage": {...}, "device": {...}} -> kConfigAck | kError
  kConfigAck = 3,  // {"stage_id", "kind"}
  kPacket = 4,     // a Packet for stage `stage` -> kResult | kError
  kResult = 5,     // the stage's output Packet, meta "compute_s"
  kPing = 6,       // heartbeat -> kPong (answered even while the worker computes)
  kPong = 7,
  kReset = 8,  // {"request_id"}: stage `stage` drops its state for the request -> kAck
  kAck = 9,
  kError = 10,     // {"what": "..."}
  kShutdown = 11,  // the worker exits its loop -> kAck
  // worker -> worker: stage `stage`'s input (a Packet plus "epoch"), sent by the predecessor's
  // worker when its route names a successor -> kAck once held | kError (unknown stage, stale epoch)
  kForward = 12,
};
TANDEM_API const char* msg_type_name(MsgType t);

class TANDEM_API WireError : public Error {
  using Error::Error;
};

struct WireLimits {
  size_t max_message_bytes = size_t{1} << 30;  // whole frame
  size_t max_json_bytes = size_t{1} << 20;
  uint32_t max_tensors = 64;
};

struct Message {
  MsgType type = MsgType::kPing;
  uint64_t seq = 0;
  uint32_t stage = 0;
  nlohmann::json json = nlohmann::json::object();
  std::vector<Tensor> tensors;  // host, contiguous after decode
};

// Serialises `m` (tensors made contiguous first). `checksum`: hash the body (else 0 is sent and
// the receiver skips the check). InvalidArgument for a tensor of a dtype that cannot travel.
TANDEM_API std::string encode(const Message& m, bool checksum = true);
// Parses and validates one frame; WireError naming what is wrong (and the byte offset).
TANDEM_API Message decode(const void* data, size_t size, const WireLimits& limits = {});

// Where a stage's activations come from and go to (worker-to-worker topology; pipeline.h). Sent in
// kConfig as "route". With next_endpoint set, the stage's worker sends each output straight to
// the successor's worker (kForward) and answers the coordinator with the packet's header only;
// with input_from_prev, each kPacket from the coordinator carries the header only and its tensors
// are the ones the predecessor forwarded for that (request, micro). Forwards of another epoch
// (a generation the coordinator abandoned after a failure) are refused.
struct TANDEM_API StageRoute {
  std::string next_endpoint;  // empty: the output goes back to the coordinator
  uint32_t next_stage = 0;    // the successor's stage id on its worker
  bool input_from_prev = false;
  uint64_t epoch = 0;
  // The successor link's heartbeats (the coordinator's client options).
  double heartbeat_interval_s = 0.1, heartbeat_timeout_s = 1.0, connect_timeout_s = 5.0;

  bool routed() const { return !next_endpoint.empty() || input_from_prev; }
  nlohmann::json to_json() const;
  static StageRoute from_json(const nlohmann::json& j);  // WireError naming the field
};

// The body checksum (exposed for tests and the fuzz target).
TANDEM_API uint64_t wire_checksum(const void* data, size_t size);

// Packet <-> message JSON: {"request_id", "micro", "n_micro", "meta"}.
TANDEM_API nlohmann::json packet_header_json(const Packet& p);
// Builds a Packet from a decoded kPacket/kResult message; WireError on missing/wrong-typed fields.
TANDEM_API Packet message_to_packet(Message m);
TANDEM_API Message packet_to_message(MsgType type, uint64_t seq, uint32_t stage, const Packet& p);

}  // namespace tandem::sched
