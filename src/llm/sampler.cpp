// SPDX-License-Identifier: Apache-2.0
// Sampler: greedy, temperature, top-k, top-p; see sampler.h.
#include "tandem/llm/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tandem/core/error.h"

namespace tandem::llm {

int32_t argmax(std::span<const float> logits) {
  if (logits.empty()) throw InvalidArgument("argmax: empty logits row");
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {
  if (options.top_k < 0) throw InvalidArgument(cat("Sampler: top_k ", options.top_k, " < 0"));
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) {
    throw InvalidArgument(cat("Sampler: top_p ", options.top_p, " outside (0, 1]"));
  }
  if (!std::isfinite(options.temperature)) {
    throw InvalidArgument(cat("Sampler: temperature ", options.temperature, " is not finite"));
  }
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (options_.temperature <= 0.0f) return argmax(logits);
  if (logits.empty()) throw InvalidArgument("Sampler::sample: empty logits row");
  const int64_t n = static_cast<int64_t>(logits.size());
  ids_.resize(n);
  std::iota(ids_.begin(), ids_.end(), 0);
  const auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int64_t keep = n;
  if (options_.top_k > 0 && options_.top_k < n) {
    keep = options_.top_k;
    std::partial_sort(ids_.begin(), ids_.begin() + keep, ids_.end(), by_logit);
  } else {
    std::sort(ids_.begin(), ids_.end(), by_logit);
  }
  // Softmax over the kept (sorted) candidates, in double for the normaliser.
  probs_.resize(keep);
  const float m = logits[ids_[0]];
  double total = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    probs_[i] = std::exp((logits[ids_[i]] - m) / options_.temperature);
    total += probs_[i];
  }
  if (options_.top_p < 1.0f) {
    double mass = 0.0;
    int64_t cut = keep;
    for (int64_t i = 0; i < keep; ++i) {
      mass += probs_[i] / total;
      if (mass >= options_.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    total = 0.0;
    for (int64_t i = 0; i < keep; ++i) total += probs_[i];
  }
  std::uniform_real_distribution<double> uni(0.0, total);
  const double r = uni(rng_);
  double acc = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += probs_[i];
    if (r < acc) return ids_[i];
  }
  return ids_[keep - 1];
}

}  // namespace tandem::llm
