// SPDX-License-Identifier: Apache-2.0
// The kv-eval harness: budget parsing, KvCache::clone (the per-policy copies are independent and
// exact), and one short run on the real SmolLM2-135M-Instruct (skipped when the model cannot be
// fetched): the full-cache row is exactly the reference (KL 0, top-1 1, same perplexity, zero
// attention error), each eviction row holds its budget in measured bytes, the JSON has every row.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tandem/core/error.h"
#include "tandem/llm/kv_eval.h"
#include "tandem/llm/kv_policies.h"
#include "tandem/llm/model_store.h"
#include "tandem/llm/vocab.h"

namespace tandem::llm {
namespace {

TEST(KvBudgetParse, TokensRatiosAndErrors) {
  EXPECT_EQ(parse_kv_budget("256").tokens, 256);
  EXPECT_EQ(parse_kv_budget("256").label(), "256");
  EXPECT_DOUBLE_EQ(parse_kv_budget("10%").ratio, 0.10);
  EXPECT_EQ(parse_kv_budget("10%").label(), "10%");
  EXPECT_DOUBLE_EQ(parse_kv_budget("0.25").ratio, 0.25);
  for (const char* bad : {"", "0", "-5", "abc", "150%", "12.5", "%", "10%%"}) {
    EXPECT_THROW(parse_kv_budget(bad), InvalidArgument) << bad;
  }
  // Past int64 it used to wrap to -9223372036854775808 tokens.
  try {
    parse_kv_budget("99999999999999999999");
    ADD_FAILURE() << "a budget past int64 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the limit of 1099511627776 tokens"),
              std::string::npos)
        << e.what();
  }
}

// --kv-extra keys that no policy of the spec reads are refused, naming the key and the settings.
TEST(KvSettings, UnknownKeysAreRefusedByName) {
  EXPECT_NO_THROW(check_kv_settings({"clusterattn"}, {{"pool", "3"}}, "--kv-extra"));
  EXPECT_NO_THROW(check_kv_settings({"clusterattn+qokv"}, {{"window", "8"}}, "--kv-extra"));
  EXPECT_NO_THROW(check_kv_settings({"snapkv", "h2o"}, {{"recent_ratio", "0.3"}}, "x"));
  try {
    check_kv_settings({"clusterattn"}, {{"window", "abc"}}, "--kv-extra");
    ADD_FAILURE() << "window=abc was accepted for clusterattn";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-extra 'window=abc': 'window' is not a setting of "
                                         "clusterattn (settings: pool, eps, rho, min_len, "
                                         "per_head_fixed, fill)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(check_kv_settings({"full"}, {{"pool", "3"}}, "x"), InvalidArgument);
  EXPECT_THROW(check_kv_settings({"clusterattn+"}, {}, "x"), InvalidArgument);  // --kv-quant ''
}

TEST(KvCacheClone, CopiesEveryBlockAndStaysIndependent) {
  KvCache a(KvCacheShape{
      .n_layers = 2, .n_kv_heads = 2, .head_dim = 4, .block_tokens = 4, .dtype = DType::kF16});
  std::vector<float> k(10 * 2 * 4), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) k[i] = 0.5f * i, v[i] = -0.25f * i;
  std::vector<int32_t> pos(10);
  for (int i = 0; i < 10; ++i) pos[i] = i;
  for (int l = 0; l < 2; ++l) {
    a.append(l, Tensor::from_vector(k, {10, 2, 4}, DType::kF32),
             Tensor::from_vector(v, {10, 2, 4}, DType::kF32), pos);
  }
  const std::vector<int64_t> keep = {0, 3, 9};
  a.retain(1, 0, keep);
  KvCache b = a.clone();
  EXPECT_EQ(b.bytes(), a.bytes());
  EXPECT_EQ(b.next_position(), a.next_position());
  for (int l = 0; l < 2; ++l) {
    for (int h = 0; h < 2; ++h) {
      ASSERT_EQ(b.blocks(l, h).size(), a.blocks(l, h).size());
      for (size_t i = 0; i < a.blocks(l, h).size(); ++i) {
        const KvBlock &x = a.blocks(l, h)[i], &y = b.blocks(l, h)[i];
        EXPECT_EQ(x.positions, y.positions);
        EXPECT_EQ(x.used, y.used);
        EXPECT_EQ(x.dtype, y.dtype);
        EXPECT_EQ(std::memcmp(x.k.raw_data(), y.k.raw_data(), x.k.nbytes()), 0);
        EXPECT_EQ(std::memcmp(x.v.raw_data(), y.v.raw_data(), x.v.nbytes()), 0);
        EXPECT_NE(x.k.raw_data(), y.k.raw_data());
      }
    }
  }
  b.retain(0, 1, keep);
  EXPECT_EQ(a.tokens(0, 1), 10);
  EXPECT_EQ(b.tokens(0, 1), 3);
  EXPECT_EQ(b.policy().name(), "full");
}

std::string real_model(std::string* why) {
  try {
    return default_model_path();
  } catch (const Error& e) {
    *why = e.what();
    return {};
  }
}

TEST(KvEvalReal, ShortSmolLM2Run) {
  std::string why;
  const std::string path = real_model(&why);
  if (path.empty()) GTEST_SKIP() << "SmolLM2 model unavailable: " << why;
  const Model model = Model::load(path);
  const Tokenizer tok(load_vocab(model.file()));
  std::ifstream in(
      std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/llm/data/pride_and_prejudice_ch1-4.txt",
      std::ios::binary);
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  KvEvalConfig c;
  c.contexts = {192};
  c.continuation = 3;
  c.policies = {"full", "snapkv", "clusterattn", "streamingllm"};
  c.budgets = {parse_kv_budget("64")};
  c.window = 16;
  c.needle_depths = {0.5};
  c.needle_answer_tokens = 8;
  const KvEvalResult r = run_kv_eval(model, tok, ss.str(), ss.str(), c);
  ASSERT_EQ(r.rows.size(), 4u);
  const KvEvalRow& full = r.rows[0];
  EXPECT_EQ(full.policy, "full");
  EXPECT_EQ(full.kl_mean, 0.0);
  EXPECT_EQ(full.top1, 1.0);
  EXPECT_EQ(full.ppl, full.ppl_full);
  EXPECT_EQ(full.kv_bytes, full.kv_bytes_full);
  ASSERT_EQ(full.attn_err_layer.size(), static_cast<size_t>(model.config().n_layers));
  for (double e : full.attn_err_layer) EXPECT_EQ(e, 0.0);
  EXPECT_EQ(full.needle_trials, 1);
  const auto& cfg = model.config();
  for (size_t i = 1; i < r.rows.size(); ++i) {
    const KvEvalRow& row = r.rows[i];
    SCOPED_TRACE(row.policy);
    EXPECT_LT(row.kv_bytes, row.kv_bytes_full);
    EXPECT_LE(row.kv_tokens_per_head, 64.0);
    if (row.policy != "clusterattn") {
      EXPECT_EQ(row.kv_tokens_per_head, 64.0);
      // 64 tokens per head = 2 blocks of 32 f32 slots (K and V) per (layer, head).
      EXPECT_EQ(row.kv_bytes,
                int64_t{cfg.n_layers} * cfg.n_kv_heads * 2 * 2 * 32 * cfg.head_dim * 4);
    }
    EXPECT_GE(row.kl_mean, 0.0);
    EXPECT_TRUE(std::isfinite(row.ppl));
    EXPECT_GT(row.decode_tok_s, 0.0);
    double err = 0;
    for (double e : row.attn_err_layer) err += e;
    EXPECT_GT(err, 0.0);  // eviction changes some layer's attention output
  }
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j.at("rows").size(), 4u);
  EXPECT_NE(r.table().find("clusterattn"), std::string::npos);
}

}  // namespace
}  // namespace tandem::llm
