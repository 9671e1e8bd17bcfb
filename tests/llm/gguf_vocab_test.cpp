// SPDX-License-Identifier: Apache-2.0
// load_vocab on writer-made files: both tokenizer models, defaults, and each consistency check.
#include <gtest/gtest.h>

#include <functional>

#include "llm/gguf_test_util.h"
#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/vocab.h"

namespace tandem::llm {
namespace {

using testing::TempDir;

void gpt2_vocab(GgufWriter& w) {
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "smollm");
  w.set_string_array("tokenizer.ggml.tokens", {"<|endoftext|>", "a", "b", "ab"});
  w.set_int_array("tokenizer.ggml.token_type", {3, 1, 1, 1}, GgufType::kI32);
  w.set_string_array("tokenizer.ggml.merges", {"a b"});
  w.set_int("tokenizer.ggml.bos_token_id", 0, GgufType::kU32);
  w.set_int("tokenizer.ggml.eos_token_id", 0, GgufType::kU32);
  w.set_string("tokenizer.chat_template", "{{ messages }}");
}

Vocab load(const std::function<void(GgufWriter&)>& fill) {
  TempDir dir;
  GgufWriter w;
  fill(w);
  w.write(dir.file("v.gguf"));
  GgufFile f(dir.file("v.gguf"));
  return load_vocab(f);
}

void expect_bad(const std::function<void(GgufWriter&)>& fill, const std::string& needle) {
  try {
    load(fill);
    FAIL() << "no error; expected one mentioning \"" << needle << "\"";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(GgufVocab, Gpt2Vocabulary) {
  const Vocab v = load(gpt2_vocab);
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "smollm");
  EXPECT_EQ(v.tokens, (std::vector<std::string>{"<|endoftext|>", "a", "b", "ab"}));
  EXPECT_EQ(v.types[0], TokenType::kControl);
  EXPECT_EQ(v.merges, std::vector<std::string>{"a b"});
  EXPECT_EQ(v.bos_id, 0);
  EXPECT_EQ(v.eos_id, 0);
  EXPECT_EQ(v.unk_id, -1);
  EXPECT_EQ(v.pad_id, -1);
  EXPECT_FALSE(v.add_bos);
  EXPECT_FALSE(v.add_space_prefix);
  EXPECT_EQ(v.chat_template, "{{ messages }}");
}

TEST(GgufVocab, LlamaVocabularyDefaults) {
  const Vocab v = load([](GgufWriter& w) {
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81"});
    w.set_float_array("tokenizer.ggml.scores", {0, 0, 0, -1.5});
    w.set_int_array("tokenizer.ggml.token_type", {2, 3, 3, 1}, GgufType::kI32);
    w.set_int("tokenizer.ggml.bos_token_id", 1, GgufType::kU32);
    w.set_int("tokenizer.ggml.eos_token_id", 2, GgufType::kU32);
    w.set_int("tokenizer.ggml.unknown_token_id", 0, GgufType::kU32);
    w.set_bool("tokenizer.ggml.add_eos_token", false);
  });
  EXPECT_EQ(v.pre, "default");
  EXPECT_EQ(v.scores, (std::vector<float>{0, 0, 0, -1.5f}));
  EXPECT_TRUE(v.merges.empty());
  EXPECT_TRUE(v.add_bos);           // SentencePiece default
  EXPECT_TRUE(v.add_space_prefix);  // SentencePiece default
  EXPECT_FALSE(v.add_eos);
  EXPECT_EQ(v.unk_id, 0);
}

TEST(GgufVocab, ConsistencyChecks) {
  expect_bad([](GgufWriter&) {}, "tokenizer.ggml.model is missing");
  expect_bad(
      [](GgufWriter& w) {
        gpt2_vocab(w);
        w.set_float_array("tokenizer.ggml.scores", {1, 2});
      },
      "tokenizer.ggml.scores has 2 entries for 4 tokens");
  expect_bad(
      [](GgufWriter& w) {
        gpt2_vocab(w);
        w.set_int_array("tokenizer.ggml.token_type", {1, 1, 1}, GgufType::kI32);
      },
      "tokenizer.ggml.token_type has 3 entries for 4 tokens");
  expect_bad(
      [](GgufWriter& w) {
        gpt2_vocab(w);
        w.set_int_array("tokenizer.ggml.token_type", {1, 1, 9, 1}, GgufType::kI32);
      },
      "tokenizer.ggml.token_type[2] = 9");
  expect_bad(
      [](GgufWriter& w) {
        gpt2_vocab(w);
        w.set_int("tokenizer.ggml.eos_token_id", 4, GgufType::kU32);
      },
      "tokenizer.ggml.eos_token_id = 4 is outside the vocabulary of 4 tokens");
  expect_bad(
      [](GgufWriter& w) {
        gpt2_vocab(w);
        w.set_string_array("tokenizer.ggml.merges", {"a b", "ab"});
      },
      "tokenizer.ggml.merges[1] = \"ab\" is not two pieces");
  expect_bad(
      [](GgufWriter& w) {
        gpt2_vocab(w);
        w.set_string_array("tokenizer.ggml.merges", {});
      },
      "a gpt2 BPE vocabulary needs merges");
  expect_bad(
      [](GgufWriter& w) {
        w.set_string("tokenizer.ggml.model", "llama");
        w.set_string_array("tokenizer.ggml.tokens", {"a"});
      },
      "add_bos_token is set but tokenizer.ggml.bos_token_id is missing");
  expect_bad(
      [](GgufWriter& w) {
        w.set_string("tokenizer.ggml.model", "gpt2");
        w.set_string_array("tokenizer.ggml.tokens", {});
      },
      "tokenizer.ggml.tokens is empty");
  expect_bad(
      [](GgufWriter& w) {
        gpt2_vocab(w);
        w.set_string("tokenizer.ggml.tokens", "not an array");
      },
      "is a string, expected an array of string");
  EXPECT_THROW(load([](GgufWriter& w) {
                 w.set_string("tokenizer.ggml.model", "bert");
                 w.set_string_array("tokenizer.ggml.tokens", {"a"});
               }),
               Unsupported);
}

}  // namespace
}  // namespace tandem::llm
