// SPDX-License-Identifier: Apache-2.0
// Internal pieces of the kv-eval harness (kv_eval.h) shared by the evaluation and the ClusterAttn
// calibration: one recorded prefill, a compressed copy per policy, teacher-forced scoring.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/llm/kv_eval.h"
#include "tandem/llm/tokenizer.h"

namespace tandem::llm::kv_eval_detail {

// Tokens of the shortest prefix of `text` (doubling from ~6 chars per token) that holds at least
// `need` tokens; InvalidArgument "<what>: the text has N tokens, <need> needed" when the whole text
// is too short.
std::vector<int32_t> encode_prefix(const Tokenizer& tokenizer, const std::string& text,
                                   int64_t need, const std::string& what);

// A prompt prefilled once with the full cache, with the last `window` post-RoPE queries of every
// layer (what a policy's observe_queries would have seen) and the logits after the last token.
struct Prefilled {
  KvCache cache;
  std::vector<Tensor> queries;                  // per layer f32 [W, n_heads, head_dim]
  std::vector<std::vector<int32_t>> positions;  // per layer, W positions
  std::vector<float> last_logits;
  double prefill_s = 0;
};
Prefilled prefill_recorded(const Model& model, std::span<const int32_t> tokens, int window,
                           int chunk);

// Wraps a policy for a compressed copy: forwards every hook; when given a shadow cache (a copy of
// the full prefilled cache), every decode step also appends the step's K/V (read back from the
// compressed cache) to the shadow and measures per layer ||o - o'|| / ||o|| of the step's query
// over the shadow (o) and over the compressed cache (o').
class ProbePolicy final : public KvPolicy {
 public:
  explicit ProbePolicy(std::shared_ptr<KvPolicy> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  int query_window() const override { return inner_->query_window(); }
  bool observes_decode_queries() const override {
    return shadow_ != nullptr || inner_->observes_decode_queries();
  }
  void on_prefill_done(KvCache& cache) override { inner_->on_prefill_done(cache); }
  void on_decode_step(KvCache& cache) override { inner_->on_decode_step(cache); }
  void observe_queries(const KvCache& cache, int layer, const Tensor& q,
                       std::span<const int32_t> positions, bool prefill) override;
  void set_shadow(KvCache* shadow);
  // Mean relative error per layer over the probed steps.
  std::vector<double> attention_errors() const;

 private:
  std::shared_ptr<KvPolicy> inner_;
  KvCache* shadow_ = nullptr;
  std::vector<double> err_sum_;
  std::vector<int64_t> err_count_;
};

// A copy of the prefilled cache under `policy` (wrapped in a ProbePolicy), given the recorded
// queries and compressed; bytes is the allocator's live-byte growth for the copy.
struct Compressed {
  KvCache cache;
  std::shared_ptr<ProbePolicy> probe;
  double compress_s = 0;
  int64_t bytes = 0;
  double tokens_per_head = 0;
};
Compressed compress_copy(const Prefilled& p, std::shared_ptr<KvPolicy> policy);

// Teacher-forced decode of `tokens` at positions start.. over `cache`: per step the log-softmax of
// the next-token logits (the prediction of tokens[i + 1] after feeding tokens[i]).
std::vector<std::vector<double>> teacher_forced_log_probs(
    const Model& model, KvCache& cache, std::span<const int32_t> tokens, int32_t start,
    DecodeArithmetic decode = DecodeArithmetic::kInt8);

std::vector<double> log_softmax(std::span<const float> logits);

}  // namespace tandem::llm::kv_eval_detail
