// SPDX-License-Identifier: Apache-2.0
// The wire format: round trips, and every kind of malformed frame rejected with WireError.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "tandem/sched/wire.h"

namespace tandem::sched {
namespace {

Message sample() {
  Message m;
  m.type = MsgType::kPacket;
  m.seq = 42;
  m.stage = 3;
  Packet p;
  p.request_id = 9;
  p.micro = 1;
  p.n_micro = 4;
  p.meta = {{"pos_start", 128}, {"seq", 1}};
  p.tensors.push_back(Tensor::from_vector(std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f},
                                          Shape{2, 3}, DType::kF32));
  p.tensors.push_back(Tensor::from_vector(std::vector<int32_t>{5, 6, 7}, Shape{3}, DType::kI32));
  return packet_to_message(MsgType::kPacket, 42, 3, p);
}

template <class T>
void poke(std::string& f, size_t off, T v) {
  std::memcpy(f.data() + off, &v, sizeof(T));
}

TEST(SchedWire, RoundTripKeepsEveryField) {
  const std::string f = encode(sample());
  Message m = decode(f.data(), f.size());
  EXPECT_EQ(m.type, MsgType::kPacket);
  EXPECT_EQ(m.seq, 42u);
  EXPECT_EQ(m.stage, 3u);
  Packet p = message_to_packet(std::move(m));
  EXPECT_EQ(p.request_id, 9u);
  EXPECT_EQ(p.micro, 1);
  EXPECT_EQ(p.n_micro, 4);
  EXPECT_EQ(p.meta["pos_start"], 128);
  ASSERT_EQ(p.tensors.size(), 2u);
  EXPECT_EQ(p.tensors[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(p.tensors[0].to_float_vector(),
            (std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f}));
  EXPECT_EQ(p.tensors[1].dtype(), DType::kI32);
  EXPECT_EQ(p.tensors[1].data<int32_t>()[2], 7);
}

TEST(SchedWire, NonContiguousTensorIsSentContiguous) {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::kF32);
  Message m;
  m.type = MsgType::kResult;
  m.tensors.push_back(t.transpose(0, 1));
  const std::string f = encode(m);
  Message back = decode(f.data(), f.size());
  EXPECT_EQ(back.tensors[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(back.tensors[0].to_float_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(SchedWire, BlockQuantisedTensorsDoNotTravel) {
  Message m;
  m.tensors.push_back(Tensor::zeros(Shape{1, 32}, DType::kQ8_0));
  EXPECT_THROW(encode(m), InvalidArgument);
}

TEST(SchedWire, RejectsMalformedFrames) {
  const std::string good = encode(sample());
  auto rejects = [](std::string f, const std::string& needle, WireLimits lim = {}) {
    try {
      decode(f.data(), f.size(), lim);
      ADD_FAILURE() << "accepted a frame that should fail with '" << needle << "'";
    } catch (const WireError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  rejects(good.substr(0, 20), "shorter than the 48-byte header");
  std::string f = good;
  f[0] = 'X';
  rejects(f, "bad magic");
  f = good;
  poke<uint16_t>(f, 4, 2);
  rejects(f, "protocol version 2");
  f = good;
  f[6] = 99;
  rejects(f, "unknown message type");
  f = good;
  f[7] = 4;
  rejects(f, "unknown flags");
  rejects(good + "x", "body length");
  f = good;
  f[f.size() - 3] ^= 0x40;  // flip a payload bit
  rejects(f, "checksum mismatch");
  WireLimits small;
  small.max_message_bytes = 64;
  rejects(good, "exceeds the limit", small);
  f = good;
  poke<uint32_t>(f, 24, 100000);
  rejects(f, "tensors exceed the limit");
  f = good;
  poke<uint32_t>(f, 20, 1u << 30);
  rejects(f, "JSON length");
}

TEST(SchedWire, RejectsBadTensorDescriptorsWithoutChecksum) {
  // Without the checksum the structural checks must still catch lies about shapes and lengths.
  Message m;
  m.type = MsgType::kResult;
  m.tensors.push_back(Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, Shape{4}, DType::kF32));
  const std::string good = encode(m, /*checksum=*/false);
  const size_t desc = kWireHeaderBytes + 2;  // json "{}" is 2 bytes
  auto rejects = [](std::string f, const std::string& needle) {
    try {
      decode(f.data(), f.size());
      ADD_FAILURE() << "accepted; wanted " << needle;
    } catch (const WireError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  std::string f = good;
  f[desc] = static_cast<char>(DType::kQ4_0);
  rejects(f, "cannot travel");
  f = good;
  f[desc + 1] = 9;
  rejects(f, "rank 9");
  f = good;
  poke<int64_t>(f, desc + 8, 5);  // shape [5] but 16 bytes
  rejects(f, "does not match shape");
  f = good;
  poke<int64_t>(f, desc + 8, -1);
  rejects(f, "out of range");
  f = good;
  poke<int64_t>(f, desc + 8, int64_t{1} << 40);
  rejects(f, "out of range");
  f = good;
  f[desc + 3] = 1;
  rejects(f, "padding");
}

TEST(SchedWire, PacketFieldsAreValidated) {
  Message m;
  m.type = MsgType::kPacket;
  m.json = {{"request_id", 1}, {"micro", 3}, {"n_micro", 2}, {"meta", nlohmann::json::object()}};
  EXPECT_THROW(message_to_packet(m), WireError);
  m.json = {{"request_id", "x"}, {"micro", 0}, {"n_micro", 1}, {"meta", nlohmann::json::object()}};
  EXPECT_THROW(message_to_packet(m), WireError);
  m.json = {{"request_id", 1}, {"micro", 0}, {"n_micro", 1}};
  EXPECT_THROW(message_to_packet(m), WireError);
}

TEST(SchedWire, RandomMutationsNeverCrash) {
  // Every mutated frame either decodes or throws WireError; nothing else (ASan/UBSan watch).
  const std::string good = encode(sample(), /*checksum=*/false);
  std::mt19937 rng(123);
  int accepted = 0, rejected = 0;
  for (int it = 0; it < 3000; ++it) {
    std::string f = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 3) {
        case 0:
          f[rng() % f.size()] = static_cast<char>(rng());
          break;
        case 1:
          f.resize(rng() % (f.size() + 1));
          break;
        default:
          f.insert(rng() % (f.size() + 1), 1, static_cast<char>(rng()));
      }
      if (f.empty()) break;
    }
    try {
      Message m = decode(f.data(), f.size());
      ++accepted;
    } catch (const WireError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(accepted + rejected, 3000);
}

}  // namespace
}  // namespace tandem::sched
