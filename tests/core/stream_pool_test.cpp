// SPDX-License-Identifier: Apache-2.0
// StreamPool: which released blocks each stream may take, the pending list, the hand-out check
// (shown to fire through the unsafe_reuse hook), and a stress run of producers and consumers on
// real CPU streams with random delays from several issuing threads (run under ThreadSanitizer in
// CI: a block reused too early is a data race there and a wrong value here).
#include "tandem/core/stream_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "tandem/core/allocator.h"
#include "tandem/core/error.h"

namespace tandem {
namespace {

// An event on a stream that stays pending until `gate` opens.
struct Gated {
  std::unique_ptr<Stream> stream = create_stream(Device::cpu());
  std::shared_ptr<Event> event = create_event(Device::cpu());
  std::atomic<bool> gate{false};
  Gated() {
    stream->launch([this] {
      while (!gate.load()) std::this_thread::yield();
    });
    stream->record(*event);
  }
  ~Gated() {
    gate = true;
    stream->synchronize();
  }
  void open() {
    gate = true;
    event->synchronize();
  }
};

TEST(StreamPool, SizeClassesRoundUpInQuarterSteps) {
  EXPECT_EQ(StreamPool::size_class(1), 256u);
  EXPECT_EQ(StreamPool::size_class(256), 256u);
  EXPECT_EQ(StreamPool::size_class(257), 320u);  // 256 + 64
  EXPECT_EQ(StreamPool::size_class(4096), 4096u);
  EXPECT_EQ(StreamPool::size_class(4097), 5120u);
  EXPECT_EQ(StreamPool::size_class(7000), 7168u);
}

TEST(StreamPool, SameStreamReusesAtOnceOtherStreamsAfterTheFence) {
  StreamPool pool(Device::cpu(), {.throw_on_violation = true});
  Gated g;
  void* a = pool.allocate(1000, 0);
  pool.release(a, {{0, g.event}});
  void* other = pool.allocate(1000, 1);  // stream 1 may not take a yet
  EXPECT_NE(other, a);
  void* same = pool.allocate(1000, 0);  // stream 0 is ordered behind the consumers
  EXPECT_EQ(same, a);
  pool.release(same, {{0, g.event}});
  g.open();
  EXPECT_EQ(pool.allocate(1000, 1), a);  // fired: any stream
  const auto s = pool.stats();
  EXPECT_EQ(s.allocations, 4);
  EXPECT_EQ(s.reuses, 2);
  EXPECT_EQ(s.violations, 0);
  EXPECT_EQ(s.in_use_bytes, 2 * 1024);
  EXPECT_EQ(s.reserved_bytes, 2 * 1024);
}

TEST(StreamPool, FencesOnSeveralStreamsWaitOnThePendingList) {
  StreamPool pool(Device::cpu(), {.throw_on_violation = true});
  Gated g0, g1;
  void* a = pool.allocate(5000, 0);
  pool.release(a, {{0, g0.event}, {1, g1.event}});
  EXPECT_EQ(pool.stats().pending_blocks, 1);
  void* b = pool.allocate(5000, 0);  // not even the producer stream: option (a)
  EXPECT_NE(b, a);
  g0.open();
  EXPECT_EQ(pool.poll(), 0u);
  g1.open();
  EXPECT_EQ(pool.poll(), 1u);
  EXPECT_EQ(pool.stats().pending_blocks, 0);
  EXPECT_EQ(pool.allocate(5000, 2), a);
  EXPECT_EQ(pool.stats().violations, 0);
}

TEST(StreamPool, CheckCatchesABlockHandedOutEarly) {
  StreamPool pool(Device::cpu(), {.unsafe_reuse = true});
  Gated g;
  void* a = pool.allocate(300, 0);
  pool.release(a, {{0, g.event}});
  EXPECT_EQ(pool.allocate(300, 1), a);
  EXPECT_EQ(pool.stats().violations, 1);
  ASSERT_EQ(pool.violation_messages().size(), 1u);
  EXPECT_NE(pool.violation_messages()[0].find("stream 0 is pending"), std::string::npos);

  StreamPool strict(Device::cpu(), {.throw_on_violation = true, .unsafe_reuse = true});
  void* b = strict.allocate(300, 0);
  strict.release(b, {{0, g.event}});
  EXPECT_THROW(strict.allocate(300, 1), ContractError);
}

TEST(StreamPool, ReleaseOfAForeignPointerNamesIt) {
  StreamPool pool(Device::cpu());
  int x = 0;
  EXPECT_THROW(pool.release(&x, {}), InvalidArgument);
  void* a = pool.allocate(10, 0);
  pool.release(a, {});
  EXPECT_THROW(pool.release(a, {}), InvalidArgument);  // twice
}

TEST(StreamPool, BlocksComeFromTheDeviceAllocator) {
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  {
    StreamPool pool(Device::cpu());
    pool.allocate(1 << 20, 0);
    EXPECT_GE(memory_stats(Device::cpu()).current_bytes - before, 1 << 20);
  }
  EXPECT_EQ(memory_stats(Device::cpu()).current_bytes, before);
}

// Producers write a tensor's id into a block on a random stream; one to three consumers on random
// streams (waiting on the ready event when foreign) check it after random delays; the block is
// released at issue time behind the consumers' fences. Several threads issue at once.
TEST(StreamPool, StressRandomStreamsDelaysAndIssuers) {
  constexpr int kStreams = 4, kIssuers = 3, kTensors = 250;
  std::vector<std::unique_ptr<Stream>> streams;
  for (int s = 0; s < kStreams; ++s) streams.push_back(create_stream(Device::cpu()));
  StreamPool pool(Device::cpu());
  std::atomic<int64_t> wrong{0}, checked{0};
  auto delay = [](uint32_t us) {
    if (us) std::this_thread::sleep_for(std::chrono::microseconds(us));
  };
  auto issuer = [&](int t) {
    std::mt19937 rng(1234u + static_cast<unsigned>(t));
    for (int n = 0; n < kTensors; ++n) {
      const int64_t id = int64_t{t} * 1000000 + n;
      const size_t words = size_t{64} << (rng() % 4);
      const int sp = static_cast<int>(rng() % kStreams);
      auto* block = static_cast<int64_t*>(pool.allocate(words * sizeof(int64_t), sp));
      const uint32_t dp = rng() % 40;
      streams[sp]->launch([=] {
        delay(dp);
        for (size_t k = 0; k < words; ++k) block[k] = id;
      });
      auto ready = create_event(Device::cpu());
      streams[sp]->record(*ready);
      std::vector<std::shared_ptr<Event>> last(kStreams);
      const int consumers = 1 + static_cast<int>(rng() % 3);
      for (int c = 0; c < consumers; ++c) {
        const int sc = static_cast<int>(rng() % kStreams);
        if (sc != sp) streams[sc]->wait(*ready);
        const uint32_t dc = rng() % 40;
        streams[sc]->launch([=, &wrong, &checked] {
          delay(dc);
          for (size_t k = 0; k < words; ++k)
            if (block[k] != id) {
              ++wrong;
              break;
            }
          ++checked;
        });
        last[sc] = create_event(Device::cpu());
        streams[sc]->record(*last[sc]);
      }
      std::vector<StreamFence> fences;
      for (int s = 0; s < kStreams; ++s)
        if (last[s]) fences.push_back({s, last[s]});
      pool.release(block, std::move(fences));
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kIssuers; ++t) threads.emplace_back(issuer, t);
  for (auto& th : threads) th.join();
  for (auto& s : streams) s->synchronize();
  pool.poll();
  const auto st = pool.stats();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GE(checked.load(), kIssuers * kTensors);
  EXPECT_EQ(st.violations, 0) << pool.violation_messages().front();
  EXPECT_GT(st.reuses, 0);
  EXPECT_EQ(st.in_use_bytes, 0);
  EXPECT_EQ(st.pending_blocks, 0);
  EXPECT_LT(st.peak_reserved_bytes, int64_t{kIssuers} * kTensors * 512 * 8);  // far below no reuse
}

}  // namespace
}  // namespace tandem
