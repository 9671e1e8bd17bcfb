// SPDX-License-Identifier: Apache-2.0
// Sampler: picks the next token from a row of logits.
//
// temperature <= 0 is greedy (argmax, lowest id on ties). Otherwise: keep the top_k largest logits
// (0 = all), softmax of logits / temperature, keep the smallest set of most likely tokens whose
// probability reaches top_p (1 = all), renormalise and draw with std::mt19937_64 seeded by `seed`,
// so a seed reproduces a run. No repetition penalty is applied.
//
//   tandem::llm::Sampler s({.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .seed = 7});
//   int32_t id = s.sample(logits_row);
//
// Thread-safety: a Sampler holds its random state; one per sequence.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "tandem/export.h"

namespace tandem::llm {

struct SamplerOptions {
  float temperature = 0.0f;  // <= 0: greedy
  int top_k = 0;             // 0: no top-k cut
  float top_p = 1.0f;        // nucleus mass in (0, 1]; 1: no cut
  uint64_t seed = 0;         // seed of the std::mt19937_64
};

class TANDEM_API Sampler {
 public:
  // InvalidArgument for top_k < 0 or top_p outside (0, 1] or a non-finite temperature.
  explicit Sampler(const SamplerOptions& options = {});
  // InvalidArgument for an empty row.
  int32_t sample(std::span<const float> logits);
  const SamplerOptions& options() const { return options_; }

 private:
  SamplerOptions options_;
  std::mt19937_64 rng_;
  std::vector<int32_t> ids_;
  std::vector<float> probs_;
};

// Index of the largest logit (lowest index on ties); InvalidArgument for an empty row.
TANDEM_API int32_t argmax(std::span<const float> logits);

}  // namespace tandem::llm
