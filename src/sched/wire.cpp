// SPDX-License-Identifier: Apache-2.0
// Encoding and validating decoding of wire messages (wire.h).
#include "tandem/sched/wire.h"

#include <bit>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#include "tandem/core/json.h"

namespace tandem::sched {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian; every supported host is");

bool travels(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI8:
    case DType::kU8:
    case DType::kI32:
    case DType::kI64:
      return true;
    default:
      return false;
  }
}

template <class T>
void put(std::string& out, size_t& pos, T v) {
  std::memcpy(out.data() + pos, &v, sizeof(T));
  pos += sizeof(T);
}

template <class T>
T get(const uint8_t* p, size_t pos) {
  T v;
  std::memcpy(&v, p + pos, sizeof(T));
  return v;
}

[[noreturn]] void fail(size_t offset, const std::string& what) {
  throw WireError("wire message: " + what + " (at byte " + std::to_string(offset) + ")");
}

}  // namespace

const char* msg_type_name(MsgType t) {
  switch (t) {
    case MsgType::kHello:
      return "hello";
    case MsgType::kConfig:
      return "config";
    case MsgType::kConfigAck:
      return "config-ack";
    case MsgType::kPacket:
      return "packet";
    case MsgType::kResult:
      return "result";
    case MsgType::kPing:
      return "ping";
    case MsgType::kPong:
      return "pong";
    case MsgType::kReset:
      return "reset";
    case MsgType::kAck:
      return "ack";
    case MsgType::kError:
      return "error";
    case MsgType::kShutdown:
      return "shutdown";
    case MsgType::kForward:
      return "forward";
  }
  return "unknown";
}

uint64_t wire_checksum(const void* data, size_t size) {
  // Four independent multiply-xor lanes over 8-byte words (so the multiplies overlap), then the
  // tail bytes and the length, folded together.
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t h[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull,
                   0x082EFA98EC4E6C89ull};
  const auto* p = static_cast<const uint8_t*>(data);
  size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    for (int l = 0; l < 4; ++l) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * l, 8);
      h[l] = (h[l] ^ w) * kMul;
      h[l] ^= h[l] >> 29;
    }
  }
  uint64_t r = h[0] ^ (h[1] * 3) ^ (h[2] * 5) ^ (h[3] * 7);
  for (; i < size; ++i) r = (r ^ p[i]) * kMul;
  r ^= static_cast<uint64_t>(size);
  r *= kMul;
  return r ^ (r >> 31);
}

std::string encode(const Message& m, bool checksum) {
  const std::string json = m.json.dump();
  std::vector<Tensor> ts;
  ts.reserve(m.tensors.size());
  size_t body = json.size();
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const Tensor& t = m.tensors[i];
    if (!t.defined())
      throw InvalidArgument("wire encode: tensor " + std::to_string(i) + " is undefined");
    if (!travels(t.dtype()))
      throw InvalidArgument("wire encode: tensor " + std::to_string(i) + " has dtype " +
                            std::string(dtype_name(t.dtype())) +
                            ", which does not travel (plain dtypes only)");
    if (!t.device().is_cpu())
      throw InvalidArgument("wire encode: tensor " + std::to_string(i) + " is not in host memory");
    ts.push_back(t.contiguous());
    body += 8 + 8 * static_cast<size_t>(t.rank()) + 8 + static_cast<size_t>(ts.back().nbytes());
  }
  std::string out(kWireHeaderBytes + body, '\0');
  size_t pos = kWireHeaderBytes;
  std::memcpy(out.data() + pos, json.data(), json.size());
  pos += json.size();
  for (const Tensor& t : ts) {
    put<uint8_t>(out, pos, static_cast<uint8_t>(t.dtype()));
    put<uint8_t>(out, pos, static_cast<uint8_t>(t.rank()));
    pos += 6;
    for (int d = 0; d < t.rank(); ++d) put<int64_t>(out, pos, t.size(d));
    put<uint64_t>(out, pos, static_cast<uint64_t>(t.nbytes()));
    if (t.nbytes() > 0)
      std::memcpy(out.data() + pos, t.raw_data(), static_cast<size_t>(t.nbytes()));
    pos += static_cast<size_t>(t.nbytes());
  }
  size_t h = 0;
  put<uint32_t>(out, h, kWireMagic);
  put<uint16_t>(out, h, kWireVersion);
  put<uint8_t>(out, h, static_cast<uint8_t>(m.type));
  put<uint8_t>(out, h, checksum ? 1 : 0);
  put<uint64_t>(out, h, m.seq);
  put<uint32_t>(out, h, m.stage);
  put<uint32_t>(out, h, static_cast<uint32_t>(json.size()));
  put<uint32_t>(out, h, static_cast<uint32_t>(ts.size()));
  put<uint32_t>(out, h, 0);
  put<uint64_t>(out, h, static_cast<uint64_t>(body));
  put<uint64_t>(out, h, checksum ? wire_checksum(out.data() + kWireHeaderBytes, body) : 0);
  return out;
}

Message decode(const void* data, size_t size, const WireLimits& limits) {
  const auto* p = static_cast<const uint8_t*>(data);
  if (size < kWireHeaderBytes)
    fail(0, "frame of " + std::to_string(size) + " bytes is shorter than the 48-byte header");
  if (size > limits.max_message_bytes)
    fail(0, "frame of " + std::to_string(size) + " bytes exceeds the limit of " +
                std::to_string(limits.max_message_bytes));
  if (get<uint32_t>(p, 0) != kWireMagic) fail(0, "bad magic (not a tandem message)");
  const uint16_t version = get<uint16_t>(p, 4);
  if (version != kWireVersion)
    fail(4, "protocol version " + std::to_string(version) + ", this build speaks " +
                std::to_string(kWireVersion));
  const uint8_t type = p[6];
  if (type < static_cast<uint8_t>(MsgType::kHello) ||
      type > static_cast<uint8_t>(MsgType::kForward))
    fail(6, "unknown message type " + std::to_string(type));
  const uint8_t flags = p[7];
  if (flags > 1) fail(7, "unknown flags " + std::to_string(flags));
  Message m;
  m.type = static_cast<MsgType>(type);
  m.seq = get<uint64_t>(p, 8);
  m.stage = get<uint32_t>(p, 16);
  const uint32_t json_len = get<uint32_t>(p, 20);
  const uint32_t n_tensors = get<uint32_t>(p, 24);
  if (get<uint32_t>(p, 28) != 0) fail(28, "reserved field is not zero");
  const uint64_t body = get<uint64_t>(p, 32);
  if (body != size - kWireHeaderBytes)
    fail(32, "body length " + std::to_string(body) + " but the frame carries " +
                 std::to_string(size - kWireHeaderBytes));
  if (json_len > limits.max_json_bytes || json_len > body)
    fail(20, "JSON length " + std::to_string(json_len) + " is out of range");
  if (n_tensors > limits.max_tensors)
    fail(24, std::to_string(n_tensors) + " tensors exceed the limit of " +
                 std::to_string(limits.max_tensors));
  if (flags & 1) {
    const uint64_t want = get<uint64_t>(p, 40);
    if (wire_checksum(p + kWireHeaderBytes, body) != want) fail(40, "body checksum mismatch");
  }
  size_t pos = kWireHeaderBytes;
  if (json_len > 0) {
    try {
      m.json = parse_json(std::string_view(reinterpret_cast<const char*>(p + pos), json_len),
                          "metadata", static_cast<int64_t>(pos));
    } catch (const ParseError& e) {
      fail(pos, e.what());
    }
    if (!m.json.is_object()) fail(pos, "metadata is not a JSON object");
  }
  pos += json_len;
  for (uint32_t i = 0; i < n_tensors; ++i) {
    const std::string which = "tensor " + std::to_string(i) + ": ";
    if (size - pos < 8) fail(pos, which + "truncated descriptor");
    const uint8_t dt = p[pos];
    const uint8_t rank = p[pos + 1];
    for (int k = 2; k < 8; ++k)
      if (p[pos + k] != 0) fail(pos + k, which + "descriptor padding is not zero");
    if (dt > static_cast<uint8_t>(DType::kQ6_K) || !travels(static_cast<DType>(dt)))
      fail(pos, which + "dtype code " + std::to_string(dt) + " cannot travel");
    if (rank > kMaxRank)
      fail(pos + 1,
           which + "rank " + std::to_string(rank) + " exceeds " + std::to_string(kMaxRank));
    pos += 8;
    if (size - pos < 8u * rank + 8u) fail(pos, which + "truncated shape");
    std::vector<int64_t> dims(rank);
    uint64_t numel = 1;
    for (int d = 0; d < rank; ++d) {
      dims[d] = get<int64_t>(p, pos + 8 * d);
      if (dims[d] < 0 || static_cast<uint64_t>(dims[d]) > size)
        fail(pos + 8 * d, which + "dimension " + std::to_string(dims[d]) + " is out of range");
      if (dims[d] != 0 && numel > std::numeric_limits<uint64_t>::max() / dims[d])
        fail(pos + 8 * d, which + "shape overflows");
      numel *= static_cast<uint64_t>(dims[d]);
    }
    pos += 8u * rank;
    const DType dtype = static_cast<DType>(dt);
    const uint64_t elem = static_cast<uint64_t>(dtype_block_bytes(dtype));
    if (numel > size / (elem ? elem : 1) + 1) fail(pos, which + "shape is larger than the frame");
    const uint64_t nbytes = get<uint64_t>(p, pos);
    if (nbytes != numel * elem)
      fail(pos, which + "byte length " + std::to_string(nbytes) + " does not match shape " +
                    Shape(dims).to_string() + " of " + std::string(dtype_name(dtype)));
    pos += 8;
    if (size - pos < nbytes) fail(pos, which + "data runs past the end of the frame");
    Tensor t = Tensor::empty(Shape(dims), dtype);
    if (nbytes > 0) std::memcpy(t.raw_data(), p + pos, nbytes);
    pos += nbytes;
    m.tensors.push_back(std::move(t));
  }
  if (pos != size) fail(pos, std::to_string(size - pos) + " trailing bytes after the last tensor");
  return m;
}

nlohmann::json StageRoute::to_json() const {
  return {{"next_endpoint", next_endpoint},
          {"next_stage", next_stage},
          {"input_from_prev", input_from_prev},
          {"epoch", epoch},
          {"heartbeat_interval_s", heartbeat_interval_s},
          {"heartbeat_timeout_s", heartbeat_timeout_s},
          {"connect_timeout_s", connect_timeout_s}};
}

StageRoute StageRoute::from_json(const nlohmann::json& j) {
  auto bad = [](const char* key, const char* want) {
    throw WireError(std::string("route: field \"") + key + "\" must be " + want);
  };
  if (!j.is_object()) throw WireError("route: expected a JSON object");
  StageRoute r;
  if (j.contains("next_endpoint")) {
    if (!j["next_endpoint"].is_string()) bad("next_endpoint", "a string");
    r.next_endpoint = j["next_endpoint"].get<std::string>();
  }
  if (j.contains("next_stage")) {
    if (!j["next_stage"].is_number_unsigned() ||
        j["next_stage"].get<uint64_t>() > std::numeric_limits<uint32_t>::max())
      bad("next_stage", "an unsigned 32-bit integer");
    r.next_stage = j["next_stage"].get<uint32_t>();
  }
  if (j.contains("input_from_prev")) {
    if (!j["input_from_prev"].is_boolean()) bad("input_from_prev", "a boolean");
    r.input_from_prev = j["input_from_prev"].get<bool>();
  }
  if (j.contains("epoch")) {
    if (!j["epoch"].is_number_unsigned()) bad("epoch", "an unsigned integer");
    r.epoch = j["epoch"].get<uint64_t>();
  }
  for (auto [key, field] : {std::pair{"heartbeat_interval_s", &r.heartbeat_interval_s},
                            std::pair{"heartbeat_timeout_s", &r.heartbeat_timeout_s},
                            std::pair{"connect_timeout_s", &r.connect_timeout_s}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_number() || !(j[key].get<double>() > 0) || j[key].get<double>() > 3600)
      bad(key, "a number of seconds in (0, 3600]");
    *field = j[key].get<double>();
  }
  return r;
}

nlohmann::json packet_header_json(const Packet& p) {
  return {
      {"request_id", p.request_id}, {"micro", p.micro}, {"n_micro", p.n_micro}, {"meta", p.meta}};
}

Message packet_to_message(MsgType type, uint64_t seq, uint32_t stage, const Packet& p) {
  Message m;
  m.type = type;
  m.seq = seq;
  m.stage = stage;
  m.json = packet_header_json(p);
  m.tensors = p.tensors;
  return m;
}

Packet message_to_packet(Message m) {
  const auto& j = m.json;
  auto need = [&](const char* key, bool ok) {
    if (!j.contains(key) || !ok)
      throw WireError(std::string("wire message (") + msg_type_name(m.type) + "): field \"" + key +
                      "\" is missing or of the wrong type");
  };
  need("request_id", j.contains("request_id") && j["request_id"].is_number_unsigned());
  need("micro", j.contains("micro") && j["micro"].is_number_integer());
  need("n_micro", j.contains("n_micro") && j["n_micro"].is_number_integer());
  need("meta", j.contains("meta") && j["meta"].is_object());
  Packet p;
  p.request_id = j["request_id"].get<uint64_t>();
  const int64_t micro = j["micro"].get<int64_t>();
  const int64_t n_micro = j["n_micro"].get<int64_t>();
  if (n_micro < 1 || n_micro > (1 << 24) || micro < 0 || micro >= n_micro)
    throw WireError("wire message: micro " + std::to_string(micro) + " of " +
                    std::to_string(n_micro) + " is out of range");
  p.micro = static_cast<int32_t>(micro);
  p.n_micro = static_cast<int32_t>(n_micro);
  p.meta = j["meta"];
  p.tensors = std::move(m.tensors);
  return p;
}

}  // namespace tandem::sched
