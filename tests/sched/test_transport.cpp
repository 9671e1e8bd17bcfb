// SPDX-License-Identifier: Apache-2.0
// The transport: cluster keys, CURVE refusal, and a worker that rejects malformed, oversized and
// wrong-version messages and keeps serving.
#include <gtest/gtest.h>
#include <zmq.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "tandem/sched/client.h"
#include "tandem/sched/worker.h"

namespace tandem::sched {
namespace {

// A worker on a thread, stopped and joined on destruction.
struct ThreadWorker {
  explicit ThreadWorker(WorkerOptions o) : worker(std::move(o)), thread([this] { worker.run(); }) {}
  ~ThreadWorker() {
    worker.stop();
    thread.join();
  }
  Worker worker;
  std::thread thread;
};

ClientOptions quick() {
  ClientOptions o;
  o.heartbeat_interval_s = 0.05;
  o.heartbeat_timeout_s = 0.5;
  o.connect_timeout_s = 1.0;
  return o;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("tandem_sched_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(SchedTransport, KeysRoundTripAndMalformedKeysAreRejected) {
  if (!zmq_has_curve()) GTEST_SKIP() << "libzmq without CURVE";
  const std::string path = temp_path("k1");
  ClusterKey k = ClusterKey::generate();
  k.save(path);
  ClusterKey back = ClusterKey::load(path);
  EXPECT_EQ(back.public_z85, k.public_z85);
  EXPECT_EQ(back.secret_z85, k.secret_z85);
  { std::ofstream(path) << k.public_z85 << "\n" << ClusterKey::generate().secret_z85 << "\n"; }
  EXPECT_THROW(ClusterKey::load(path), ParseError);  // halves of two different pairs
  { std::ofstream(path) << "short\n"; }
  EXPECT_THROW(ClusterKey::load(path), ParseError);
  std::filesystem::remove(path);
  EXPECT_THROW(ClusterKey::load(path), IoError);
}

TEST(SchedTransport, CurveWorkerServesItsClusterAndRefusesOtherKeys) {
  if (!zmq_has_curve()) GTEST_SKIP() << "libzmq without CURVE";
  const ClusterKey good = ClusterKey::generate();
  WorkerOptions wo;
  wo.listen = "tcp://127.0.0.1:0";
  wo.key = good;
  ThreadWorker w(wo);
  ASSERT_EQ(w.worker.endpoint().rfind("tcp://127.0.0.1:", 0), 0u);

  WorkerClient ok(w.worker.endpoint(), good, quick());
  EXPECT_EQ(ok.hello()["protocol"], kWireVersion);
  ok.configure(0, {{"kind", "sched.identity"}}, EmulatedDevice{});
  Packet p;
  p.request_id = 5;
  p.tensors.push_back(Tensor::from_vector(std::vector<float>{1, 2, 3}, Shape{3}, DType::kF32));
  EXPECT_EQ(ok.process(0, p).tensors[0].to_float_vector(), (std::vector<float>{1, 2, 3}));

  const uint64_t refused_before = w.worker.refused();
  WorkerClient bad(w.worker.endpoint(), ClusterKey::generate(), quick());
  EXPECT_THROW(bad.hello(), WorkerLost);
  WorkerClient plain(w.worker.endpoint(), std::nullopt, quick());
  EXPECT_THROW(plain.hello(), WorkerLost);
  // The worker saw (and logged) the failed handshakes.
  for (int i = 0; i < 100 && w.worker.refused() == refused_before; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GT(w.worker.refused(), refused_before);
  EXPECT_EQ(ok.hello()["protocol"], kWireVersion);  // still serving its cluster
}

// Sends one raw frame on a DEALER and returns the decoded answer.
Message raw_call(const std::string& endpoint, const std::string& frame) {
  ZmqSocket s(ZMQ_DEALER);
  s.connect(endpoint);
  s.send(frame);
  auto r = s.recv(5.0);
  if (!r || r->size() != 1) throw TransportError("no answer");
  return decode((*r)[0].data(), (*r)[0].size());
}

TEST(SchedTransport, WorkerRejectsMalformedMessagesAndKeepsServing) {
  WorkerOptions wo;
  wo.listen = "inproc://sched-test-reject";
  ThreadWorker w(wo);
  Message m = raw_call(w.worker.endpoint(),
                       "definitely not a tandem message, but long enough to have a header");
  EXPECT_EQ(m.type, MsgType::kError);
  EXPECT_NE(m.json["what"].get<std::string>().find("bad magic"), std::string::npos);

  Message hello;
  hello.type = MsgType::kHello;
  std::string f = encode(hello);
  const uint16_t v2 = 2;
  std::memcpy(f.data() + 4, &v2, 2);
  m = raw_call(w.worker.endpoint(), f);
  EXPECT_EQ(m.type, MsgType::kError);
  EXPECT_NE(m.json["what"].get<std::string>().find("protocol version 2"), std::string::npos);

  // A packet for a stage it was never configured with, and a result (workers do not take those).
  Packet p;
  p.tensors.push_back(Tensor::zeros(Shape{2}, DType::kF32));
  m = raw_call(w.worker.endpoint(), encode(packet_to_message(MsgType::kPacket, 7, 3, p)));
  EXPECT_EQ(m.type, MsgType::kError);
  EXPECT_EQ(m.seq, 7u);
  m = raw_call(w.worker.endpoint(), encode(packet_to_message(MsgType::kResult, 8, 0, p)));
  EXPECT_EQ(m.type, MsgType::kError);
  EXPECT_EQ(w.worker.rejected(), 3u);  // the bad magic, the version, the result

  WorkerClient c(w.worker.endpoint(), std::nullopt, quick());
  EXPECT_NO_THROW(c.hello());
}

TEST(SchedTransport, OversizedMessagesAreRefused) {
  WorkerOptions wo;
  wo.listen = "tcp://127.0.0.1:0";
  wo.limits.max_message_bytes = 64 << 10;
  ThreadWorker w(wo);
  WorkerClient c(w.worker.endpoint(), std::nullopt, quick());
  c.hello();
  c.configure(0, {{"kind", "sched.identity"}}, EmulatedDevice{});
  Packet big;
  big.tensors.push_back(Tensor::zeros(Shape{1 << 16}, DType::kF32));  // 256 KiB
  // ZeroMQ's ZMQ_MAXMSGSIZE drops the connection before anything is allocated for the frame.
  EXPECT_THROW(c.process(0, big), TransportError);
  EXPECT_EQ(w.worker.packets(), 0u);
  WorkerClient again(w.worker.endpoint(), std::nullopt, quick());
  EXPECT_NO_THROW(again.hello());
}

// Worker to worker: worker a forwards stage 0's output to worker b's stage 1, which takes it as
// its input; forwards of another epoch, for a stage that takes none, and a packet whose input
// never arrived are refused with messages that say so; a successor nobody listens at is named
// with the worker that cannot reach it.
TEST(SchedTransport, WorkersForwardToTheirSuccessorAndRefuseWhatDoesNotFit) {
  WorkerOptions wo;
  wo.listen = "inproc://sched-test-route-a";
  ThreadWorker a(wo);
  wo.listen = "inproc://sched-test-route-b";
  ThreadWorker b(wo);
  WorkerClient ca(a.worker.endpoint(), std::nullopt, quick());
  WorkerClient cb(b.worker.endpoint(), std::nullopt, quick());
  StageRoute to_b, from_a;
  to_b.next_endpoint = b.worker.endpoint();
  to_b.next_stage = 1;
  to_b.heartbeat_timeout_s = 0.5;
  from_a.input_from_prev = true;
  to_b.epoch = from_a.epoch = 41;
  cb.configure(1, {{"kind", "sched.identity"}}, EmulatedDevice{}, from_a);
  ca.configure(0, {{"kind", "sched.identity"}}, EmulatedDevice{}, to_b);

  Packet p;
  p.request_id = 5;
  p.tensors.push_back(Tensor::from_vector(std::vector<float>{1, 2, 3}, Shape{3}, DType::kF32));
  const Packet header = ca.process(0, p);
  EXPECT_TRUE(header.tensors.empty());  // the tensors went to b
  EXPECT_GT(ca.forwarded_bytes(), 3u * 4);
  const Packet out = cb.process(1, header);
  ASSERT_EQ(out.tensors.size(), 1u);
  const float* v = out.tensors[0].data<float>();
  EXPECT_EQ(std::vector<float>(v, v + 3), (std::vector<float>{1, 2, 3}));

  auto refused = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const RemoteError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // Its input was taken once; a second packet for it has none.
  EXPECT_NE(refused([&] { cb.process(1, header); }).find("no input was forwarded"),
            std::string::npos);
  WorkerClient other(b.worker.endpoint(), std::nullopt, quick());
  EXPECT_NE(refused([&] { other.forward(1, 40, p); }).find("stage runs epoch 41"),
            std::string::npos);
  EXPECT_NE(refused([&] { other.forward(0, 41, p); }).find("not configured to take forwarded"),
            std::string::npos);

  // A successor that nobody listens at: the configure fails within the successor's heartbeat
  // timeout, naming both workers.
  std::string gone;
  {
    ZmqSocket s(ZMQ_ROUTER);
    s.bind("tcp://127.0.0.1:0");
    gone = s.endpoint();
  }
  wo.listen = "tcp://127.0.0.1:0";
  ThreadWorker t(wo);
  WorkerClient ct(t.worker.endpoint(), std::nullopt, quick());
  StageRoute to_gone = to_b;
  to_gone.next_endpoint = gone;
  to_gone.connect_timeout_s = 0.5;
  const std::string m = refused([&] {
    ct.configure(0, {{"kind", "sched.identity"}}, EmulatedDevice{}, to_gone);
  });
  EXPECT_NE(m.find("worker " + t.worker.endpoint() + " (stage 0) cannot reach its successor " +
                   gone + " (stage 1)"),
            std::string::npos)
      << m;
}

}  // namespace
}  // namespace tandem::sched
