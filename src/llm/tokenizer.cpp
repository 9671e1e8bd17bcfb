// SPDX-License-Identifier: Apache-2.0
// Tokenizer facade: vocab checks, special-token splitting, decoding and the streaming Detokenizer.
// The models themselves are in tokenizer_bpe.cpp and tokenizer_spm.cpp.
#include "tandem/llm/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>

#include "llm/tokenizer_internal.h"
#include "llm/unicode.h"
#include "tandem/core/error.h"

namespace tandem::llm {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // "▁"

// Control-token texts that end a turn or a document in the common instruct vocabularies.
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|im_end|>", "<|eot_id|>", "<|endoftext|>", "</s>",           "<end_of_turn>",
    "<|end|>",    "<|eom_id|>", "<EOT>",         "<|end_of_text|>"};

// The bytes a byte-level BPE piece stands for (stand-ins mapped back; other characters kept).
std::string byte_level_bytes(std::string_view piece) {
  std::vector<uint32_t> cps, offsets;
  unicode::decode_utf8(piece, cps, offsets);
  std::string out;
  out.reserve(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    const int b = unicode::unicode_to_byte(cps[i]);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(piece.substr(offsets[i], offsets[i + 1] - offsets[i]));
    }
  }
  return out;
}

std::string spm_bytes(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  for (size_t i = 0; i < piece.size();) {
    if (piece.substr(i, kSpmSpace.size()) == kSpmSpace) {
      out.push_back(' ');
      i += kSpmSpace.size();
    } else {
      out.push_back(piece[i++]);
    }
  }
  return out;
}

}  // namespace

struct Tokenizer::Impl {
  Vocab vocab;
  TokenizerModel model = TokenizerModel::kBytePairGpt2;
  detail::PieceIndex index;
  std::vector<TokenType> types;    // never empty (filled with kNormal)
  std::vector<std::string> bytes;  // id -> decoded bytes
  std::vector<int32_t> eog;
  std::vector<uint8_t> is_eog;
  // Special tokens by first byte, longest first (user-defined and control).
  std::array<std::vector<int32_t>, 256> specials;
  std::optional<detail::BytePairModel> bpe;
  std::optional<detail::SentencePieceModel> spm;

  void check_id(int32_t id, const char* what) const {
    if (id < 0 || id >= static_cast<int32_t>(vocab.tokens.size())) {
      throw InvalidArgument(cat("tokenizer: ", what, ": token id ", id, " is out of range [0, ",
                                vocab.tokens.size(), ")"));
    }
  }

  bool spm_strip_first() const {
    return model == TokenizerModel::kSentencePiece && vocab.add_space_prefix;
  }

  void encode_text(std::string_view text, bool after_start_or_special,
                   std::vector<int32_t>& out) const {
    if (bpe) {
      bpe->encode(text, out);
    } else {
      spm->encode(text, vocab.add_space_prefix && after_start_or_special, out);
    }
  }
};

Tokenizer::Tokenizer(Vocab vocab) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.vocab = std::move(vocab);
  const Vocab& v = m.vocab;
  const size_t n = v.tokens.size();
  if (v.model == "gpt2") {
    m.model = TokenizerModel::kBytePairGpt2;
  } else if (v.model == "llama") {
    m.model = TokenizerModel::kSentencePiece;
  } else {
    throw Unsupported(cat("tokenizer: model '", v.model,
                          "' (tokenizer.ggml.model) is not supported; known: gpt2, llama"));
  }
  if (n == 0) throw InvalidArgument("tokenizer: the vocab has no tokens");
  if (n > static_cast<size_t>(INT32_MAX)) throw InvalidArgument("tokenizer: vocab too large");
  if (!v.types.empty() && v.types.size() != n) {
    throw InvalidArgument(cat("tokenizer: ", v.types.size(), " token types for ", n, " tokens"));
  }
  if (!v.scores.empty() && v.scores.size() != n) {
    throw InvalidArgument(cat("tokenizer: ", v.scores.size(), " scores for ", n, " tokens"));
  }
  for (auto [id, name] : {std::pair{v.bos_id, "bos"}, std::pair{v.eos_id, "eos"},
                          std::pair{v.unk_id, "unknown"}, std::pair{v.pad_id, "padding"}}) {
    if (id < -1 || id >= static_cast<int32_t>(n)) {
      throw InvalidArgument(
          cat("tokenizer: ", name, " token id ", id, " is out of range [0, ", n, ")"));
    }
  }
  m.types = v.types.empty() ? std::vector<TokenType>(n, TokenType::kNormal) : v.types;
  m.index.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    m.index.try_emplace(std::string_view(v.tokens[id]), static_cast<int32_t>(id));
  }

  m.bytes.resize(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& piece = v.tokens[id];
    const TokenType type = m.types[id];
    if (type == TokenType::kControl || type == TokenType::kUnknown ||
        type == TokenType::kUserDefined) {
      m.bytes[id] = piece;  // written as-is
    } else if (m.model == TokenizerModel::kBytePairGpt2) {
      m.bytes[id] = byte_level_bytes(piece);
    } else if (int b = detail::parse_byte_piece(piece); b >= 0 && type == TokenType::kByte) {
      m.bytes[id] = std::string(1, static_cast<char>(b));
    } else {
      m.bytes[id] = spm_bytes(piece);
    }
    if ((type == TokenType::kControl || type == TokenType::kUserDefined) && !piece.empty()) {
      m.specials[static_cast<unsigned char>(piece[0])].push_back(static_cast<int32_t>(id));
    }
  }
  for (auto& list : m.specials) {
    std::stable_sort(list.begin(), list.end(),
                     [&](int32_t a, int32_t b) { return v.tokens[a].size() > v.tokens[b].size(); });
  }

  m.is_eog.assign(n, 0);
  if (v.eos_id >= 0) m.is_eog[v.eos_id] = 1;
  for (size_t id = 0; id < n; ++id) {
    if (m.types[id] != TokenType::kControl) continue;
    for (std::string_view text : kEndOfGenerationTexts) {
      if (v.tokens[id] == text) m.is_eog[id] = 1;
    }
  }
  for (size_t id = 0; id < n; ++id) {
    if (m.is_eog[id]) m.eog.push_back(static_cast<int32_t>(id));
  }

  if (m.model == TokenizerModel::kBytePairGpt2) {
    m.bpe.emplace(v, m.index);
  } else {
    m.spm.emplace(v, m.index);
  }
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && m.vocab.add_bos && m.vocab.bos_id >= 0) out.push_back(m.vocab.bos_id);

  size_t start = 0;           // first byte of the pending plain text
  bool after_special = true;  // at the start of the text or just after a special token
  for (size_t i = 0; i < text.size();) {
    int32_t match = -1;
    for (int32_t id : m.specials[static_cast<unsigned char>(text[i])]) {
      if (!parse_special && m.types[id] == TokenType::kControl) continue;
      const std::string& piece = m.vocab.tokens[id];
      if (text.size() - i >= piece.size() && text.compare(i, piece.size(), piece) == 0) {
        match = id;
        break;
      }
    }
    if (match < 0) {
      ++i;
      continue;
    }
    if (start < i) m.encode_text(text.substr(start, i - start), after_special, out);
    out.push_back(match);
    i += m.vocab.tokens[match].size();
    start = i;
    after_special = true;
  }
  if (start < text.size()) m.encode_text(text.substr(start), after_special, out);

  if (add_special && m.vocab.add_eos && m.vocab.eos_id >= 0) out.push_back(m.vocab.eos_id);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool render_special) const {
  const Impl& m = *impl_;
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    m.check_id(id, "decode");
    if (is_control(id) || m.types[id] == TokenType::kUnknown) {
      if (render_special) out += m.bytes[id];
      continue;
    }
    std::string_view bytes = m.bytes[id];
    if (first && m.spm_strip_first() && !bytes.empty() && bytes[0] == ' ') bytes.remove_prefix(1);
    first = false;
    out += bytes;
  }
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  impl_->check_id(id, "token_to_piece");
  if (!render_special && (is_control(id) || impl_->types[id] == TokenType::kUnknown)) return {};
  return impl_->bytes[id];
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  if (impl_->model != TokenizerModel::kBytePairGpt2) {
    throw Unsupported("tokenizer: pre_tokenize: SentencePiece models have no pre-tokenizer");
  }
  std::vector<std::pair<uint32_t, uint32_t>> words;
  detail::pre_tokenize(detail::pre_tokenizer_kind(impl_->vocab.pre), text, words);
  std::vector<std::string> out;
  out.reserve(words.size());
  for (const auto& [begin, end] : words) out.emplace_back(text.substr(begin, end - begin));
  return out;
}

const std::string& Tokenizer::piece(int32_t id) const {
  impl_->check_id(id, "piece");
  return impl_->vocab.tokens[id];
}

int32_t Tokenizer::find_piece(std::string_view piece) const {
  auto it = impl_->index.find(piece);
  return it == impl_->index.end() ? -1 : it->second;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->vocab.tokens.size()); }
TokenizerModel Tokenizer::model() const { return impl_->model; }
int32_t Tokenizer::bos_id() const { return impl_->vocab.bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->vocab.eos_id; }
int32_t Tokenizer::unk_id() const { return impl_->vocab.unk_id; }
int32_t Tokenizer::pad_id() const { return impl_->vocab.pad_id; }
bool Tokenizer::add_bos() const { return impl_->vocab.add_bos; }
bool Tokenizer::add_eos() const { return impl_->vocab.add_eos; }

bool Tokenizer::is_eog(int32_t id) const {
  impl_->check_id(id, "is_eog");
  return impl_->is_eog[id] != 0;
}

bool Tokenizer::is_control(int32_t id) const {
  impl_->check_id(id, "is_control");
  return impl_->types[id] == TokenType::kControl;
}

const std::vector<int32_t>& Tokenizer::eog_ids() const { return impl_->eog; }
const Vocab& Tokenizer::vocab() const { return impl_->vocab; }

Detokenizer::Detokenizer(const Tokenizer& tokenizer, bool render_special)
    : tokenizer_(&tokenizer), render_special_(render_special) {}

std::string Detokenizer::push(int32_t id) {
  std::string piece = tokenizer_->token_to_piece(id, render_special_);
  const std::vector<TokenType>& types = tokenizer_->vocab().types;
  const bool special =
      tokenizer_->is_control(id) || (!types.empty() && types[id] == TokenType::kUnknown);
  if (!special) {
    if (first_ && tokenizer_->model() == TokenizerModel::kSentencePiece &&
        tokenizer_->vocab().add_space_prefix && !piece.empty() && piece[0] == ' ') {
      piece.erase(0, 1);
    }
    first_ = false;
  }
  pending_ += piece;
  const size_t hold = unicode::incomplete_utf8_tail(pending_);
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string Detokenizer::flush() {
  std::string out = std::move(pending_);
  reset();
  return out;
}

void Detokenizer::reset() {
  pending_.clear();
  first_ = true;
}

}  // namespace tandem::llm
