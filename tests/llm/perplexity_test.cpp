// SPDX-License-Identifier: Apache-2.0
// perplexity(): llama.cpp's protocol checked against a direct recomputation (windows, BOS, the
// scored half, batching inside a window) on a tiny generated-weight llama GGUF; its errors; and
// SmolLM2-135M-Instruct on a Pride and Prejudice excerpt within 1% of llama.cpp's
// llama-perplexity on the same text and context (tests/llm/data/perplexity_reference.json says
// how that number was obtained).
#include "tandem/llm/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "llm/gguf_test_util.h"
#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/model_store.h"
#include "tandem/llm/synthetic_model.h"
#include "tandem/llm/tokenizer.h"
#include "tandem/llm/vocab.h"
#include "tandem/ops/ops.h"

namespace tandem::llm {
namespace {

using testing::TempDir;

constexpr int kLayers = 2, kDim = 32, kHeads = 4, kKvHeads = 2, kFf = 64, kVocab = 50;

// A tiny llama with generated weights (the library's synthetic-model writer).
std::string write_tiny(const TempDir& dir) {
  SyntheticLlamaConfig c;
  c.name = "tiny_ppl";
  c.n_layers = kLayers;
  c.d_model = kDim;
  c.d_ff = kFf;
  c.n_heads = kHeads;
  c.n_kv_heads = kKvHeads;
  c.vocab_size = kVocab;
  c.context_length = 128;
  c.seed = 77;
  const std::string path = dir.file("tiny_ppl.gguf");
  write_synthetic_llama(c, path);
  return path;
}

std::vector<int32_t> text_tokens(int64_t n) {
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int32_t> u(1, kVocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = u(rng);
  return t;
}

// The protocol written out directly: each window in one forward from an empty cache, softmax in
// double, second half scored.
double direct_ppl(const Model& m, const std::vector<int32_t>& tokens, int ctx, int n_windows,
                  int32_t bos) {
  double nll = 0.0;
  int64_t count = 0;
  for (int w = 0; w < n_windows; ++w) {
    std::vector<int32_t> window(tokens.begin() + int64_t{w} * ctx,
                                tokens.begin() + int64_t{w + 1} * ctx);
    if (bos >= 0) window[0] = bos;
    std::vector<int32_t> pos(static_cast<size_t>(ctx));
    for (int i = 0; i < ctx; ++i) pos[i] = i;
    KvCache cache = m.make_cache();
    const Tensor logits = m.forward(window, pos, cache);
    const float* l = logits.data<float>();
    for (int j = ctx / 2; j < ctx - 1; ++j) {
      const float* row = l + int64_t{j} * kVocab;
      double mx = row[0], sum = 0.0;
      for (int v = 0; v < kVocab; ++v) mx = std::max(mx, double{row[v]});
      for (int v = 0; v < kVocab; ++v) sum += std::exp(double{row[v]} - mx);
      nll += -(double{row[tokens[int64_t{w} * ctx + j + 1]]} - mx - std::log(sum));
      ++count;
    }
  }
  return std::exp(nll / static_cast<double>(count));
}

TEST(Perplexity, TokenNllIsNegativeLogSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, -1.0f};
  double z = 0.0;
  for (float v : logits) z += std::exp(double{v});
  for (int t = 0; t < 4; ++t) EXPECT_NEAR(token_nll(logits, t), std::log(z) - logits[t], 1e-6);
  // Uniform logits: log(vocab) whatever their level.
  const std::vector<float> flat(1000, 123.0f);
  EXPECT_NEAR(token_nll(flat, 7), std::log(1000.0), 1e-9);
  EXPECT_THROW(token_nll(logits, 4), InvalidArgument);
  EXPECT_THROW(token_nll(logits, -1), InvalidArgument);
}

TEST(Perplexity, MatchesDirectRecomputationOfTheProtocol) {
  TempDir dir;
  const Model m = Model::load(write_tiny(dir));
  const std::vector<int32_t> tokens = text_tokens(200);  // 3 windows of 64, 8 tokens left over
  const int ctx = 64;
  for (int32_t bos : {-1, 0}) {
    SCOPED_TRACE(bos);
    for (int batch : {64, 24, 7}) {  // one forward per window, and windows cut into batches
      SCOPED_TRACE(batch);
      const PerplexityResult r = perplexity(m, tokens, {.ctx = ctx, .batch = batch, .bos_id = bos});
      EXPECT_EQ(r.text_tokens, 200);
      EXPECT_EQ(r.n_chunks, 3);
      EXPECT_EQ(r.scored_tokens, 3 * (ctx - ctx / 2 - 1));
      ASSERT_EQ(r.chunk_ppl.size(), 3u);
      const double want = direct_ppl(m, tokens, ctx, 3, bos);
      EXPECT_NEAR(r.ppl, want, 1e-4 * want);
      EXPECT_DOUBLE_EQ(r.chunk_ppl.back(), r.ppl);
      EXPECT_NEAR(std::log(r.ppl), r.mean_nll, 1e-12);
      EXPECT_NEAR(r.chunk_ppl.front(), direct_ppl(m, tokens, ctx, 1, bos), 1e-4 * want);
      EXPECT_GT(r.ppl_error, 0.0);
      EXPECT_LT(r.ppl_error, r.ppl);
      // Small random output weights on random tokens: near-uniform, a little above the vocabulary
      // size (exp(log V + var/2) with logit spread ~0.6).
      EXPECT_GT(r.ppl, kVocab / 2.0);
      EXPECT_LT(r.ppl, 4.0 * kVocab);
    }
  }
  // BOS over each window's first token changes what the scored half sees.
  const double with_bos = perplexity(m, tokens, {.ctx = ctx, .bos_id = 0}).ppl;
  const double without = perplexity(m, tokens, {.ctx = ctx}).ppl;
  EXPECT_NE(with_bos, without);
}

TEST(Perplexity, ChunksLimitAndEarlyStop) {
  TempDir dir;
  const Model m = Model::load(write_tiny(dir));
  const std::vector<int32_t> tokens = text_tokens(200);
  const PerplexityResult two = perplexity(m, tokens, {.ctx = 64, .chunks = 2});
  EXPECT_EQ(two.n_chunks, 2);
  EXPECT_EQ(two.scored_tokens, 2 * 31);
  EXPECT_NEAR(two.ppl, direct_ppl(m, tokens, 64, 2, -1), 1e-4 * two.ppl);
  EXPECT_EQ(perplexity(m, tokens, {.ctx = 64, .chunks = 50}).n_chunks, 3);  // capped by the text

  std::vector<int> seen;
  PerplexityOptions o{.ctx = 32};
  o.on_chunk = [&](int i, int n, double ppl) {
    EXPECT_EQ(n, 6);
    EXPECT_GT(ppl, 0.0);
    seen.push_back(i);
    return i < 1;  // stop after the second window
  };
  const PerplexityResult stopped = perplexity(m, tokens, o);
  EXPECT_EQ(seen, (std::vector<int>{0, 1}));
  EXPECT_EQ(stopped.n_chunks, 2);
  EXPECT_EQ(stopped.scored_tokens, 2 * 15);
}

TEST(Perplexity, BadInputIsAClearError) {
  TempDir dir;
  const Model m = Model::load(write_tiny(dir));
  const std::vector<int32_t> tokens = text_tokens(200);
  EXPECT_THROW(perplexity(m, tokens, {.ctx = 101}), InvalidArgument);  // needs 202 tokens
  EXPECT_THROW(perplexity(m, tokens, {.ctx = 3}), InvalidArgument);
  EXPECT_THROW(perplexity(m, text_tokens(400), {.ctx = 129}), InvalidArgument);  // > context
  EXPECT_THROW(perplexity(m, tokens, {.ctx = 64, .chunks = 0}), InvalidArgument);
  EXPECT_THROW(perplexity(m, tokens, {.ctx = 64, .batch = 0}), InvalidArgument);
  EXPECT_THROW(perplexity(m, tokens, {.ctx = 64, .bos_id = kVocab}), InvalidArgument);
  std::vector<int32_t> bad = tokens;
  bad[150] = kVocab;
  try {
    perplexity(m, bad, {.ctx = 64});
    FAIL() << "no error for an out-of-vocabulary id";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("index 150"), std::string::npos) << e.what();
  }
}

// ---- the real model against llama.cpp -------------------------------------------------------

std::string real_model(std::string* why) {
  try {
    return default_model_path();
  } catch (const Error& e) {
    *why = e.what();
    return {};
  }
}

TEST(PerplexityReal, SmolLM2WithinOnePercentOfLlamaCpp) {
  const std::filesystem::path data = std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/llm/data";
  std::ifstream ref_in(data / "perplexity_reference.json");
  ASSERT_TRUE(ref_in.good()) << "missing tests/llm/data/perplexity_reference.json";
  const nlohmann::json ref = nlohmann::json::parse(ref_in);
  std::string why;
  const std::string path = real_model(&why);
  if (path.empty()) GTEST_SKIP() << "SmolLM2 model unavailable: " << why;
  const Model m = Model::load(path);
  const Tokenizer tok(load_vocab(m.file()));
  for (const auto& run : ref.at("runs")) {
    const std::string text_file = run.at("text").get<std::string>();
    SCOPED_TRACE(text_file);
    std::ifstream in(data / text_file, std::ios::binary);
    ASSERT_TRUE(in.good()) << "missing tests/llm/data/" << text_file;
    std::stringstream ss;
    ss << in.rdbuf();
    const std::vector<int32_t> ids = tok.encode(ss.str(), /*add_special=*/true,
                                                /*parse_special=*/false);
    PerplexityOptions o{.ctx = run.at("ctx").get<int>(), .chunks = run.at("chunks").get<int>()};
    o.bos_id = tok.add_bos() ? tok.bos_id() : -1;
    const PerplexityResult r = perplexity(m, ids, o);
    const double want = run.at("llamacpp_ppl").get<double>();
    EXPECT_EQ(r.n_chunks, run.at("chunks").get<int>());
    EXPECT_NEAR(r.ppl, want, 0.01 * want) << "tandem " << r.ppl << " vs llama.cpp " << want;
  }
}

}  // namespace
}  // namespace tandem::llm
