// SPDX-License-Identifier: Apache-2.0
// serve::Engine: the one thread that owns the model's BatchRunner for `tandem serve`. HTTP handler
// threads build a Job (prompt ids, sampling, stop strings, its own KV cache) and submit() it;
// the engine admits queued jobs into the running batch between steps (at most `parallel` running,
// at most `queue_limit` waiting: submit() refuses beyond that), runs BatchRunner::step(), and
// hands each job its text through the job's channel (a mutex + condvar: `out` grows, `done`
// ends it). Text stop strings cut the output (the text that could begin a stop string is held
// back until it cannot). cancel() (a client gone) drops the sequence before the next step and
// frees its cache at once. The engine also keeps the server's metrics (metrics.h).
//
// Thread-safety: submit(), cancel(), set_paused() and the metric reads are safe from any thread;
// a Job's channel fields are read under its mutex.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "metrics.h"
#include "tandem/llm/generate.h"
#include "tandem/llm/kv_cache.h"
#include "tandem/llm/model.h"
#include "tandem/llm/tokenizer.h"

namespace tandem::serve {

struct Job {
  // Set before submit(); the engine owns them afterwards.
  std::vector<int32_t> prompt;
  llm::GenerateOptions options;   // on_token and stop_ids are set by the engine
  std::vector<std::string> stop;  // text stop sequences
  std::unique_ptr<llm::KvCache> cache;
  int64_t kv_full_bytes = 0;  // what a full cache of prompt + max_new_tokens would take
  int64_t kv_expected = 0;    // engine: kv_full_bytes x the policy's measured ratio, at admission

  // The channel (under mu).
  std::mutex mu;
  std::condition_variable cv;
  std::string out;  // text not yet taken by the HTTP side
  bool done = false;
  std::string finish_reason;  // "stop", "length"; "cancelled" or "error" internally
  std::string error;          // with finish_reason "error"
  int64_t completion_tokens = 0;
  int64_t kv_bytes = 0;  // the cache's bytes when the sequence ended
  double ttft_s = 0.0, decode_tokens_per_s = 0.0;

  std::atomic<bool> cancelled{false};

  // Engine-private.
  uint64_t runner_id = 0;
  std::optional<llm::Detokenizer> detok;
  std::string text;  // generated so far (cut at a stop string)
  size_t sent = 0;   // bytes of text handed to `out`
  bool stop_hit = false;
  std::chrono::steady_clock::time_point submitted, last_token;
  bool any_token = false;
};

struct EngineOptions {
  int parallel = 4;      // sequences in the running batch at most
  int queue_limit = 64;  // jobs waiting for a slot at most; submit() refuses beyond
  // KV admission (0: none): the job at the head of the queue joins a non-empty batch only while
  // its full cache (a KV policy compresses only once the prompt is in) fits beside the running
  // sequences', each counted as the larger of its measured cache and its reservation: its full
  // cache until its prefill is done, then its expected bytes = kv_full_bytes x the ratio of
  // measured to full-cache bytes of the sequences finished so far (1 until one has). So the
  // memory a KV policy frees admits more sequences, while the sequences in prefill keep the
  // peak within the budget. It bounds admission; a cache that outgrows its expectation (the
  // ratio is an average) is not stopped.
  int64_t kv_budget_bytes = 0;
};

// Bytes a cache shaped like `cache` takes for `tokens` tokens in every (layer, KV head) with no
// eviction or quantization (whole blocks of its storage dtype).
int64_t full_cache_bytes(const llm::KvCache& cache, int64_t tokens);

class Engine {
 public:
  Engine(const llm::Model& model, const llm::Tokenizer& tokenizer, EngineOptions options);
  ~Engine();  // stops the thread; unfinished jobs end with an error
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a job; false when the queue is full (the caller answers 503).
  bool submit(const std::shared_ptr<Job>& job);
  // Asks the engine to drop the job (queued or running) before its next step.
  void cancel(const std::shared_ptr<Job>& job);
  // Test hook: while paused the engine admits and steps nothing (queued jobs wait).
  void set_paused(bool paused);

  Metrics& metrics() { return metrics_; }
  int64_t queued() const { return queued_.load(); }
  int64_t running() const { return running_count_.load(); }
  int64_t kv_bytes() const { return kv_bytes_.load(); }

 private:
  void loop();
  bool on_token(Job& job, int32_t id);
  void publish(Job& job, size_t upto);
  void finish(Job& job, const std::string& reason, const std::string& error = {});
  // Removes running_[i], updates the gauges, then finishes the job.
  void retire(size_t i, const std::string& reason, const std::string& error = {});
  void update_gauges();

  const llm::Model& model_;
  const llm::Tokenizer& tokenizer_;
  EngineOptions options_;
  llm::BatchRunner runner_;
  Metrics metrics_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false, paused_ = false, cancel_pending_ = false;
  std::vector<std::shared_ptr<Job>> running_;  // engine thread only
  std::atomic<int64_t> queued_{0}, running_count_{0}, kv_bytes_{0};
  // Measured / full-cache KV bytes of finished sequences (engine thread): the first one's, then a
  // moving average (weight 0.2 for the newest).
  double kv_ratio_ = 1.0;
  bool kv_ratio_measured_ = false;
  std::thread thread_;
};

}  // namespace tandem::serve
