// SPDX-License-Identifier: Apache-2.0
// The engine thread of `tandem serve`; see engine.h.
#include "engine.h"

#include <algorithm>

#include "tandem/core/error.h"
#include "tandem/core/log.h"

namespace tandem::serve {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Length of the longest suffix of `text` (from `from` on) that is a proper prefix of a stop
// string: those bytes are held back until the next token shows whether the stop completes.
size_t held_suffix(const std::string& text, size_t from, const std::vector<std::string>& stops) {
  size_t held = 0;
  for (const std::string& stop : stops) {
    const size_t most = std::min(stop.size() - 1, text.size() - from);
    for (size_t n = most; n > held; --n) {
      if (text.compare(text.size() - n, n, stop, 0, n) == 0) {
        held = n;
        break;
      }
    }
  }
  return held;
}

}  // namespace

int64_t full_cache_bytes(const llm::KvCache& cache, int64_t tokens) {
  const llm::KvCacheShape& shape = cache.shape();
  const int64_t blocks = (tokens + shape.block_tokens - 1) / shape.block_tokens;
  return blocks * cache.block_bytes() * shape.n_layers * shape.n_kv_heads;
}

Engine::Engine(const llm::Model& model, const llm::Tokenizer& tokenizer, EngineOptions options)
    : model_(model), tokenizer_(tokenizer), options_(options), runner_(model) {
  if (options_.parallel < 1) throw InvalidArgument("serve: --parallel must be at least 1");
  if (options_.queue_limit < 0) throw InvalidArgument("serve: --queue must not be negative");
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool Engine::submit(const std::shared_ptr<Job>& job) {
  {
    std::lock_guard lock(mu_);
    if (stop_ || static_cast<int>(queue_.size()) >= options_.queue_limit + options_.parallel -
                                                        static_cast<int>(running_count_.load())) {
      return false;
    }
    job->submitted = Clock::now();
    job->detok.emplace(tokenizer_, /*render_special=*/false);
    queue_.push_back(job);
    queued_ = static_cast<int64_t>(queue_.size());
  }
  cv_.notify_all();
  return true;
}

void Engine::cancel(const std::shared_ptr<Job>& job) {
  job->cancelled = true;
  {
    std::lock_guard lock(mu_);
    cancel_pending_ = true;
  }
  cv_.notify_all();
}

void Engine::set_paused(bool paused) {
  {
    std::lock_guard lock(mu_);
    paused_ = paused;
  }
  cv_.notify_all();
}

void Engine::publish(Job& job, size_t upto) {
  if (upto <= job.sent) return;
  {
    std::lock_guard lock(job.mu);
    job.out.append(job.text, job.sent, upto - job.sent);
  }
  job.sent = upto;
  job.cv.notify_all();
}

bool Engine::on_token(Job& job, int32_t id) {
  const auto now = Clock::now();
  if (!job.any_token) {
    metrics_.observe_ttft(std::chrono::duration<double>(now - job.submitted).count());
  } else {
    metrics_.observe_token_latency(std::chrono::duration<double>(now - job.last_token).count());
  }
  job.any_token = true;
  job.last_token = now;
  {
    std::lock_guard lock(job.mu);
    ++job.completion_tokens;
  }
  if (job.cancelled) return false;
  if (tokenizer_.is_eog(id)) return true;  // a stop id: the runner ends the sequence
  const size_t before = job.text.size();
  job.text += job.detok->push(id);
  // The earliest match of any stop string that ends in the new text; it starts after the text
  // already sent (that text held back every prefix of a stop string).
  size_t cut = std::string::npos;
  for (const std::string& stop : job.stop) {
    const size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
    cut = std::min(cut, job.text.find(stop, std::max(from, job.sent)));
  }
  if (cut != std::string::npos) {
    job.text.resize(cut);
    job.stop_hit = true;
  }
  if (job.stop_hit) {
    publish(job, job.text.size());
    return false;
  }
  publish(job, job.text.size() - held_suffix(job.text, job.sent, job.stop));
  return true;
}

void Engine::finish(Job& job, const std::string& reason, const std::string& error) {
  if (reason == "cancelled") metrics_.count_cancelled();
  if (reason != "cancelled" && reason != "error" && !job.stop_hit) {
    job.text += job.detok->flush();
    publish(job, job.text.size());
  }
  if (job.cache) {
    const int64_t bytes = job.cache->bytes();
    const int64_t full = full_cache_bytes(*job.cache, job.cache->next_position());
    if (reason != "cancelled" && reason != "error" && full > 0) {
      const double ratio = static_cast<double>(bytes) / static_cast<double>(full);
      kv_ratio_ = std::clamp(kv_ratio_measured_ ? 0.8 * kv_ratio_ + 0.2 * ratio : ratio, 0.01, 1.0);
      kv_ratio_measured_ = true;
    }
    job.cache.reset();  // frees the KV memory now
    std::lock_guard lock(job.mu);
    job.kv_bytes = bytes;
  }
  {
    std::lock_guard lock(job.mu);
    job.done = true;
    job.finish_reason = reason;
    job.error = error;
  }
  job.cv.notify_all();
}

void Engine::update_gauges() {
  int64_t kv = 0;
  for (const auto& job : running_) kv += job->cache->bytes();
  kv_bytes_ = kv;  // before the count: whoever sees the new count sees these bytes
  running_count_ = static_cast<int64_t>(running_.size());
}

void Engine::retire(size_t i, const std::string& reason, const std::string& error) {
  std::shared_ptr<Job> job = std::move(running_[i]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
  update_gauges();  // the gauges leave the job out before its client hears it is done
  finish(*job, reason, error);
}

void Engine::loop() {
  while (true) {
    std::vector<std::shared_ptr<Job>> admitted, dropped;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || cancel_pending_ || (!paused_ && (!running_.empty() || !queue_.empty()));
      });
      if (stop_) break;
      cancel_pending_ = false;
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->cancelled) {
          dropped.push_back(*it);
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      int64_t kv_planned = 0;
      for (const auto& job : running_) {
        // on_token sets any_token on this thread, after the policy compressed the prefilled cache.
        const int64_t reserved = job->any_token ? job->kv_expected : job->kv_full_bytes;
        kv_planned += std::max(job->cache->bytes(), reserved);
      }
      while (!paused_ && !queue_.empty() &&
             static_cast<int>(running_.size() + admitted.size()) < options_.parallel) {
        Job& next = *queue_.front();
        const bool batch_empty = running_.empty() && admitted.empty();
        if (options_.kv_budget_bytes > 0 && !batch_empty &&
            kv_planned + next.kv_full_bytes > options_.kv_budget_bytes) {
          break;  // waits (first in, first out) until sequences finish or shrink
        }
        kv_planned += next.kv_full_bytes;
        next.kv_expected =
            static_cast<int64_t>(static_cast<double>(next.kv_full_bytes) * kv_ratio_);
        admitted.push_back(queue_.front());
        queue_.pop_front();
      }
      queued_ = static_cast<int64_t>(queue_.size());
    }
    for (auto& job : dropped) finish(*job, "cancelled");
    for (size_t i = 0; i < running_.size();) {
      if (running_[i]->cancelled) {
        runner_.cancel(running_[i]->runner_id);
        retire(i, "cancelled");
      } else {
        ++i;
      }
    }
    for (auto& job : admitted) {
      llm::BatchRequest r{job->cache.get(), job->prompt, job->options};
      r.options.stop_ids = tokenizer_.eog_ids();
      Job* j = job.get();
      r.options.on_token = [this, j](int32_t id) { return on_token(*j, id); };
      try {
        job->runner_id = runner_.add(std::move(r));
        running_.push_back(job);
      } catch (const std::exception& e) {
        finish(*job, "error", e.what());
      }
    }
    update_gauges();
    {
      std::lock_guard lock(mu_);
      if (paused_ || running_.empty()) continue;
    }
    // A decode step: every running sequence has its first token, so none feeds a prompt chunk.
    const bool decode_only = std::all_of(running_.begin(), running_.end(),
                                         [](const auto& job) { return job->any_token; });
    const double policy_before = runner_.stats().policy_s;
    const auto step_start = Clock::now();
    std::vector<std::pair<uint64_t, llm::GenerateResult>> done;
    try {
      done = runner_.step();
      if (decode_only) {
        metrics_.observe_decode_step(static_cast<int64_t>(running_.size()),
                                     seconds_since(step_start),
                                     runner_.stats().policy_s - policy_before);
      }
    } catch (const std::exception& e) {
      log().error("serve: a batch step failed: {}", e.what());
      while (!running_.empty()) {
        runner_.cancel(running_.back()->runner_id);
        retire(running_.size() - 1, "error", e.what());
      }
    }
    for (auto& [id, result] : done) {
      const auto it = std::find_if(running_.begin(), running_.end(),
                                   [id = id](const auto& j) { return j->runner_id == id; });
      if (it == running_.end()) continue;
      Job& job = **it;
      metrics_.add_tokens(result.stats.prompt_tokens, result.stats.generated_tokens);
      {
        std::lock_guard lock(job.mu);
        job.ttft_s = result.stats.ttft_s;
        job.decode_tokens_per_s = result.stats.decode_tokens_per_s;
      }
      const std::string& why = result.stats.stop_reason;
      retire(static_cast<size_t>(it - running_.begin()), job.cancelled     ? "cancelled"
                                                         : why == "length" ? "length"
                                                                           : "stop");
    }
    update_gauges();
  }
  // Shutting down: whatever is left ends with an error.
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard lock(mu_);
    left.swap(queue_);
  }
  for (auto& job : running_) finish(*job, "error", "the server is shutting down");
  for (auto& job : left) finish(*job, "error", "the server is shutting down");
  running_.clear();
}

}  // namespace tandem::serve
