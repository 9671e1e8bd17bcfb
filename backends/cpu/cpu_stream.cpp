// SPDX-License-Identifier: Apache-2.0
#include "cpu_stream.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <variant>
#include <vector>

#include "tandem/core/error.h"

namespace tandem::cpu {
namespace {

// Completion state of one record() of an event.
class Marker {
 public:
  void complete() {
    std::vector<std::function<void()>> waiters;
    {
      std::lock_guard lk(mu_);
      done_ = true;
      waiters.swap(waiters_);
    }
    cv_.notify_all();
    for (auto& w : waiters) w();
  }
  bool done() const {
    std::lock_guard lk(mu_);
    return done_;
  }
  void wait() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return done_; });
  }
  // Registers fn to run on completion; returns false (and does not register) if already complete.
  bool add_waiter(std::function<void()> fn) {
    std::lock_guard lk(mu_);
    if (done_) return false;
    waiters_.push_back(std::move(fn));
    return true;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::vector<std::function<void()>> waiters_;
};

class CpuEvent final : public Event {
 public:
  Device device() const override { return Device::cpu(); }
  bool query() const override {
    auto m = current();
    return !m || m->done();
  }
  void synchronize() override {
    if (auto m = current()) m->wait();
  }
  std::shared_ptr<Marker> arm() {
    auto m = std::make_shared<Marker>();
    std::lock_guard lk(mu_);
    marker_ = m;
    return m;
  }
  std::shared_ptr<Marker> current() const {
    std::lock_guard lk(mu_);
    return marker_;
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<Marker> marker_;
};

class CpuStream;

// Worker threads shared by all CPU streams. Leaked on purpose: workers may outlive static
// destruction.
class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool(std::max(4u, std::thread::hardware_concurrency()));
    return *pool;
  }
  void schedule(CpuStream* s) {
    {
      std::lock_guard lk(mu_);
      ready_.push_back(s);
    }
    cv_.notify_one();
  }

 private:
  explicit Pool(unsigned n) {
    for (unsigned i = 0; i < n; ++i) std::thread([this] { loop(); }).detach();
  }
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<CpuStream*> ready_;
};

struct Launch {
  std::function<void()> fn;
};
struct Record {
  std::shared_ptr<Marker> marker;
};
struct Wait {
  std::shared_ptr<Marker> marker;
};
using Item = std::variant<Launch, Record, Wait>;

class CpuStream final : public Stream {
 public:
  ~CpuStream() override {
    std::unique_lock lk(mu_);
    idle_cv_.wait(lk, [&] { return !scheduled_; });
  }
  Device device() const override { return Device::cpu(); }

  void launch(std::function<void()> fn) override { push(Launch{std::move(fn)}); }

  void record(Event& event) override {
    auto* e = dynamic_cast<CpuEvent*>(&event);
    if (!e) throw InvalidArgument("a CPU stream can only record CPU events");
    push(Record{e->arm()});
  }

  void wait(Event& event) override {
    if (auto* e = dynamic_cast<CpuEvent*>(&event)) {
      if (auto m = e->current(); m && !m->done()) push(Wait{std::move(m)});
      return;
    }
    // A foreign event (e.g. CUDA): block a worker in its synchronize(). The caller keeps the event
    // alive.
    push(Launch{[&event] { event.synchronize(); }});
  }

  void synchronize() override {
    std::unique_lock lk(mu_);
    idle_cv_.wait(lk, [&] { return !scheduled_; });
    if (error_) {
      auto e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

  // Runs queued items on the calling worker; returns when the queue is empty, a wait parks the
  // stream, or a fairness quantum is used up (then the stream goes to the back of the ready list).
  void drain() {
    for (int budget = 64; budget > 0; --budget) {
      Item item;
      {
        std::unique_lock lk(mu_);
        if (queue_.empty()) {
          scheduled_ = false;
          idle_cv_.notify_all();  // under the lock: the stream may be destroyed once it is released
          return;
        }
        if (auto* w = std::get_if<Wait>(&queue_.front())) {
          auto marker = w->marker;
          if (marker->add_waiter([this] { Pool::get().schedule(this); })) return;  // parked
          queue_.pop_front();
          continue;
        }
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      if (auto* l = std::get_if<Launch>(&item)) {
        try {
          l->fn();
        } catch (...) {
          std::lock_guard lk(mu_);
          if (!error_) error_ = std::current_exception();
        }
      } else if (auto* r = std::get_if<Record>(&item)) {
        r->marker->complete();
      }
    }
    Pool::get().schedule(this);
  }

 private:
  void push(Item item) {
    bool wake = false;
    {
      std::lock_guard lk(mu_);
      queue_.push_back(std::move(item));
      if (!scheduled_) scheduled_ = wake = true;
    }
    if (wake) Pool::get().schedule(this);
  }

  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::deque<Item> queue_;
  bool scheduled_ = false;  // queued on the pool, running, or parked on an event
  std::exception_ptr error_;
};

void Pool::loop() {
  for (;;) {
    CpuStream* s;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return !ready_.empty(); });
      s = ready_.front();
      ready_.pop_front();
    }
    s->drain();
  }
}

}  // namespace

std::unique_ptr<Stream> make_stream() { return std::make_unique<CpuStream>(); }
std::unique_ptr<Event> make_event() { return std::make_unique<CpuEvent>(); }

}  // namespace tandem::cpu
