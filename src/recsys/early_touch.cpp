// SPDX-License-Identifier: Apache-2.0
// The early-touch policy wrapper (early_touch.h): one background thread reads the pages of the
// submitted queries' rows, first in, first out.
#include "tandem/recsys/early_touch.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "tandem/core/error.h"

namespace tandem::rec {
namespace {

class EarlyTouchPolicy final : public ServingPolicy {
 public:
  EarlyTouchPolicy(std::unique_ptr<ServingPolicy> inner, const RecModel& model,
                   const EarlyTouchOptions& o)
      : inner_(std::move(inner)), model_(model), options_(o), thread_([this] { loop(); }) {}

  ~EarlyTouchPolicy() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

  std::string name() const override { return inner_->name(); }

  std::future<Response> submit(std::shared_ptr<const QueryInputs> query,
                               const RequestMeta& meta) override {
    {
      std::lock_guard lock(mu_);
      if (static_cast<int>(queue_.size()) < options_.max_queued) {
        queue_.push_back(query);
      } else {
        ++skipped_;
      }
    }
    cv_.notify_one();
    return inner_->submit(std::move(query), meta);
  }

  nlohmann::json stats() const override {
    nlohmann::json j = inner_->stats();
    std::lock_guard lock(mu_);
    j["early_touch"] = {{"queries", touched_},
                        {"skipped", skipped_},
                        {"pages", pages_},
                        {"touch_ms", touch_s_ * 1e3}};
    return j;
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      const std::shared_ptr<const QueryInputs> q = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      const auto t0 = std::chrono::steady_clock::now();
      const int64_t pages = model_.touch(*q);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      lock.lock();
      ++touched_;
      pages_ += pages;
      touch_s_ += s;
    }
  }

  std::unique_ptr<ServingPolicy> inner_;
  const RecModel& model_;
  EarlyTouchOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<const QueryInputs>> queue_;
  bool stop_ = false;
  int64_t touched_ = 0, skipped_ = 0, pages_ = 0;
  double touch_s_ = 0;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace

std::unique_ptr<ServingPolicy> with_early_touch(std::unique_ptr<ServingPolicy> inner,
                                                const RecModel& model,
                                                const EarlyTouchOptions& options) {
  if (options.max_queued < 1)
    throw InvalidArgument(cat("early touch: max_queued must be >= 1, got ", options.max_queued));
  if (!inner) throw InvalidArgument("early touch: no policy to wrap");
  return std::make_unique<EarlyTouchPolicy>(std::move(inner), model, options);
}

}  // namespace tandem::rec
