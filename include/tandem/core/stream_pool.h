// SPDX-License-Identifier: Apache-2.0
// StreamPool: a stream-ordered pool of memory blocks for tensors whose producer and consumers run
// on different streams (the recsys spec §2.4, unified asynchronous tensor management).
//
// Why: a scheduler that issues work ahead of its execution frees a tensor when it issues the last
// consumer, long before that consumer runs. The pool keeps such a block away from other work until
// the consumers' events have fired, and still reuses blocks across queries instead of allocating
// per query. How: blocks are keyed by size class (powers of two with four steps in between, at
// least 256 bytes) and taken from the device's Allocator, so their bytes show in its counters.
// A release names the fences of the tensor's consumers: (stream, event recorded after the last
// consumer on that stream).
//   - all fences fired: the block is free for any stream;
//   - every pending fence on one stream s: later allocations on s may take it at once (stream
//     order runs the new producer after those consumers), other streams once the fences fired;
//   - pending fences on several streams: the block waits on a pending list until all have fired
//     (spec option (a)); poll(), also run by every allocate(), moves it back.
// The invariant "no block is handed out again while a consumer event of its previous tensor is
// pending on another stream" is checked at every hand-out by querying the fences themselves
// (independently of the lists above); a breach is counted, its message kept, and with
// `throw_on_violation` raised as ContractError.
//
//   tandem::StreamPool pool(tandem::Device::cpu());
//   void* p = pool.allocate(4096, /*stream=*/0);                 // producer on stream 0
//   pool.release(p, {{0, ev_s0}, {1, ev_s1}});                    // consumers on streams 0 and 1
//   void* q = pool.allocate(4096, 1);                             // not p until both events fire
//   pool.stats().peak_in_use_bytes;
//
// Thread-safety: every method may be called from any thread (one mutex). Stream ids are the
// caller's (an executor's stream indices); the pool only compares them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/stream.h"
#include "tandem/export.h"

namespace tandem {

// An event recorded on `stream` after the last consumer of a tensor there (f_{T,s} of the spec).
struct StreamFence {
  int stream = -1;
  std::shared_ptr<Event> event;
};

struct StreamPoolOptions {
  bool throw_on_violation = false;
  // Test hook: hand blocks out ignoring their fences, so tests can show the check catches it.
  bool unsafe_reuse = false;
};

struct StreamPoolStats {
  int64_t in_use_bytes = 0;       // size-class bytes of the blocks handed out now
  int64_t peak_in_use_bytes = 0;  // maximum of in_use_bytes
  int64_t reserved_bytes = 0;     // bytes taken from the device allocator (free, pending, in use)
  int64_t peak_reserved_bytes = 0;
  int64_t allocations = 0;     // allocate() calls
  int64_t reuses = 0;          // of them served by a released block
  int64_t pending_blocks = 0;  // released, waiting for fences on several streams
  int64_t violations = 0;      // hand-outs that broke the invariant
};

class TANDEM_API StreamPool {
 public:
  explicit StreamPool(Device device, StreamPoolOptions options = {});
  // Returns every block to the device allocator (the caller must have finished with them).
  ~StreamPool();
  StreamPool(const StreamPool&) = delete;
  StreamPool& operator=(const StreamPool&) = delete;

  // A block of at least `bytes` bytes (aligned to 256) for a producer issued on `stream`.
  void* allocate(size_t bytes, int stream);
  // Gives back a block from allocate() once its consumers are covered by `fences` (empty: free at
  // once). InvalidArgument for a pointer that is not a block handed out by this pool.
  void release(void* block, std::vector<StreamFence> fences);
  // Returns pending blocks whose fences have all fired to the free lists; how many moved.
  size_t poll();

  StreamPoolStats stats() const;
  // The first violation messages (at most 16).
  std::vector<std::string> violation_messages() const;
  // The size class of a request: the bytes a block for it holds.
  static size_t size_class(size_t bytes);

 private:
  struct Block {
    size_t bytes = 0;
    bool in_use = false;
    std::vector<StreamFence> fences;  // of its previous tensor
  };
  void* take_locked(size_t cls, int stream);
  void check_locked(void* p, const Block& b, int stream);
  size_t poll_locked();

  Device device_;
  StreamPoolOptions opt_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Block> blocks_;
  // Free blocks by size class: ready for any stream, or ordered behind fences on one stream.
  std::multimap<size_t, void*> free_any_;
  std::map<std::pair<size_t, int>, std::vector<void*>> free_on_stream_;
  std::vector<void*> pending_;
  StreamPoolStats stats_;
  std::vector<std::string> messages_;
};

}  // namespace tandem
