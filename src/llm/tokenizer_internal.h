// SPDX-License-Identifier: Apache-2.0
// Internals of tandem::llm::Tokenizer (tokenizer.h): the pre-tokenizers (regex splitters written
// out by hand over Unicode categories), the byte-level BPE model and the SentencePiece BPE model.
// Not installed; used by src/llm/tokenizer*.cpp only.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tandem/llm/vocab.h"

namespace tandem::llm::detail {

// piece text -> id; the views point into Vocab::tokens, which must outlive the index.
using PieceIndex = std::unordered_map<std::string_view, int32_t>;

enum class PreTokenizerKind {
  kGpt2,            // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kDigitsThenGpt2,  // \p{N} (each digit alone), then kGpt2 on the rest (SmolLM, StarCoder)
  kLlama3,          // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
                    //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,           // kLlama3 with \p{N} instead of \p{N}{1,3}
};

// Maps tokenizer.ggml.pre to a splitter; Unsupported (listing the known names) otherwise.
PreTokenizerKind pre_tokenizer_kind(const std::string& name);

// Appends the byte ranges [first, second) of the words of `text`, in order, covering all of it.
void pre_tokenize(PreTokenizerKind kind, std::string_view text,
                  std::vector<std::pair<uint32_t, uint32_t>>& words);

// Byte-level BPE (GPT-2 style) over one piece of plain text.
class BytePairModel {
 public:
  BytePairModel(const Vocab& vocab, const PieceIndex& index);
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  size_t merge_count() const { return merges_.size(); }

 private:
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  const PieceIndex* index_;
  PreTokenizerKind pre_;
  bool ignore_merges_ = false;           // LLaMA-3: a word that is a token is not merged
  std::array<int32_t, 256> byte_ids_{};  // token of each single byte
  std::array<std::string, 256> byte_text_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

// SentencePiece BPE over one piece of plain text.
class SentencePieceModel {
 public:
  SentencePieceModel(const Vocab& vocab, const PieceIndex& index);
  // space_prefix: prepend "▁" (Vocab::add_space_prefix at the start of a text fragment).
  void encode(std::string_view text, bool space_prefix, std::vector<int32_t>& out) const;

 private:
  const PieceIndex* index_;
  const std::vector<float>* scores_;
  std::vector<uint8_t> mergeable_;       // normal and user-defined pieces
  std::array<int32_t, 256> byte_ids_{};  // "<0xNN>" tokens, -1 when absent
  int32_t unk_id_ = -1;
};

// "<0x41>" -> 0x41, or -1.
int parse_byte_piece(std::string_view piece);

}  // namespace tandem::llm::detail
