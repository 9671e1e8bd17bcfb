// SPDX-License-Identifier: Apache-2.0
// load_vocab: tokenizer.ggml.* keys of a GGUF file -> Vocab, with strict consistency checks (array
// lengths agree, ids and token types in range, merges well formed).
#include <string_view>

#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/vocab.h"

namespace tandem::llm {

namespace {

[[noreturn]] void bad(const GgufFile& f, const std::string& what) {
  throw ParseError(f.path(), -1, what);
}

int32_t special_id(const GgufFile& f, const std::string& key, size_t n_tokens) {
  const auto id = f.find_int(key);
  if (!id) return -1;
  if (*id < 0 || *id >= static_cast<int64_t>(n_tokens))
    bad(f, cat(key, " = ", *id, " is outside the vocabulary of ", n_tokens, " tokens"));
  return static_cast<int32_t>(*id);
}

bool flag(const GgufFile& f, const std::string& key, bool fallback) {
  return f.has(key) ? f.get_bool(key) : fallback;
}

}  // namespace

Vocab load_vocab(const GgufFile& f) {
  Vocab v;
  const auto model = f.find_string("tokenizer.ggml.model");
  if (!model) bad(f, "tokenizer.ggml.model is missing (the file has no vocabulary)");
  v.model = *model;
  if (v.model != "gpt2" && v.model != "llama")
    throw Unsupported(cat(f.path(), ": tokenizer model '", v.model,
                          "' is not supported (gpt2 byte-level BPE and llama SentencePiece are)"));
  v.pre = f.find_string("tokenizer.ggml.pre").value_or("default");
  if (!f.has("tokenizer.ggml.tokens")) bad(f, "tokenizer.ggml.tokens is missing");
  v.tokens = f.get_string_array("tokenizer.ggml.tokens");
  const size_t n = v.tokens.size();
  if (n == 0) bad(f, "tokenizer.ggml.tokens is empty");
  if (n > static_cast<size_t>(INT32_MAX)) bad(f, cat("tokenizer.ggml.tokens: ", n, " tokens"));

  if (f.has("tokenizer.ggml.scores")) {
    const auto scores = f.get_float_array("tokenizer.ggml.scores");
    if (scores.size() != n)
      bad(f, cat("tokenizer.ggml.scores has ", scores.size(), " entries for ", n, " tokens"));
    v.scores.assign(scores.begin(), scores.end());
  }
  if (f.has("tokenizer.ggml.token_type")) {
    const auto types = f.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n)
      bad(f, cat("tokenizer.ggml.token_type has ", types.size(), " entries for ", n, " tokens"));
    v.types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 0 || types[i] > static_cast<int64_t>(TokenType::kByte))
        bad(f, cat("tokenizer.ggml.token_type[", i, "] = ", types[i], " (valid: 0 to 6)"));
      v.types.push_back(static_cast<TokenType>(types[i]));
    }
  }
  if (f.has("tokenizer.ggml.merges")) {
    v.merges = f.get_string_array("tokenizer.ggml.merges");
    for (size_t i = 0; i < v.merges.size(); ++i) {
      const std::string_view m = v.merges[i];
      const size_t sp = m.find(' ');
      if (sp == std::string_view::npos || sp == 0 || sp + 1 == m.size() ||
          m.find(' ', sp + 1) != std::string_view::npos)
        bad(f, cat("tokenizer.ggml.merges[", i, "] = \"", m,
                   "\" is not two pieces separated by one space"));
    }
  }
  if (v.model == "gpt2" && v.merges.empty())
    bad(f, "tokenizer.ggml.merges is missing or empty (a gpt2 BPE vocabulary needs merges)");

  v.bos_id = special_id(f, "tokenizer.ggml.bos_token_id", n);
  v.eos_id = special_id(f, "tokenizer.ggml.eos_token_id", n);
  v.unk_id = special_id(f, "tokenizer.ggml.unknown_token_id", n);
  v.pad_id = special_id(f, "tokenizer.ggml.padding_token_id", n);
  // Defaults for absent keys: SentencePiece vocabularies add BOS and a space prefix, BPE ones not.
  const bool spm = v.model == "llama";
  v.add_bos = flag(f, "tokenizer.ggml.add_bos_token", spm);
  v.add_eos = flag(f, "tokenizer.ggml.add_eos_token", false);
  v.add_space_prefix = flag(f, "tokenizer.ggml.add_space_prefix", spm);
  if (v.add_bos && v.bos_id < 0)
    bad(f, "tokenizer.ggml.add_bos_token is set but tokenizer.ggml.bos_token_id is missing");
  if (v.add_eos && v.eos_id < 0)
    bad(f, "tokenizer.ggml.add_eos_token is set but tokenizer.ggml.eos_token_id is missing");
  v.chat_template = f.find_string("tokenizer.chat_template").value_or("");
  return v;
}

}  // namespace tandem::llm
