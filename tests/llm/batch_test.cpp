// SPDX-License-Identifier: Apache-2.0
// Batched sequences: Model::forward_batch (rows of several sequences stacked through one set of
// weight GEMMs, attention per sequence over its own cache) gives the logits of running each
// sequence alone, on a tiny quantized llama, a llama with YaRN RoPE, the tiny gpt2 and SmolLM2
// when present; generate_batch() gives the tokens of generate() per sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "llm/gguf_test_util.h"
#include "llm/tiny_weights.h"
#include "tandem/core/allocator.h"
#include "tandem/core/error.h"
#include "tandem/llm/generate.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/model.h"
#include "tandem/llm/model_store.h"

namespace tandem::llm {
namespace {

using testing::TempDir;
using testing::tiny_tensor;

constexpr int64_t kVocab = 80, kDim = 64, kHeads = 4, kKv = 2, kFf = 96, kLayers = 2;

std::filesystem::path data_dir() {
  return (std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/llm") / "data";
}

// A tiny llama with quantized weights (as real files have); `yarn` turns on YaRN scaling;
// `int8_only` stores every layer matrix in a format of the int8 decode GEMV (no f16 / f32).
std::string write_llama(const TempDir& dir, bool yarn, bool int8_only = false) {
  const int64_t hd = kDim / kHeads;
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_int("llama.block_count", kLayers, GgufType::kU32);
  w.set_int("llama.embedding_length", kDim, GgufType::kU32);
  w.set_int("llama.feed_forward_length", kFf, GgufType::kU32);
  w.set_int("llama.attention.head_count", kHeads, GgufType::kU32);
  w.set_int("llama.attention.head_count_kv", kKv, GgufType::kU32);
  w.set_int("llama.context_length", 512, GgufType::kU32);
  w.set_float("llama.attention.layer_norm_rms_epsilon", 1e-5);
  if (yarn) {
    w.set_string("llama.rope.scaling.type", "yarn");
    w.set_float("llama.rope.scaling.factor", 4.0);
    w.set_int("llama.rope.scaling.original_context_length", 128, GgufType::kU32);
  }
  w.add_tensor("token_embd.weight",
               tiny_tensor("token_embd.weight", {kVocab, kDim}, 0.5f, 0.0f, DType::kQ8_0));
  w.add_tensor("output_norm.weight", tiny_tensor("output_norm.weight", {kDim}, 0.2f, 1.0f));
  w.add_tensor("output.weight",
               tiny_tensor("output.weight", {kVocab, kDim}, 0.3f, 0.0f, DType::kQ4_1));
  for (int64_t i = 0; i < kLayers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    auto add = [&](const std::string& n, const Shape& s, float scale, DType dt) {
      w.add_tensor(p + n, tiny_tensor(p + n, s, scale, 0.0f, dt));
    };
    w.add_tensor(p + "attn_norm.weight", tiny_tensor(p + "attn_norm.weight", {kDim}, 0.2f, 1.0f));
    w.add_tensor(p + "ffn_norm.weight", tiny_tensor(p + "ffn_norm.weight", {kDim}, 0.2f, 1.0f));
    add("attn_q.weight", {kHeads * hd, kDim}, 0.3f, DType::kQ4_1);
    add("attn_k.weight", {kKv * hd, kDim}, 0.3f, DType::kQ8_0);
    add("attn_v.weight", {kKv * hd, kDim}, 0.3f, int8_only ? DType::kQ8_0 : DType::kF16);
    add("attn_output.weight", {kDim, kDim}, 0.2f, DType::kQ4_0);
    add("ffn_gate.weight", {kFf, kDim}, 0.3f, DType::kQ4_1);
    add("ffn_up.weight", {kFf, kDim}, 0.3f, DType::kQ4_1);
    add("ffn_down.weight", {kDim, kFf}, 0.15f, int8_only ? DType::kQ4_1 : DType::kF32);
  }
  const std::string path = dir.file(yarn ? "yarn.gguf" : (int8_only ? "int8.gguf" : "llama.gguf"));
  w.write(path);
  return path;
}

std::vector<int32_t> tokens_of(int64_t n, int64_t vocab, int salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 13 + salt * 29 + 5) % vocab);
  return t;
}

std::vector<int32_t> positions_from(int64_t start, int64_t n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), static_cast<int32_t>(start));
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

// Three sequences with different histories and chunk lengths (a long prefill, a short one, a
// single decode token): batched logits equal one-by-one logits, for a prefill round and for a
// decode round after it. Returns the worst difference seen. Both sides ask for f32 decode (the
// f32 GEMV may block a batch's rows differently, hence the tolerance); the default int8 decode is
// checked bit for bit by DecodeStepsAreBitEqualToAloneWithInt8Activations.
float check_batch_equals_single(const Model& m, const std::vector<int64_t>& history,
                                const std::vector<int64_t>& chunk, float tol) {
  const ForwardOptions f32{.decode = DecodeArithmetic::kF32};
  const int64_t vocab = m.config().vocab_size;
  const size_t n = history.size();
  std::vector<KvCache> batched, single;
  for (size_t i = 0; i < n; ++i) {
    batched.push_back(m.make_cache(nullptr, 8));
    single.push_back(m.make_cache(nullptr, 8));
    if (history[i] > 0) {  // an earlier turn, run alone in both
      const auto t = tokens_of(history[i], vocab, static_cast<int>(i) + 7);
      const auto p = positions_from(0, history[i]);
      m.forward(t, p, batched[i], f32);
      m.forward(t, p, single[i], f32);
    }
  }
  float worst = 0.0f;
  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<int32_t>> toks(n), pos(n);
    std::vector<SequenceChunk> chunks;
    for (size_t i = 0; i < n; ++i) {
      const int64_t len = round == 0 ? chunk[i] : 1;
      toks[i] = tokens_of(len, vocab, static_cast<int>(i) + round * 3);
      pos[i] = positions_from(batched[i].next_position(), len);
      chunks.push_back({toks[i], pos[i], &batched[i]});
    }
    const auto out = m.forward_batch(chunks, f32);
    for (size_t i = 0; i < n; ++i) {
      SCOPED_TRACE(cat("round ", round, ", sequence ", i));
      const auto want = m.forward(toks[i], pos[i], single[i], f32).to_float_vector();
      EXPECT_EQ(out[i].shape(), Shape({static_cast<int64_t>(toks[i].size()), vocab}));
      const float d = max_abs_diff(out[i].to_float_vector(), want);
      EXPECT_LE(d, tol);
      worst = std::max(worst, d);
      EXPECT_EQ(batched[i].tokens(m.config().n_layers - 1, 0),
                single[i].tokens(m.config().n_layers - 1, 0));
    }
  }
  return worst;
}

TEST(BatchForward, EqualsOneByOneOnTinyModels) {
  TempDir dir;
  const Model llama = Model::load(write_llama(dir, false));
  const Model yarn = Model::load(write_llama(dir, true));
  const Model gpt2 = Model::load((data_dir() / "gpt2_tiny.gguf").string());
  for (const Model* m : {&llama, &yarn, &gpt2}) {
    SCOPED_TRACE(m->config().arch + (m == &yarn ? " (yarn)" : ""));
    check_batch_equals_single(*m, {0, 9, 5}, {13, 4, 1}, 1e-4f);
  }
}

// With the default decode arithmetic (int8 activations) a decode step of several sequences gives
// every sequence the logits it gets alone, bit for bit: the batched int8 GEMV computes each row as
// the one-row GEMV does (tests/llm/gemv_int8_test.cpp), and attention, norms and RoPE are per row.
TEST(BatchForward, DecodeStepsAreBitEqualToAloneWithInt8Activations) {
  if (!testing::host_has_int8_gemv()) GTEST_SKIP() << "no int8 GEMV on this host";
  TempDir dir;
  const Model m = Model::load(write_llama(dir, false, true));
  const std::vector<int64_t> history = {3, 11, 6, 1, 8};
  std::vector<KvCache> batched, single;
  for (size_t i = 0; i < history.size(); ++i) {
    batched.push_back(m.make_cache());
    single.push_back(m.make_cache());
    const auto t = tokens_of(history[i], kVocab, static_cast<int>(i));
    const auto p = positions_from(0, history[i]);
    m.forward(t, p, batched[i]);
    m.forward(t, p, single[i]);
  }
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<int32_t>> toks, pos;
    std::vector<SequenceChunk> chunks;
    for (size_t i = 0; i < history.size(); ++i) {
      toks.push_back(tokens_of(1, kVocab, step * 7 + static_cast<int>(i)));
      pos.push_back(positions_from(batched[i].next_position(), 1));
    }
    for (size_t i = 0; i < history.size(); ++i) chunks.push_back({toks[i], pos[i], &batched[i]});
    const auto out = m.forward_batch(chunks);
    for (size_t i = 0; i < history.size(); ++i) {
      const auto alone = m.forward(toks[i], pos[i], single[i]).to_float_vector();
      EXPECT_TRUE(out[i].to_float_vector() == alone) << "step " << step << ", sequence " << i;
    }
  }
}

TEST(BatchForward, LastOnlyAndBadInput) {
  TempDir dir;
  const Model m = Model::load(write_llama(dir, false));
  KvCache a = m.make_cache(), b = m.make_cache(), ref = m.make_cache();
  const auto ta = tokens_of(6, kVocab, 1), tb = tokens_of(3, kVocab, 2);
  const auto pa = positions_from(0, 6), pb = positions_from(0, 3);
  const std::vector<SequenceChunk> two = {{ta, pa, &a}, {tb, pb, &b}};
  const auto out = m.forward_batch(two, {.last_only = true});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].shape(), Shape({1, kVocab}));
  const auto want = m.forward(tb, pb, ref, {.last_only = true}).to_float_vector();
  EXPECT_LE(max_abs_diff(out[1].to_float_vector(), want), 1e-4f);

  KvCache c = m.make_cache();
  const std::vector<SequenceChunk> shared = {{ta, pa, &c}, {tb, pb, &c}};
  EXPECT_THROW(m.forward_batch(shared), InvalidArgument);
  const std::vector<SequenceChunk> no_cache = {{ta, pa, nullptr}};
  EXPECT_THROW(m.forward_batch(no_cache), InvalidArgument);
  const std::vector<int32_t> bad = {static_cast<int32_t>(kVocab)}, p0 = {0};
  KvCache d = m.make_cache();
  const std::vector<SequenceChunk> bad_id = {{bad, p0, &d}};
  EXPECT_THROW(m.forward_batch(bad_id), InvalidArgument);
  EXPECT_THROW(m.forward_batch({}), InvalidArgument);
}

// generate_batch against generate() per sequence: greedy and seeded sampling, different prompt
// lengths, chunk sizes, lengths, a stop id and a callback that stops early.
TEST(GenerateBatch, MatchesGeneratePerSequence) {
  TempDir dir;
  const Model m = Model::load(write_llama(dir, false));
  std::vector<std::vector<int32_t>> prompts = {tokens_of(11, kVocab, 1), tokens_of(3, kVocab, 2),
                                               tokens_of(20, kVocab, 3), tokens_of(6, kVocab, 4)};
  std::vector<GenerateOptions> opts(4);
  opts[0].max_new_tokens = 7;
  opts[0].prefill_chunk = 4;
  opts[1].max_new_tokens = 12;
  opts[1].sampler = {.temperature = 0.9f, .top_k = 20, .top_p = 0.95f, .seed = 42};
  opts[2].max_new_tokens = 5;
  opts[2].prefill_chunk = 8;
  opts[3].max_new_tokens = 9;
  opts[3].sampler = {.temperature = 1.2f, .seed = 7};
  // f32 decode: this checks batching; with the default int8 decode a sequence alone (or the last
  // one left in the batch) rounds its activations to int8 while stacked rows compute in f32.
  for (GenerateOptions& o : opts) o.decode = DecodeArithmetic::kF32;
  // Sequential runs first: they give the tokens the batch must reproduce.
  std::vector<GenerateResult> want;
  for (size_t i = 0; i < prompts.size(); ++i) {
    KvCache c = m.make_cache();
    want.push_back(generate(m, c, prompts[i], opts[i]));
  }
  ASSERT_GE(want[0].tokens.size(), 4u);
  opts[0].stop_ids = {want[0].tokens[3]};  // stops at the first occurrence of that token
  const auto stop_at =
      std::find(want[0].tokens.begin(), want[0].tokens.end(), want[0].tokens[3]) + 1;
  std::vector<int32_t> streamed;
  opts[2].on_token = [&](int32_t id) {
    streamed.push_back(id);
    return streamed.size() < 2;  // the callback stops sequence 2 after two tokens
  };
  std::vector<KvCache> caches;
  for (size_t i = 0; i < prompts.size(); ++i) caches.push_back(m.make_cache());
  std::vector<BatchRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) reqs.push_back({&caches[i], prompts[i], opts[i]});
  BatchStats stats;
  const auto got = generate_batch(m, reqs, &stats);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].tokens, std::vector<int32_t>(want[0].tokens.begin(), stop_at));
  EXPECT_EQ(got[0].stats.stop_reason, "stop_id");
  EXPECT_EQ(got[1].tokens, want[1].tokens);
  EXPECT_EQ(got[1].stats.stop_reason, want[1].stats.stop_reason);
  EXPECT_EQ(got[2].tokens,
            std::vector<int32_t>(want[2].tokens.begin(), want[2].tokens.begin() + 2));
  EXPECT_EQ(streamed, got[2].tokens);
  EXPECT_EQ(got[2].stats.stop_reason, "callback");
  EXPECT_EQ(got[3].tokens, want[3].tokens);
  EXPECT_LE(max_abs_diff(got[3].first_logits, want[3].first_logits), 1e-4f);
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got[i].stats.prompt_tokens, static_cast<int64_t>(prompts[i].size()));
    EXPECT_EQ(got[i].stats.generated_tokens, static_cast<int64_t>(got[i].tokens.size()));
    // As in generate(): the last sampled token is not fed back.
    EXPECT_EQ(caches[i].tokens(0, 0),
              static_cast<int64_t>(prompts[i].size() + got[i].tokens.size()) - 1);
    EXPECT_GE(got[i].stats.ttft_s, got[i].stats.prefill_s);
  }
  int64_t generated = 0;
  for (const auto& r : got) generated += r.stats.generated_tokens;
  EXPECT_EQ(stats.generated_tokens, generated);
  EXPECT_GE(stats.steps, 12);  // the longest sequence needs its prefill plus 11 decode steps

  // Bad requests are named.
  KvCache c = m.make_cache();
  std::vector<BatchRequest> shared = {{&c, prompts[0], {}}, {&c, prompts[1], {}}};
  EXPECT_THROW(generate_batch(m, shared), InvalidArgument);
  std::vector<BatchRequest> empty = {{&c, {}, {}}};
  EXPECT_THROW(generate_batch(m, empty), InvalidArgument);
  GenerateOptions too_long;
  too_long.max_new_tokens = 600;
  std::vector<BatchRequest> overflow = {{&c, prompts[0], too_long}};
  EXPECT_THROW(generate_batch(m, overflow), InvalidArgument);
}

// BatchRunner: a sequence that joins a running batch after a few steps gets the tokens it gets
// alone (f32 decode), so does the one already running; a cancelled sequence leaves at once, its
// cache can be freed while the others go on, and the runner never touches it again.
TEST(BatchRunner, JoinMidRunAndCancel) {
  TempDir dir;
  const Model m = Model::load(write_llama(dir, false));
  const std::vector<int32_t> pa = tokens_of(9, kVocab, 5), pb = tokens_of(14, kVocab, 6);
  GenerateOptions o;
  o.max_new_tokens = 10;
  o.prefill_chunk = 4;
  o.decode = DecodeArithmetic::kF32;
  KvCache ca = m.make_cache(), cb = m.make_cache();
  const auto alone_a = generate(m, ca, pa, o).tokens;
  const auto alone_b = generate(m, cb, pb, o).tokens;
  ca.clear();
  cb.clear();

  BatchRunner runner(m);
  const uint64_t a = runner.add({&ca, pa, o});
  EXPECT_THROW(runner.add({&ca, pb, o}), InvalidArgument);  // its cache is in use
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(runner.step().empty());
  const uint64_t b = runner.add({&cb, pb, o});  // a is decoding; b prefills beside it
  EXPECT_EQ(runner.active(), 2u);
  std::map<uint64_t, GenerateResult> got;
  while (runner.active() > 0) {
    for (auto& [id, r] : runner.step()) got[id] = std::move(r);
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[a].tokens, alone_a);
  EXPECT_EQ(got[b].tokens, alone_b);
  EXPECT_EQ(runner.stats().generated_tokens, static_cast<int64_t>(alone_a.size() + alone_b.size()));

  // Cancel: a leaves after three steps, its cache is freed, b finishes with its own tokens.
  ca.clear();
  cb.clear();
  const int64_t base = memory_stats(Device::cpu()).current_bytes;
  const uint64_t a2 = runner.add({&ca, pa, o});
  const uint64_t b2 = runner.add({&cb, pb, o});
  for (int i = 0; i < 3; ++i) runner.step();
  EXPECT_GT(ca.bytes(), 0);
  EXPECT_TRUE(runner.cancel(a2));
  EXPECT_FALSE(runner.cancel(a2));
  EXPECT_EQ(runner.active(), 1u);
  ca.clear();  // the runner no longer reads or writes it
  EXPECT_EQ(ca.bytes(), 0);
  std::vector<int32_t> tokens_b;
  while (runner.active() > 0) {
    for (auto& [id, r] : runner.step()) {
      EXPECT_EQ(id, b2);
      tokens_b = r.tokens;
    }
  }
  EXPECT_EQ(tokens_b, alone_b);
  EXPECT_EQ(ca.tokens(0, 0), 0);
  cb.clear();
  EXPECT_EQ(memory_stats(Device::cpu()).current_bytes, base);
  EXPECT_TRUE(runner.step().empty());  // nothing active: no forward
}

// ---- SmolLM2 -------------------------------------------------------------------------------

TEST(BatchReal, SmolLM2BatchedEqualsOneByOne) {
  std::string path;
  try {
    path = default_model_path();
  } catch (const Error& e) {
    GTEST_SKIP() << "SmolLM2 model unavailable: " << e.what();
  }
  std::ifstream in(data_dir() / "smollm2_greedy_reference.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json ref = nlohmann::json::parse(in);
  const Model m = Model::load(path);
  // Batched forward: a 9-token prefill, a 5-token chunk after a 4-token turn, and a decode token
  // after a 7-token turn, then a decode round of all three.
  const float worst = check_batch_equals_single(m, {0, 4, 7}, {9, 5, 1}, 1e-4f);
  RecordProperty("max_abs_logit_diff", std::to_string(worst));
  // generate_batch reproduces the numpy reference's greedy continuations (their first 4 tokens).
  std::vector<KvCache> caches;
  std::vector<BatchRequest> reqs;
  for (size_t i = 0; i < ref.at("prompts").size(); ++i) caches.push_back(m.make_cache());
  size_t i = 0;
  for (const auto& p : ref.at("prompts")) {
    GenerateOptions o;
    o.max_new_tokens = 4;
    o.prefill_chunk = 16;
    reqs.push_back({&caches[i++], p.at("prompt_ids").get<std::vector<int32_t>>(), o});
  }
  const auto got = generate_batch(m, reqs);
  i = 0;
  for (const auto& p : ref.at("prompts")) {
    const auto want = p.at("greedy_ids").get<std::vector<int32_t>>();
    EXPECT_EQ(got[i++].tokens, std::vector<int32_t>(want.begin(), want.begin() + 4));
  }
}

}  // namespace
}  // namespace tandem::llm
