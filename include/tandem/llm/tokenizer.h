// SPDX-License-Identifier: Apache-2.0
// Tokenizer: text <-> token ids for the LLM engine, built from a model file's Vocab (vocab.h).
//
// Two tokenizer models, chosen by Vocab::model:
// - "gpt2": byte-level BPE (GPT-2, LLaMA-3, SmolLM2). The text is cut into words by the regex of
//   the pre-tokenizer named in Vocab::pre ("default"/"gpt2": GPT-2's; "smollm", "starcoder", ...:
//   every digit alone, then GPT-2's; "llama-bpe"/"llama3": LLaMA-3's, with runs of up to 3 digits;
//   "qwen2": LLaMA-3's with single digits). Each word's bytes are mapped to printable stand-ins
//   and merged pair by pair in the order of Vocab::merges (lowest rank first, with a priority
//   queue: O(n log n) per word; words are cached).
// - "llama": SentencePiece BPE (LLaMA-1/2, Mistral, TinyLlama). Spaces become "▁" (one "▁" is
//   prepended when Vocab::add_space_prefix); adjacent pieces merge while their concatenation is a
//   normal token, highest score first; characters left without a token fall back to byte tokens
//   "<0x41>", or to the unknown token when the vocabulary has none.
// Before either model runs, the text is split at special tokens: user-defined tokens always,
// control tokens (e.g. "<|im_start|>") only when parse_special is set; they are matched whole,
// longest first.
//
//   tandem::llm::Tokenizer tok(tandem::llm::load_vocab(gguf));
//   std::vector<int32_t> ids = tok.encode("<|im_start|>user\nHi<|im_end|>\n");
//   std::string text = tok.decode(ids);                     // the same bytes back
//   tandem::llm::Detokenizer stream(tok);                   // streaming: only whole characters
//   for (int32_t id : generated) std::cout << stream.push(id);
//   std::cout << stream.flush();
//
// Decoding returns raw bytes: decode(encode(s)) == s for texts without special tokens, for every
// byte string with byte-level BPE (when its vocab has all 256 bytes) and with byte-fallback
// SentencePiece (whose leading "▁" from add_space_prefix is removed again).
// Differences from the reference implementations: SentencePiece's merging of consecutive unknown
// pieces is not done (each unknown character gives one unknown id); the (?i) contractions of
// LLaMA-3's regex fold ASCII case only. Bad ids raise InvalidArgument.
// Thread-safety: a Tokenizer is immutable after construction apart from an internal word cache
// guarded by a mutex; encode/decode may be called from several threads. A Detokenizer is not
// shared.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/export.h"
#include "tandem/llm/vocab.h"

namespace tandem::llm {

enum class TokenizerModel { kBytePairGpt2, kSentencePiece };

class TANDEM_API Tokenizer {
 public:
  // InvalidArgument when the vocab is inconsistent (sizes, ids out of range, a malformed merge, no
  // byte tokens at all); Unsupported for other models or pre-tokenizers. Merges whose pieces are
  // not tokens are ignored. Bytes without a token (SmolLM2 lacks 21, e.g. 0x04 and 0xF5..0xFF,
  // which never occur in valid UTF-8) become the unknown token when the vocab has one of type
  // kUnknown, and are dropped otherwise, as llama.cpp and HF tokenizers do.
  explicit Tokenizer(Vocab vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // add_special: prepend BOS / append EOS as the vocab asks (Vocab::add_bos, add_eos).
  // parse_special: match control tokens written in the text ("<|im_end|>") as single ids.
  std::vector<int32_t> encode(std::string_view text, bool add_special = true,
                              bool parse_special = true) const;
  // Concatenated token bytes. Control tokens are written as their text when render_special, else
  // skipped. With SentencePiece and add_space_prefix, the first piece's leading space is dropped.
  std::string decode(const std::vector<int32_t>& ids, bool render_special = true) const;
  // The bytes of one token (may be a partial UTF-8 sequence; use Detokenizer for streaming).
  std::string token_to_piece(int32_t id, bool render_special = true) const;
  // The words the pre-tokenizer cuts plain text into (byte-level BPE; for inspection and tests).
  // Unsupported for SentencePiece, which has no pre-tokenizer.
  std::vector<std::string> pre_tokenize(std::string_view text) const;
  // The vocabulary's piece string (byte-level stand-ins, "▁", "<0x0A>") of a token.
  const std::string& piece(int32_t id) const;
  // The id of a piece string, or -1 when there is none.
  int32_t find_piece(std::string_view piece) const;

  int32_t vocab_size() const;
  TokenizerModel model() const;
  int32_t bos_id() const;  // -1 when the vocab has none
  int32_t eos_id() const;
  int32_t unk_id() const;
  int32_t pad_id() const;
  bool add_bos() const;
  bool add_eos() const;
  // End of generation: EOS and end-of-turn control tokens ("<|im_end|>", "<|eot_id|>",
  // "<|endoftext|>", "</s>", "<end_of_turn>", "<|end|>", "<|eom_id|>").
  bool is_eog(int32_t id) const;
  bool is_control(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const;
  const Vocab& vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Streaming decoder: push() returns the text that became complete with this token. Bytes of an
// unfinished UTF-8 sequence are held back until it completes; bytes that can never complete are
// passed through. The concatenation of all push() results and flush() equals decode(all ids).
// It keeps a reference to the tokenizer, which must outlive it (and not be moved meanwhile).
class TANDEM_API Detokenizer {
 public:
  explicit Detokenizer(const Tokenizer& tokenizer, bool render_special = true);
  std::string push(int32_t id);  // InvalidArgument for a bad id (state unchanged)
  std::string flush();           // whatever is held back, then a fresh start
  void reset();

 private:
  const Tokenizer* tokenizer_;
  bool render_special_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace tandem::llm
