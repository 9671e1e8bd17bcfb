// SPDX-License-Identifier: Apache-2.0
// ForwardingExecutor: an Executor that hands every call to another one, the base of the tests'
// wrappers that inject faults or delays by overriding a method or two (launch, usually).
//
//   class Slow final : public ForwardingExecutor {
//     using ForwardingExecutor::ForwardingExecutor;
//     void launch(int s, const OpInstance& op, LaunchLimits l) override { ...; inner().launch(s,
//     op, l); }
//   };
#pragma once

#include "tandem/recsys/executor.h"

namespace tandem::rec {

class ForwardingExecutor : public Executor {
 public:
  // `inner` must outlive the wrapper's use (it may be a member of the derived class).
  explicit ForwardingExecutor(Executor& inner) : inner_(inner) {}
  int create_stream(int priority) override { return inner_.create_stream(priority); }
  int num_streams() const override { return inner_.num_streams(); }
  std::shared_ptr<Event> create_event() override { return inner_.create_event(); }
  void launch(int s, const OpInstance& op, LaunchLimits limits) override {
    inner_.launch(s, op, limits);
  }
  void launch_group(int s, const std::vector<OpInstance>& ops, LaunchLimits limits) override {
    inner_.launch_group(s, ops, limits);
  }
  void host(int s, std::function<void()> fn) override { inner_.host(s, std::move(fn)); }
  void record(Event& e, int s) override { inner_.record(e, s); }
  void wait(int s, Event& e) override { inner_.wait(s, e); }
  bool done(Event& e) override { return inner_.done(e); }
  void* alloc_async(size_t bytes, int s) override { return inner_.alloc_async(bytes, s); }
  void free_async(void* p, size_t bytes, int s) override { inner_.free_async(p, bytes, s); }
  void free_after(void* p, size_t bytes, int s, const std::vector<StreamFence>& f) override {
    inner_.free_after(p, bytes, s, f);
  }
  StreamPoolStats pool_stats() const override { return inner_.pool_stats(); }
  ExecutorInfo info() const override { return inner_.info(); }
  void synchronize() override { inner_.synchronize(); }
  Clock::time_point now() const override { return inner_.now(); }
  std::vector<OpCost> predict_nodes(const RecModel& m, int64_t rows,
                                    LaunchLimits limits) const override {
    return inner_.predict_nodes(m, rows, limits);
  }

 protected:
  Executor& inner() { return inner_; }

 private:
  Executor& inner_;
};

}  // namespace tandem::rec
