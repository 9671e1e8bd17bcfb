// SPDX-License-Identifier: Apache-2.0
// Vocab: what a tokenizer needs from a model file (GGUF keys tokenizer.ggml.*), independent of the
// format.
//
//   auto vocab = tandem::llm::load_vocab(gguf);           // from a GgufFile
//   tandem::llm::Tokenizer tok(vocab);                     // tokenizer.h
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/export.h"

namespace tandem::llm {

class GgufFile;

enum class TokenType : int32_t {  // GGUF tokenizer.ggml.token_type values
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocab {
  std::string model;  // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece)
  std::string pre;  // tokenizer.ggml.pre: pre-tokenizer name ("smollm", "llama-bpe", "default"...)
  std::vector<std::string>
      tokens;                 // id -> piece (byte-level BPE pieces use the GPT-2 byte->unicode map)
  std::vector<float> scores;  // SentencePiece scores (empty for BPE)
  std::vector<TokenType> types;     // id -> type (empty = all normal)
  std::vector<std::string> merges;  // BPE merges "a b", in rank order (empty for SentencePiece)
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = false, add_eos = false;
  bool add_space_prefix = false;  // SentencePiece: prepend "▁" to the text
  std::string chat_template;      // tokenizer.chat_template (Jinja source), may be empty
};

// Reads tokenizer.ggml.* from a GGUF file; ParseError naming the key when inconsistent (lengths
// differ, ids out of range), Unsupported for tokenizer models other than gpt2 and llama.
TANDEM_API Vocab load_vocab(const GgufFile& file);

}  // namespace tandem::llm
