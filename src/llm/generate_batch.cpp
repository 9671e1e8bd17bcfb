// SPDX-License-Identifier: Apache-2.0
// BatchRunner and generate_batch(): continuous batching of several sequences over
// Model::forward_batch; see generate.h. Each sequence follows generate()'s steps exactly (prefill
// chunks, policy hooks, sample, report, stop checks, feed the token back), only interleaved with
// the others; sequences join (add) and leave (finish, cancel) between steps.
#include <algorithm>
#include <chrono>
#include <exception>
#include <numeric>
#include <set>

#include "tandem/core/error.h"
#include "tandem/llm/generate.h"

namespace tandem::llm {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Sequence {
  Sequence(uint64_t id_, BatchRequest r)
      : id(id_), req(std::move(r)), sampler(req.options.sampler) {}
  uint64_t id;
  BatchRequest req;
  Sampler sampler;
  GenerateResult result;
  size_t prefilled = 0;  // prompt tokens already forwarded
  int32_t pending = 0;   // the sampled token to feed next (decode phase)
  int32_t position = 0;  // position of the next token fed
  Clock::time_point added, first_token;
  std::vector<int32_t> chunk_pos;  // positions of the chunk in flight
};

// InvalidArgument when a request cannot run (named by `what`: "request 3").
void validate(const Model& model, const BatchRequest& r, const std::string& what) {
  const GenerateOptions& o = r.options;
  if (r.cache == nullptr) throw InvalidArgument(cat("generate_batch: ", what, " has no cache"));
  if (r.prompt.empty()) throw InvalidArgument(cat("generate_batch: ", what, ": empty prompt"));
  if (o.max_new_tokens < 0 || o.prefill_chunk < 1) {
    throw InvalidArgument(cat("generate_batch: ", what, ": max_new_tokens ", o.max_new_tokens,
                              " and prefill_chunk ", o.prefill_chunk, " are out of range"));
  }
  const int64_t total =
      r.cache->next_position() + static_cast<int64_t>(r.prompt.size()) + o.max_new_tokens;
  if (total > model.config().context_length) {
    throw InvalidArgument(cat("generate_batch: ", what, ": ", total,
                              " positions exceed the context length ",
                              model.config().context_length));
  }
}

}  // namespace

struct BatchRunner::Impl {
  explicit Impl(const Model& m) : model(m) {}
  const Model& model;
  uint64_t next_id = 1;
  std::vector<std::unique_ptr<Sequence>> seqs;  // active, in order of arrival
  BatchStats stats;
};

BatchRunner::BatchRunner(const Model& model) : impl_(std::make_unique<Impl>(model)) {}
BatchRunner::~BatchRunner() = default;

uint64_t BatchRunner::add(BatchRequest request) {
  const uint64_t id = impl_->next_id;
  validate(impl_->model, request, cat("request ", id));
  for (const auto& s : impl_->seqs) {
    if (s->req.cache == request.cache) {
      throw InvalidArgument(
          cat("generate_batch: request ", id, " has the cache of an active request"));
    }
  }
  ++impl_->next_id;
  auto s = std::make_unique<Sequence>(id, std::move(request));
  s->position = s->req.cache->next_position();
  s->result.stats.prompt_tokens = static_cast<int64_t>(s->req.prompt.size());
  s->result.stats.stop_reason = "length";
  s->added = Clock::now();
  impl_->seqs.push_back(std::move(s));
  return id;
}

bool BatchRunner::cancel(uint64_t id) {
  auto& seqs = impl_->seqs;
  const auto it =
      std::find_if(seqs.begin(), seqs.end(), [&](const auto& s) { return s->id == id; });
  if (it == seqs.end()) return false;
  seqs.erase(it);
  return true;
}

size_t BatchRunner::active() const { return impl_->seqs.size(); }

BatchStats BatchRunner::stats() const { return impl_->stats; }

std::vector<std::pair<uint64_t, GenerateResult>> BatchRunner::step() {
  std::vector<std::pair<uint64_t, GenerateResult>> finished;
  auto& seqs = impl_->seqs;
  if (seqs.empty()) return finished;
  const int64_t vocab = impl_->model.config().vocab_size;

  std::vector<SequenceChunk> chunks;
  chunks.reserve(seqs.size());
  // One row in all (a single sequence decoding) takes the decode arithmetic of the requests, f32
  // when any of them asks for it; stacked rows of several compute in f32 anyway.
  DecodeArithmetic decode = DecodeArithmetic::kInt8;
  for (const auto& sp : seqs) {
    Sequence& s = *sp;
    const BatchRequest& r = s.req;
    std::span<const int32_t> toks;
    if (s.prefilled < r.prompt.size()) {
      const size_t len = std::min<size_t>(r.options.prefill_chunk, r.prompt.size() - s.prefilled);
      toks = std::span<const int32_t>(r.prompt).subspan(s.prefilled, len);
    } else {
      toks = std::span<const int32_t>(&s.pending, 1);
    }
    s.chunk_pos.resize(toks.size());
    std::iota(s.chunk_pos.begin(), s.chunk_pos.end(), s.position);
    chunks.push_back({toks, s.chunk_pos, r.cache});
    if (r.options.decode == DecodeArithmetic::kF32) decode = DecodeArithmetic::kF32;
  }
  const std::vector<Tensor> logits =
      impl_->model.forward_batch(chunks, {.last_only = true, .decode = decode});
  ++impl_->stats.steps;

  // Records a sampled token; false when the sequence stops with it.
  auto take = [](Sequence& s, int32_t tok) {
    const GenerateOptions& o = s.req.options;
    GenerateResult& r = s.result;
    r.tokens.push_back(tok);
    if (o.on_token && !o.on_token(tok)) {
      r.stats.stop_reason = "callback";
      return false;
    }
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), tok) != o.stop_ids.end()) {
      r.stats.stop_reason = "stop_id";
      return false;
    }
    if (static_cast<int>(r.tokens.size()) >= o.max_new_tokens) return false;
    s.pending = tok;
    return true;
  };
  std::vector<bool> done(seqs.size(), false);
  std::exception_ptr error;
  for (size_t c = 0; c < chunks.size(); ++c) {
    Sequence& s = *seqs[c];
    const BatchRequest& r = s.req;
    KvCache& cache = *r.cache;
    const std::span<const float> row(logits[c].data<float>(), static_cast<size_t>(vocab));
    s.position += static_cast<int32_t>(chunks[c].tokens.size());
    int32_t tok = 0;
    if (s.prefilled < r.prompt.size()) {
      s.prefilled += chunks[c].tokens.size();
      if (s.prefilled < r.prompt.size()) continue;
      const auto hook = Clock::now();
      s.result.stats.prefill_s = seconds(s.added, hook);
      cache.policy().on_prefill_done(cache);
      impl_->stats.policy_s += seconds(hook, Clock::now());
      if (r.options.max_new_tokens == 0) {
        done[c] = true;
        continue;
      }
      s.result.first_logits.assign(row.begin(), row.end());
      tok = s.sampler.sample(s.result.first_logits);
      s.first_token = Clock::now();
      s.result.stats.ttft_s = seconds(s.added, s.first_token);
    } else {
      const auto hook = Clock::now();
      cache.policy().on_decode_step(cache);
      impl_->stats.policy_s += seconds(hook, Clock::now());
      tok = s.sampler.sample(row);
    }
    try {
      if (!take(s, tok)) done[c] = true;
    } catch (...) {  // a throwing callback drops its sequence; the others finish the step
      if (!error) error = std::current_exception();
      done[c] = true;
      s.result.stats.stop_reason.clear();  // marks it dropped, not finished
    }
  }
  // Finished sequences leave the batch, in order of arrival.
  std::vector<std::unique_ptr<Sequence>> kept;
  kept.reserve(seqs.size());
  for (size_t c = 0; c < seqs.size(); ++c) {
    if (!done[c]) {
      kept.push_back(std::move(seqs[c]));
      continue;
    }
    Sequence& s = *seqs[c];
    if (s.result.stats.stop_reason.empty()) continue;
    GenerateStats& st = s.result.stats;
    st.generated_tokens = static_cast<int64_t>(s.result.tokens.size());
    if (st.generated_tokens > 0) st.decode_s = seconds(s.first_token, Clock::now());
    if (st.prefill_s > 0) st.prefill_tokens_per_s = st.prompt_tokens / st.prefill_s;
    if (st.decode_s > 0 && st.generated_tokens > 1) {
      st.decode_tokens_per_s = (st.generated_tokens - 1) / st.decode_s;
    }
    impl_->stats.prompt_tokens += st.prompt_tokens;
    impl_->stats.generated_tokens += st.generated_tokens;
    finished.emplace_back(s.id, std::move(s.result));
  }
  seqs = std::move(kept);
  if (error) std::rethrow_exception(error);
  return finished;
}

std::vector<GenerateResult> generate_batch(const Model& model, std::span<BatchRequest> requests,
                                           BatchStats* stats) {
  std::set<const KvCache*> caches;
  for (size_t i = 0; i < requests.size(); ++i) {
    const BatchRequest& r = requests[i];
    if (r.cache != nullptr && !caches.insert(r.cache).second) {
      throw InvalidArgument(
          cat("generate_batch: request ", i, " has the cache of an earlier request"));
    }
    validate(model, r, cat("request ", i));
  }
  const auto t0 = Clock::now();
  BatchRunner runner(model);
  std::vector<uint64_t> ids;
  for (const BatchRequest& r : requests) ids.push_back(runner.add(r));
  std::vector<GenerateResult> results(requests.size());
  while (runner.active() > 0) {
    for (auto& [id, result] : runner.step()) {
      const size_t i = static_cast<size_t>(std::find(ids.begin(), ids.end(), id) - ids.begin());
      results[i] = std::move(result);
    }
  }
  BatchStats total = runner.stats();
  total.wall_s = seconds(t0, Clock::now());
  if (total.wall_s > 0) total.tokens_per_s = total.generated_tokens / total.wall_s;
  if (stats) *stats = total;
  return results;
}

}  // namespace tandem::llm
