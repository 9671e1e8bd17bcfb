// SPDX-License-Identifier: Apache-2.0
// Consistency of attention with the reference kernels: causal and non-causal, GQA ratios 1 and 3
// (and MQA), decode (Tq = 1), Tq < Tk with default and explicit q_offset, head dims that are not
// multiples of the vector width, several key/query blocks, and probability rows (including repeated
// rows).
#include <cmath>

#include "consistency_common.h"

namespace tandem::testing {
namespace {

struct AttnCase {
  int64_t tq, tk, hq, hkv, d, dv;
  bool causal;
  int64_t q_offset;  // -1: default (Tk - Tq)
  float scale;       // 0: default 1/sqrt(d)
  std::vector<int64_t> prob_rows;
};

void check_attention(const AttnCase& c, uint32_t seed) {
  const std::string what = cat("attention tq=", c.tq, " tk=", c.tk, " hq=", c.hq, " hkv=", c.hkv,
                               " d=", c.d, " dv=", c.dv, " causal=", c.causal,
                               " q_offset=", c.q_offset, " rows=", c.prob_rows.size());
  SCOPED_TRACE(what);
  const Tensor q = random_tensor({c.tq, c.hq, c.d}, seed, -2.0f, 2.0f);
  const Tensor k = random_tensor({c.tk, c.hkv, c.d}, seed + 1, -2.0f, 2.0f);
  const Tensor v = random_tensor({c.tk, c.hkv, c.dv}, seed + 2);
  ops::AttentionParams p{
      .scale = c.scale, .causal = c.causal, .q_offset = c.q_offset, .prob_rows = c.prob_rows};
  // The reference kernel gets the parameters resolved the way ops::attention resolves them.
  ops::AttentionParams resolved = p;
  if (resolved.q_offset < 0) resolved.q_offset = c.tk - c.tq;
  if (resolved.scale == 0.0f) resolved.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  const int64_t nrows = static_cast<int64_t>(c.prob_rows.size());
  Tensor want = Tensor::empty({c.tq, c.hq, c.dv}, DType::kF32);
  Tensor want_probs = nrows ? Tensor::empty({c.hq, nrows, c.tk}, DType::kF32) : Tensor();
  reference().attention(q, k, v, want, resolved, nrows ? &want_probs : nullptr, nullptr);

  Guarded out({c.tq, c.hq, c.dv}, DType::kF32);
  if (nrows) {
    Guarded probs({c.hq, nrows, c.tk}, DType::kF32);
    ops::attention(on_device(q), on_device(k), on_device(v), out.view(), p, &probs.view());
    expect_close(probs.result(what + " probs"), want_probs, tol::kAttention, what + " probs");
  } else {
    ops::attention(on_device(q), on_device(k), on_device(v), out.view(), p);
  }
  expect_close(out.result(what), want, tol::kAttention, what);
}

TEST(Attention, CausalGqaAndOffsets) {
  TANDEM_OPS_PROLOGUE();
  const std::vector<AttnCase> cases = {
      {1, 1, 1, 1, 8, 8, true, -1, 0.0f, {0}},
      {1, 37, 9, 3, 64, 64, true, -1, 0.0f, {0}},        // decode, GQA 3 (SmolLM2 heads)
      {5, 20, 4, 4, 16, 16, true, -1, 0.0f, {0, 4}},     // Tq < Tk, queries are the last rows
      {7, 30, 6, 2, 32, 24, true, 10, 0.0f, {6, 0, 6}},  // explicit offset, dv != d, repeated row
      {33, 33, 2, 2, 64, 64, true, -1, 0.0f, {}},        // prefill
      {40, 130, 6, 2, 48, 48, true, -1, 0.0f, {39, 1}},  // several key and query blocks
      {3, 200, 8, 1, 20, 12, true, 0, 0.3f, {2}},  // MQA, offset 0 with Tq < Tk, explicit scale
      {17, 65, 3, 3, 5, 7, true, 48, 0.0f, {16}},  // head dims below one vector
  };
  uint32_t seed = 1000;
  for (const auto& c : cases) check_attention(c, seed += 5);
}

TEST(Attention, NonCausal) {
  TANDEM_OPS_PROLOGUE();
  const std::vector<AttnCase> cases = {
      {16, 70, 3, 1, 20, 20, false, -1, 0.0f, {0, 15}},
      {1, 129, 9, 3, 64, 64, false, -1, 0.0f, {}},
      {50, 10, 4, 2, 32, 32, false, -1, 0.0f, {49}},  // more queries than keys is fine without a
                                                      // mask
  };
  uint32_t seed = 2000;
  for (const auto& c : cases) check_attention(c, seed += 5);
}

}  // namespace
}  // namespace tandem::testing
