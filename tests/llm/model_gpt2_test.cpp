// SPDX-License-Identifier: Apache-2.0
// The gpt2 architecture: a tiny GPT-2 written by gguf-py (tests/llm/data/gpt2_tiny.gguf, so the
// tensor names and layout are those of real llama.cpp gpt2 files) against the numpy float64
// reference of scripts/ref/gpt2_reference.py; the same model rebuilt here with GgufWriter from the
// shared deterministic weights (tiny_weights.h); cache consistency and clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "llm/gguf_test_util.h"
#include "llm/tiny_weights.h"
#include "tandem/core/error.h"
#include "tandem/llm/generate.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/model.h"

namespace tandem::llm {
namespace {

using testing::TempDir;
using testing::tiny_tensor;
using testing::tiny_tokens;

constexpr int kVocab = 64, kDim = 32, kHeads = 4, kFf = 128, kLayers = 2, kCtx = 32;

std::filesystem::path data_dir() {
  return (std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/llm") / "data";
}

nlohmann::json reference() {
  std::ifstream in(data_dir() / "gpt2_tiny_reference.json");
  if (!in.good()) throw NotFound("missing tests/llm/data/gpt2_tiny_reference.json");
  return nlohmann::json::parse(in);
}

// The model of scripts/ref/gpt2_reference.py, written by tandem's GgufWriter. `skip` names a
// tensor to leave out; `untied` adds an output.weight.
std::string write_gpt2(const TempDir& dir, const std::string& file, bool untied = false,
                       const std::string& skip = "",
                       const std::function<void(GgufWriter&)>& edit = {}) {
  GgufWriter w;
  w.set_string("general.architecture", "gpt2");
  w.set_string("general.name", "tiny-gpt2");
  w.set_int("gpt2.context_length", kCtx, GgufType::kU32);
  w.set_int("gpt2.embedding_length", kDim, GgufType::kU32);
  w.set_int("gpt2.feed_forward_length", kFf, GgufType::kU32);
  w.set_int("gpt2.block_count", kLayers, GgufType::kU32);
  w.set_int("gpt2.attention.head_count", kHeads, GgufType::kU32);
  w.set_float("gpt2.attention.layer_norm_epsilon", 1e-5);
  if (edit) edit(w);
  auto add = [&](const std::string& name, const Shape& shape, float scale, float offset = 0.0f,
                 DType dt = DType::kF32) {
    if (name != skip) w.add_tensor(name, tiny_tensor(name, shape, scale, offset, dt));
  };
  add("token_embd.weight", {kVocab, kDim}, 0.5f);
  add("position_embd.weight", {kCtx, kDim}, 0.2f);
  add("output_norm.weight", {kDim}, 0.2f, 1.0f);
  add("output_norm.bias", {kDim}, 0.1f);
  if (untied) add("output.weight", {kVocab, kDim}, 0.3f);
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", {kDim}, 0.2f, 1.0f);
    add(p + "attn_norm.bias", {kDim}, 0.1f);
    add(p + "attn_qkv.weight", {3 * kDim, kDim}, 0.3f, 0.0f, DType::kF16);
    add(p + "attn_qkv.bias", {3 * kDim}, 0.1f);
    add(p + "attn_output.weight", {kDim, kDim}, 0.2f);
    add(p + "attn_output.bias", {kDim}, 0.1f);
    add(p + "ffn_norm.weight", {kDim}, 0.2f, 1.0f);
    add(p + "ffn_norm.bias", {kDim}, 0.1f);
    add(p + "ffn_up.weight", {kFf, kDim}, 0.3f, 0.0f, DType::kF16);
    add(p + "ffn_up.bias", {kFf}, 0.1f);
    add(p + "ffn_down.weight", {kDim, kFf}, 0.15f);
    add(p + "ffn_down.bias", {kDim}, 0.1f);
  }
  const std::string path = dir.file(file);
  w.write(path);
  return path;
}

std::vector<int32_t> iota_positions(int64_t n, int32_t start = 0) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), start);
  return p;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
  }
  return worst;
}

TEST(Gpt2Model, GgufPyFileMatchesNumpyReference) {
  const nlohmann::json ref = reference();
  Model m = Model::load((data_dir() / "gpt2_tiny.gguf").string());
  const ModelConfig& c = m.config();
  EXPECT_EQ(c.arch, "gpt2");
  EXPECT_EQ(c.kind, ModelArch::kGpt2);
  EXPECT_EQ(c.name, "tiny-gpt2");
  EXPECT_EQ(c.n_layers, kLayers);
  EXPECT_EQ(c.d_model, kDim);
  EXPECT_EQ(c.d_ff, kFf);
  EXPECT_EQ(c.n_heads, kHeads);
  EXPECT_EQ(c.n_kv_heads, kHeads);
  EXPECT_EQ(c.head_dim, kDim / kHeads);
  EXPECT_EQ(c.rope_dim, 0);
  EXPECT_EQ(c.vocab_size, kVocab);
  EXPECT_EQ(c.context_length, kCtx);
  EXPECT_FLOAT_EQ(c.layer_norm_eps, 1e-5f);
  EXPECT_TRUE(m.output_tied());
  EXPECT_EQ(m.layer(1).wqkv.dtype(), DType::kF16);
  EXPECT_EQ(m.layer(1).wqkv.shape(), Shape({3 * kDim, kDim}));
  EXPECT_EQ(m.position_embd().shape(), Shape({kCtx, kDim}));

  const auto prompt = ref.at("prompt_ids").get<std::vector<int32_t>>();
  ASSERT_EQ(prompt, tiny_tokens(static_cast<int64_t>(prompt.size()), kVocab));
  std::vector<float> want;
  for (const auto& row : ref.at("logits")) {
    for (double v : row) want.push_back(static_cast<float>(v));
  }
  KvCache cache = m.make_cache();
  const auto got = m.forward(prompt, iota_positions(static_cast<int64_t>(prompt.size())), cache)
                       .to_float_vector();
  EXPECT_LE(max_abs_diff(got, want), 1e-3f);

  const auto greedy = ref.at("greedy_ids").get<std::vector<int32_t>>();
  KvCache gen_cache = m.make_cache();
  GenerateOptions o;
  o.max_new_tokens = static_cast<int>(greedy.size());
  o.prefill_chunk = 4;
  EXPECT_EQ(generate(m, gen_cache, prompt, o).tokens, greedy);
}

TEST(Gpt2Model, RegeneratedFileGivesTheSameLogits) {
  TempDir dir;
  Model ours = Model::load(write_gpt2(dir, "tiny_gpt2.gguf"));
  Model theirs = Model::load((data_dir() / "gpt2_tiny.gguf").string());
  const auto prompt = tiny_tokens(10, kVocab);
  const auto pos = iota_positions(10);
  KvCache a = ours.make_cache(), b = theirs.make_cache();
  const auto la = ours.forward(prompt, pos, a).to_float_vector();
  const auto lb = theirs.forward(prompt, pos, b).to_float_vector();
  EXPECT_EQ(max_abs_diff(la, lb), 0.0f);  // the same bits through the same code

  // An explicit output matrix replaces the tied embedding.
  Model untied = Model::load(write_gpt2(dir, "untied.gguf", /*untied=*/true));
  EXPECT_FALSE(untied.output_tied());
  KvCache u = untied.make_cache();
  const auto lu = untied.forward(prompt, pos, u).to_float_vector();
  EXPECT_GT(max_abs_diff(lu, la), 1e-2f);
  EXPECT_GT(untied.weight_bytes(), ours.weight_bytes());
}

TEST(Gpt2Model, ChunkedPrefillAndDecodeMatchOneShot) {
  TempDir dir;
  Model m = Model::load(write_gpt2(dir, "tiny_gpt2.gguf"));
  const int64_t n = 21;
  const auto tokens = tiny_tokens(n, kVocab);
  const auto pos = iota_positions(n);
  KvCache one = m.make_cache();
  const auto full = m.forward(tokens, pos, one).to_float_vector();
  for (int chunk : {1, 4, 9}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    KvCache cache = m.make_cache(nullptr, /*block_tokens=*/8);
    std::vector<float> got;
    for (int64_t off = 0; off < n; off += chunk) {
      const int64_t len = std::min<int64_t>(chunk, n - off);
      const auto part =
          m.forward(std::span(tokens).subspan(off, len), std::span(pos).subspan(off, len), cache)
              .to_float_vector();
      got.insert(got.end(), part.begin(), part.end());
    }
    EXPECT_LE(max_abs_diff(got, full), 1e-4f);
    EXPECT_EQ(cache.tokens(1, kHeads - 1), n);
  }
  // last_only gives the last row.
  KvCache last = m.make_cache();
  const auto row = m.forward(tokens, pos, last, {.last_only = true}).to_float_vector();
  EXPECT_LE(max_abs_diff(row, std::vector<float>(full.end() - kVocab, full.end())), 1e-5f);
}

TEST(Gpt2Model, BadFilesAndInputsAreClearErrors) {
  TempDir dir;
  try {
    Model::load(write_gpt2(dir, "nobias.gguf", false, "blk.1.attn_qkv.bias"));
    FAIL() << "a missing bias was accepted";
  } catch (const NotFound& e) {
    EXPECT_NE(std::string(e.what()).find("blk.1.attn_qkv.bias"), std::string::npos) << e.what();
  }
  try {
    Model::load(write_gpt2(dir, "noeps.gguf", false, "", [](GgufWriter& w) {
      w.set_string("gpt2.attention.layer_norm_epsilon", "x");
    }));
    FAIL() << "a string epsilon was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer_norm_epsilon"), std::string::npos) << e.what();
  }
  GgufWriter g;
  g.set_string("general.architecture", "falcon");
  g.write(dir.file("falcon.gguf"));
  try {
    Model::load(dir.file("falcon.gguf"));
    FAIL() << "falcon was accepted";
  } catch (const Unsupported& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'falcon'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("llama, gpt2"), std::string::npos) << msg;
  }
  Model m = Model::load(write_gpt2(dir, "tiny_gpt2.gguf"));
  KvCache cache = m.make_cache();
  const std::vector<int32_t> tok = {1}, beyond = {kCtx}, bad = {kVocab}, zero = {0};
  EXPECT_THROW(m.forward(tok, beyond, cache), InvalidArgument);  // no learned position
  EXPECT_THROW(m.forward(bad, zero, cache), InvalidArgument);
}

}  // namespace
}  // namespace tandem::llm
