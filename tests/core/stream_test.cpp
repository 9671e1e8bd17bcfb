// SPDX-License-Identifier: Apache-2.0
// CPU Stream/Event semantics and a concurrency stress test (also run under ThreadSanitizer in CI
// when time allows). No timing assertions: only ordering and completeness.
#include "tandem/core/stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tandem/core/error.h"

namespace tandem {
namespace {

TEST(CpuStream, RunsInSubmissionOrder) {
  auto s = create_stream(Device::cpu());
  std::vector<int> seen;
  for (int i = 0; i < 1000; ++i) s->launch([&seen, i] { seen.push_back(i); });
  s->synchronize();
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(seen[i], i);
}

TEST(CpuStream, EventOrdersTwoStreams) {
  auto producer = create_stream(Device::cpu());
  auto consumer = create_stream(Device::cpu());
  auto ev = create_event(Device::cpu());
  EXPECT_TRUE(ev->query());  // never recorded
  std::atomic<bool> gate{false};
  std::atomic<int> value{0};
  // The producer is held until `gate` opens, so the consumer must really wait on the event.
  producer->launch([&] {
    while (!gate.load()) std::this_thread::yield();
    value = 42;
  });
  producer->record(*ev);
  consumer->wait(*ev);
  int observed = -1;
  consumer->launch([&] { observed = value.load(); });
  EXPECT_FALSE(ev->query());
  gate = true;
  consumer->synchronize();
  EXPECT_EQ(observed, 42);
  EXPECT_TRUE(ev->query());
  ev->synchronize();
}

TEST(CpuStream, WaitOnCompletedEventDoesNotBlock) {
  auto s = create_stream(Device::cpu());
  auto ev = create_event(Device::cpu());
  s->record(*ev);
  ev->synchronize();
  int x = 0;
  s->wait(*ev);
  s->launch([&] { x = 1; });
  s->synchronize();
  EXPECT_EQ(x, 1);
}

TEST(CpuStream, ErrorsAreRethrownBySynchronizeOnce) {
  auto s = create_stream(Device::cpu());
  int after = 0;
  s->launch([] { throw std::runtime_error("boom in stream"); });
  s->launch([&] { after = 1; });  // later work still runs
  try {
    s->synchronize();
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "boom in stream");
  }
  EXPECT_EQ(after, 1);
  EXPECT_NO_THROW(s->synchronize());
}

TEST(CpuStream, DestructorWaitsForQueuedWork) {
  std::atomic<int> done{0};
  {
    auto s = create_stream(Device::cpu());
    for (int i = 0; i < 100; ++i) s->launch([&] { done.fetch_add(1); });
  }
  EXPECT_EQ(done.load(), 100);
}

TEST(CpuStream, RecordingARecordedEventRearmsIt) {
  auto s = create_stream(Device::cpu());
  auto ev = create_event(Device::cpu());
  std::atomic<bool> gate{false};
  s->record(*ev);
  ev->synchronize();
  s->launch([&] {
    while (!gate.load()) std::this_thread::yield();
  });
  s->record(*ev);
  EXPECT_FALSE(ev->query());
  gate = true;
  ev->synchronize();
  EXPECT_TRUE(ev->query());
}

// Many streams, many submitting threads, a chain of cross-stream event dependencies: every item
// runs exactly once, per-stream order holds, and every dependency is respected.
TEST(CpuStream, StressManyStreamsAndCrossDependencies) {
  constexpr int kStreams = 64, kItems = 200;
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::unique_ptr<Event>> events;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(create_stream(Device::cpu()));
    events.push_back(create_event(Device::cpu()));
  }
  std::vector<std::atomic<int>> progress(kStreams);
  std::atomic<int> violations{0};
  std::vector<std::thread> submitters;
  std::mutex
      chain_mu;  // stream i waits on stream i-1's event: record/wait pairs are issued in order
  for (int t = 0; t < 4; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = t; i < kStreams; i += 4) {
        for (int k = 0; k < kItems; ++k) {
          streams[i]->launch([&, i, k] {
            if (progress[i].load() != k) violations.fetch_add(1);
            progress[i].store(k + 1);
          });
        }
      }
    });
  }
  for (auto& th : submitters) th.join();
  // Dependency chain: stream i's marker item runs after stream i-1 finished all its items.
  std::vector<std::atomic<int>> checked(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    std::lock_guard lk(chain_mu);
    streams[i]->record(*events[i]);
    if (i > 0) {
      streams[i]->wait(*events[i - 1]);
      streams[i]->launch([&, i] { checked[i] = progress[i - 1].load(); });
    }
  }
  for (auto& s : streams) s->synchronize();
  EXPECT_EQ(violations.load(), 0);
  for (int i = 0; i < kStreams; ++i) EXPECT_EQ(progress[i].load(), kItems);
  for (int i = 1; i < kStreams; ++i) EXPECT_EQ(checked[i].load(), kItems) << "stream " << i;
}

TEST(CpuStream, ConcurrentLaunchAndSynchronizeFromManyThreads) {
  auto s = create_stream(Device::cpu());
  std::atomic<int> count{0};
  std::vector<std::thread> th;
  for (int t = 0; t < 8; ++t) {
    th.emplace_back([&] {
      for (int k = 0; k < 500; ++k) {
        s->launch([&] { count.fetch_add(1); });
        if (k % 100 == 0) s->synchronize();
      }
    });
  }
  for (auto& t : th) t.join();
  s->synchronize();
  EXPECT_EQ(count.load(), 8 * 500);
}

}  // namespace
}  // namespace tandem
