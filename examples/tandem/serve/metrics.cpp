// SPDX-License-Identifier: Apache-2.0
// Prometheus text rendering of the server's metrics; see metrics.h.
#include "metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace tandem::serve {

void Histogram::observe(double v) {
  const size_t b =
      static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  std::lock_guard lock(mu_);
  ++counts_[b];
  sum_ += v;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::lock_guard lock(mu_);
  std::string s = fmt::format("# HELP {0} {1}\n# TYPE {0} histogram\n", name, help);
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    s += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  s += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name,
                   sum_, name, count_);
  return s;
}

Metrics::Metrics()
    : ttft_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      token_latency_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}) {}

void Metrics::count_request(int status) {
  std::lock_guard lock(mu_);
  ++requests_[status];
}

void Metrics::add_tokens(int64_t prompt, int64_t generated) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
}

int64_t Metrics::requests_with_status(int status) const {
  std::lock_guard lock(mu_);
  const auto it = requests_.find(status);
  return it == requests_.end() ? 0 : it->second;
}

void Metrics::observe_decode_step(int64_t rows, double seconds, double policy_seconds) {
  std::lock_guard lock(mu_);
  StepTimes& t = decode_steps_[rows];
  ++t.count;
  t.seconds += seconds;
  t.policy_seconds += policy_seconds;
}

void Metrics::count_cancelled() {
  std::lock_guard lock(mu_);
  ++cancelled_;
}

int64_t Metrics::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

std::string Metrics::render(const Gauges& g) const {
  std::string s;
  {
    std::lock_guard lock(mu_);
    s += "# HELP tandem_requests_total HTTP requests answered, by status code\n"
         "# TYPE tandem_requests_total counter\n";
    for (const auto& [status, n] : requests_) {
      s += fmt::format("tandem_requests_total{{status=\"{}\"}} {}\n", status, n);
    }
    s += fmt::format(
        "# HELP tandem_prompt_tokens_total Prompt tokens of finished generations\n"
        "# TYPE tandem_prompt_tokens_total counter\ntandem_prompt_tokens_total {}\n"
        "# HELP tandem_generated_tokens_total Tokens generated\n"
        "# TYPE tandem_generated_tokens_total counter\ntandem_generated_tokens_total {}\n"
        "# HELP tandem_cancelled_requests_total Generations dropped because the client went away\n"
        "# TYPE tandem_cancelled_requests_total counter\ntandem_cancelled_requests_total {}\n",
        prompt_tokens_, generated_tokens_, cancelled_);
    s += "# HELP tandem_decode_step_seconds Batch steps in which every sequence decodes a token "
         "(no prompt chunk), by sequences in the step\n"
         "# TYPE tandem_decode_step_seconds summary\n";
    for (const auto& [rows, t] : decode_steps_) {
      s += fmt::format(
          "tandem_decode_step_seconds_sum{{rows=\"{0}\"}} {1}\n"
          "tandem_decode_step_seconds_count{{rows=\"{0}\"}} {2}\n",
          rows, t.seconds, t.count);
    }
    s += "# HELP tandem_decode_step_policy_seconds_total Seconds of those steps in the KV "
         "policies' hooks\n# TYPE tandem_decode_step_policy_seconds_total counter\n";
    for (const auto& [rows, t] : decode_steps_) {
      s += fmt::format("tandem_decode_step_policy_seconds_total{{rows=\"{}\"}} {}\n", rows,
                       t.policy_seconds);
    }
  }
  s += fmt::format(
      "# HELP tandem_queue_depth Requests waiting for a batch slot\n"
      "# TYPE tandem_queue_depth gauge\ntandem_queue_depth {}\n"
      "# HELP tandem_running_sequences Sequences in the running batch\n"
      "# TYPE tandem_running_sequences gauge\ntandem_running_sequences {}\n"
      "# HELP tandem_kv_bytes KV-cache bytes held by the running sequences\n"
      "# TYPE tandem_kv_bytes gauge\ntandem_kv_bytes {}\n"
      "# HELP tandem_tensor_bytes Live tensor bytes of the model device's allocator (KV caches, "
      "activations, and any weights it holds)\n"
      "# TYPE tandem_tensor_bytes gauge\ntandem_tensor_bytes {}\n"
      "# HELP tandem_tensor_peak_bytes Most live tensor bytes of that allocator since the start\n"
      "# TYPE tandem_tensor_peak_bytes gauge\ntandem_tensor_peak_bytes {}\n",
      g.queued, g.running, g.kv_bytes, g.tensor_bytes, g.tensor_peak_bytes);
  s += ttft_.render("tandem_time_to_first_token_seconds",
                    "Request submitted to first token sampled");
  s += token_latency_.render("tandem_inter_token_latency_seconds",
                             "Time between consecutive tokens of a sequence");
  return s;
}

}  // namespace tandem::serve
