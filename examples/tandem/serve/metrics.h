// SPDX-License-Identifier: Apache-2.0
// serve::Metrics: the counters and histograms of `tandem serve`, rendered as Prometheus text
// exposition (GET /metrics). Requests by HTTP status, prompt and generated tokens, time to first
// token and per-token latency histograms (cumulative buckets in seconds), the time of the decode
// steps (every running sequence past its prefill) by the number of sequences in the step, with
// the part of it spent in the KV policies' hooks; the gauges (queue depth, running sequences, KV
// bytes in use, the allocator's live and peak tensor bytes) are passed in at render time.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tandem::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v);
  // `name`_bucket{le=...}, `name`_sum, `name`_count lines.
  std::string render(const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative); the last one is +Inf
  double sum_ = 0.0;
  int64_t count_ = 0;
};

struct Gauges {
  int64_t queued = 0, running = 0, kv_bytes = 0;
  int64_t tensor_bytes = 0, tensor_peak_bytes = 0;  // the allocator of the model's device
};

class Metrics {
 public:
  Metrics();
  void count_request(int status);
  void add_tokens(int64_t prompt, int64_t generated);
  void observe_ttft(double s) { ttft_.observe(s); }
  void observe_token_latency(double s) { token_latency_.observe(s); }
  // A step in which all `rows` running sequences decode one token: its wall seconds and the
  // seconds of it in the KV policies' hooks.
  void observe_decode_step(int64_t rows, double seconds, double policy_seconds);
  std::string render(const Gauges& g) const;
  int64_t requests_with_status(int status) const;
  void count_cancelled();  // a client went away before its answer was complete
  int64_t cancelled() const;

 private:
  mutable std::mutex mu_;
  std::map<int, int64_t> requests_;
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0, cancelled_ = 0;
  Histogram ttft_, token_latency_;
  struct StepTimes {
    int64_t count = 0;
    double seconds = 0.0, policy_seconds = 0.0;
  };
  std::map<int64_t, StepTimes> decode_steps_;  // by rows
};

}  // namespace tandem::serve
