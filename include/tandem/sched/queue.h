// SPDX-License-Identifier: Apache-2.0
// BoundedQueue: the blocking FIFO between pipeline stages, with backpressure and close().
//
// push() blocks while the queue holds `capacity` items (backpressure: a fast stage cannot run
// ahead of a slow one by more than the queue), pop() blocks while it is empty; both take a timeout
// so no wait is unbounded, and close() wakes every waiter (push then returns false, pop returns
// what is left, then nullopt). Counters record the deepest fill and how often a push had to wait.
//
//   BoundedQueue<Packet> q(2);
//   q.push(std::move(p), 1.0);          // false: timed out or closed
//   std::optional<Packet> x = q.pop(1.0);
//
// Thread-safety: any number of producers and consumers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>

namespace tandem::sched {

template <class T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // `item` is moved from only when it was queued (true), so a timed-out push can be retried.
  bool push(T&& item, double timeout_s) {
    std::unique_lock lock(mutex_);
    if (!closed_ && items_.size() >= capacity_) {
      ++blocked_pushes_;
      if (!not_full_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                              [&] { return closed_ || items_.size() < capacity_; }))
        return false;
    }
    if (closed_) return false;
    items_.push_back(std::move(item));
    if (items_.size() > max_depth_) max_depth_ = items_.size();
    not_empty_.notify_one();
    return true;
  }

  std::optional<T> pop(double timeout_s) {
    std::unique_lock lock(mutex_);
    not_empty_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                        [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }

  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    not_full_.notify_all();
    not_empty_.notify_all();
  }
  bool closed() const {
    std::lock_guard lock(mutex_);
    return closed_;
  }
  size_t capacity() const { return capacity_; }
  size_t max_depth() const {
    std::lock_guard lock(mutex_);
    return max_depth_;
  }
  size_t blocked_pushes() const {
    std::lock_guard lock(mutex_);
    return blocked_pushes_;
  }

 private:
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable not_full_, not_empty_;
  std::deque<T> items_;
  bool closed_ = false;
  size_t max_depth_ = 0, blocked_pushes_ = 0;
};

}  // namespace tandem::sched
