// SPDX-License-Identifier: Apache-2.0
// SentencePiece BPE: the text (spaces as "▁") starts as one symbol per character; the adjacent pair
// whose concatenation is the highest-scoring normal piece is merged (leftmost on ties) until no
// pair forms a piece. Symbols left without a piece become byte tokens "<0xNN>", else the unknown
// token.
#include <queue>
#include <tuple>

#include "llm/tokenizer_internal.h"
#include "llm/unicode.h"
#include "tandem/core/error.h"

namespace tandem::llm::detail {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 "▁"

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

int parse_byte_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  const int hi = hex_digit(piece[3]), lo = hex_digit(piece[4]);
  return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

SentencePieceModel::SentencePieceModel(const Vocab& vocab, const PieceIndex& index)
    : index_(&index), scores_(&vocab.scores), unk_id_(vocab.unk_id) {
  byte_ids_.fill(-1);
  const size_t n = vocab.tokens.size();
  mergeable_.assign(n, 1);
  for (size_t id = 0; id < n; ++id) {
    const TokenType type = vocab.types.empty() ? TokenType::kNormal : vocab.types[id];
    mergeable_[id] = type == TokenType::kNormal || type == TokenType::kUserDefined ||
                     type == TokenType::kUndefined;
    const bool byte_type = type == TokenType::kByte || vocab.types.empty();
    const int b = byte_type ? parse_byte_piece(vocab.tokens[id]) : -1;
    if (b >= 0 && byte_ids_[b] < 0) {
      byte_ids_[b] = static_cast<int32_t>(id);
      mergeable_[id] = 0;
    }
  }
}

void SentencePieceModel::encode(std::string_view text, bool space_prefix,
                                std::vector<int32_t>& out) const {
  std::string s;
  s.reserve(text.size() + 8);
  if (space_prefix) s.append(kSpace);
  for (char c : text) {
    if (c == ' ') {
      s.append(kSpace);
    } else {
      s.push_back(c);
    }
  }
  if (s.empty()) return;

  struct Symbol {
    uint32_t begin, size;
    int32_t prev, next;
  };
  std::vector<uint32_t> cps, offsets;
  unicode::decode_utf8(s, cps, offsets);
  const auto n = static_cast<int32_t>(cps.size());
  std::vector<Symbol> syms(n);
  for (int32_t i = 0; i < n; ++i) {
    syms[i] = {offsets[i], offsets[i + 1] - offsets[i], i - 1, i + 1 < n ? i + 1 : -1};
  }
  auto lookup = [&](uint32_t begin, uint32_t size) -> int32_t {
    auto it = index_->find(std::string_view(s).substr(begin, size));
    return (it != index_->end() && mergeable_[it->second]) ? it->second : -1;
  };
  // (score, -left, left, merged size): highest score, then leftmost, first.
  using Candidate = std::tuple<float, int32_t, int32_t, uint32_t>;
  std::priority_queue<Candidate> heap;
  const std::vector<float>* scores = scores_;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = syms[left].next;
    if (right < 0) return;
    const uint32_t size = syms[left].size + syms[right].size;
    const int32_t id = lookup(syms[left].begin, size);
    if (id < 0) return;
    const float score = scores->empty() ? 0.0f : (*scores)[id];
    heap.emplace(score, -left, left, size);
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const auto [score, neg_left, left, size] = heap.top();
    heap.pop();
    const int32_t right = syms[left].next;
    if (syms[left].size == 0 || right < 0 || syms[left].size + syms[right].size != size) continue;
    syms[left].size = size;
    syms[left].next = syms[right].next;
    if (syms[right].next >= 0) syms[syms[right].next].prev = left;
    syms[right].size = 0;
    consider(syms[left].prev);
    consider(left);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = syms[i].next) {
    const Symbol& sym = syms[i];
    auto it = index_->find(std::string_view(s).substr(sym.begin, sym.size));
    if (it != index_->end() && mergeable_[it->second]) {
      out.push_back(it->second);
      continue;
    }
    bool all_bytes = true;
    for (uint32_t k = 0; k < sym.size; ++k) {
      all_bytes = all_bytes && byte_ids_[static_cast<unsigned char>(s[sym.begin + k])] >= 0;
    }
    if (all_bytes) {
      for (uint32_t k = 0; k < sym.size; ++k) {
        out.push_back(byte_ids_[static_cast<unsigned char>(s[sym.begin + k])]);
      }
    } else if (unk_id_ >= 0) {
      out.push_back(unk_id_);
    } else {
      throw InvalidArgument(cat("tokenizer: cannot encode the character at byte ", sym.begin,
                                " of the text: no piece, no byte tokens and no unknown token"));
    }
  }
}

}  // namespace tandem::llm::detail
