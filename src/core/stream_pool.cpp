// SPDX-License-Identifier: Apache-2.0
// StreamPool (stream_pool.h): size-class free lists, fence bookkeeping and the hand-out check.
#include "tandem/core/stream_pool.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "tandem/core/allocator.h"
#include "tandem/core/error.h"

namespace tandem {
namespace {

constexpr size_t kMinBlock = 256;
constexpr size_t kMaxMessages = 16;

bool fired(const StreamFence& f) { return !f.event || f.event->query(); }

// Drops the fences that have fired; true when none is left.
bool prune(std::vector<StreamFence>& fences) {
  fences.erase(std::remove_if(fences.begin(), fences.end(), fired), fences.end());
  return fences.empty();
}

}  // namespace

size_t StreamPool::size_class(size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  // Four classes per power of two: 1, 1.25, 1.5, 1.75 x 2^k.
  const size_t top = std::bit_floor(bytes);
  const size_t step = std::max<size_t>(top / 4, 1);
  return (bytes + step - 1) / step * step;
}

StreamPool::StreamPool(Device device, StreamPoolOptions options) : device_(device), opt_(options) {}

StreamPool::~StreamPool() {
  Allocator& a = allocator(device_);
  for (const auto& [p, b] : blocks_) a.deallocate(p, b.bytes);
}

void* StreamPool::allocate(size_t bytes, int stream) {
  const size_t cls = size_class(bytes);
  std::lock_guard lk(mu_);
  ++stats_.allocations;
  void* p = take_locked(cls, stream);
  if (p) {
    ++stats_.reuses;
  } else {
    p = allocator(device_).allocate(cls, kMinBlock);
    blocks_[p].bytes = cls;
    stats_.reserved_bytes += static_cast<int64_t>(cls);
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  }
  Block& b = blocks_.at(p);
  check_locked(p, b, stream);
  b.in_use = true;
  b.fences.clear();
  stats_.in_use_bytes += static_cast<int64_t>(cls);
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  return p;
}

// A released block of class cls that `stream` may use now, removed from its list; nullptr if none.
void* StreamPool::take_locked(size_t cls, int stream) {
  poll_locked();
  auto own = free_on_stream_.find({cls, stream});
  if (own != free_on_stream_.end() && !own->second.empty()) {  // ordered behind its fences
    void* p = own->second.back();
    own->second.pop_back();
    return p;
  }
  auto any = free_any_.find(cls);
  if (any != free_any_.end()) {
    void* p = any->second;
    free_any_.erase(any);
    return p;
  }
  // Blocks ordered on another stream whose fences have fired since.
  for (auto it = free_on_stream_.lower_bound({cls, std::numeric_limits<int>::min()});
       it != free_on_stream_.end() && it->first.first == cls; ++it) {
    auto& list = it->second;
    for (size_t k = 0; k < list.size(); ++k)
      if (opt_.unsafe_reuse || prune(blocks_.at(list[k]).fences)) {
        void* p = list[k];
        list.erase(list.begin() + static_cast<std::ptrdiff_t>(k));
        return p;
      }
  }
  if (opt_.unsafe_reuse)
    for (size_t k = 0; k < pending_.size(); ++k)
      if (blocks_.at(pending_[k]).bytes == cls) {
        void* p = pending_[k];
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(k));
        --stats_.pending_blocks;
        return p;
      }
  return nullptr;
}

// The invariant, from the fences themselves: none may be pending on a stream other than the one
// the block goes to.
void StreamPool::check_locked(void* p, const Block& b, int stream) {
  for (const auto& f : b.fences) {
    if (f.stream == stream || fired(f)) continue;
    ++stats_.violations;
    const std::string msg =
        cat("StreamPool: block ", p, " (", b.bytes, " bytes) handed to stream ", stream,
            " while a consumer event of its previous tensor on stream ", f.stream, " is pending");
    if (messages_.size() < kMaxMessages) messages_.push_back(msg);
    if (opt_.throw_on_violation) throw ContractError(msg);
    return;
  }
}

void StreamPool::release(void* block, std::vector<StreamFence> fences) {
  std::lock_guard lk(mu_);
  auto it = blocks_.find(block);
  if (it == blocks_.end() || !it->second.in_use)
    throw InvalidArgument(cat("StreamPool::release: ", block, " is not a block in use"));
  Block& b = it->second;
  b.in_use = false;
  stats_.in_use_bytes -= static_cast<int64_t>(b.bytes);
  b.fences = std::move(fences);
  if (prune(b.fences)) {
    free_any_.emplace(b.bytes, block);
    return;
  }
  const int s = b.fences.front().stream;
  const bool one_stream = std::all_of(b.fences.begin(), b.fences.end(),
                                      [s](const StreamFence& f) { return f.stream == s; });
  if (one_stream) {
    free_on_stream_[{b.bytes, s}].push_back(block);
  } else {
    pending_.push_back(block);
    ++stats_.pending_blocks;
  }
}

size_t StreamPool::poll() {
  std::lock_guard lk(mu_);
  return poll_locked();
}

size_t StreamPool::poll_locked() {
  size_t moved = 0;
  for (size_t k = 0; k < pending_.size();) {
    Block& b = blocks_.at(pending_[k]);
    if (!prune(b.fences)) {
      ++k;
      continue;
    }
    free_any_.emplace(b.bytes, pending_[k]);
    pending_[k] = pending_.back();
    pending_.pop_back();
    --stats_.pending_blocks;
    ++moved;
  }
  return moved;
}

StreamPoolStats StreamPool::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

std::vector<std::string> StreamPool::violation_messages() const {
  std::lock_guard lk(mu_);
  return messages_;
}

}  // namespace tandem
