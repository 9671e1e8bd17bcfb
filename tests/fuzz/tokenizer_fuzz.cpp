// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the tokenizers: arbitrary bytes are encoded with a byte-level BPE vocab that
// covers all 256 bytes (plus a few merges and a special token) and with a SentencePiece vocab with
// byte fallback. Encoding must never throw or crash, and decode(encode(s)) must give s back
// (special tokens are not parsed; for SentencePiece, inputs holding its space mark U+2581 are
// exempt from the round trip).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "tandem/llm/tokenizer.h"
#include "tandem/llm/vocab.h"

namespace {

// GPT-2's byte -> printable code point map, as UTF-8 pieces.
std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

std::vector<std::string> byte_pieces() {
  std::vector<std::string> pieces(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    pieces[b] = utf8(printable ? b : next++);
  }
  return pieces;
}

const tandem::llm::Tokenizer& bpe() {
  static const tandem::llm::Tokenizer tok = [] {
    tandem::llm::Vocab v;
    v.model = "gpt2";
    v.pre = "smollm";
    v.tokens = byte_pieces();
    const std::string sp = v.tokens[' '];
    v.merges = {"t h", sp + " t", "th e", sp + "t h", "i n", "e r"};
    for (const auto& m : v.merges)
      v.tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
    v.tokens.push_back("<|endoftext|>");
    v.types.assign(v.tokens.size(), tandem::llm::TokenType::kNormal);
    v.types.back() = tandem::llm::TokenType::kControl;
    v.eos_id = static_cast<int32_t>(v.tokens.size() - 1);
    return tandem::llm::Tokenizer(std::move(v));
  }();
  return tok;
}

const tandem::llm::Tokenizer& spm() {
  static const tandem::llm::Tokenizer tok = [] {
    tandem::llm::Vocab v;
    v.model = "llama";
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.types = {tandem::llm::TokenType::kUnknown, tandem::llm::TokenType::kControl,
               tandem::llm::TokenType::kControl};
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      v.tokens.push_back(name);
      v.types.push_back(tandem::llm::TokenType::kByte);
    }
    for (const char* p : {"\xE2\x96\x81", "a", "b", "ab",
                          "\xE2\x96\x81"
                          "a",
                          "e", "t", "th"}) {
      v.tokens.push_back(p);
      v.types.push_back(tandem::llm::TokenType::kNormal);
    }
    v.scores.assign(v.tokens.size(), 0.0f);
    for (size_t i = 259; i < v.scores.size(); ++i) v.scores[i] = -static_cast<float>(i);
    v.unk_id = 0;
    v.bos_id = 1;
    v.eos_id = 2;
    return tandem::llm::Tokenizer(std::move(v));
  }();
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // SentencePiece writes spaces as U+2581, so a literal U+2581 in the input cannot come back
  // unchanged.
  const bool has_spm_space = text.find("\xE2\x96\x81") != std::string::npos;
  for (const auto* tok : {&bpe(), &spm()}) {
    const auto ids = tok->encode(text, /*add_special=*/false, /*parse_special=*/false);
    const std::string back = tok->decode(ids, /*render_special=*/true);
    if (back != text && !(tok == &spm() && has_spm_space))
      throw std::logic_error("tokenizer round trip changed the input");
  }
  return 0;
}
