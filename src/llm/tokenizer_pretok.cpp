// SPDX-License-Identifier: Apache-2.0
// Pre-tokenizers: the regexes of GPT-2, LLaMA-3 and Qwen2 (and the digit split of SmolLM) written
// as hand-made scanners over code points. Each alternative of a regex is tried in order at the
// current position, as a backtracking regex engine would, and the first that matches gives the next
// word.
#include <algorithm>
#include <string>

#include "llm/tokenizer_internal.h"
#include "llm/unicode.h"
#include "tandem/core/error.h"

namespace tandem::llm::detail {
namespace {

using unicode::kLetter;
using unicode::kNumber;
using unicode::kWhitespace;

// The text as code points with their category bits; ranges are in code point indices.
class Scanner {
 public:
  Scanner(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>& words)
      : words_(words) {
    unicode::decode_utf8(text, cps_, offsets_);
    flags_.resize(cps_.size());
    for (size_t i = 0; i < cps_.size(); ++i) flags_[i] = unicode::flags(cps_[i]);
  }

  size_t size() const { return cps_.size(); }
  bool letter(size_t i) const { return flags_[i] & kLetter; }
  bool number(size_t i) const { return flags_[i] & kNumber; }
  bool space(size_t i) const { return flags_[i] & kWhitespace; }
  bool other(size_t i) const { return flags_[i] == 0; }  // [^\s\p{L}\p{N}]
  bool newline(size_t i) const { return cps_[i] == '\r' || cps_[i] == '\n'; }
  uint32_t cp(size_t i) const { return cps_[i]; }

  void emit(size_t begin, size_t end) { words_.emplace_back(offsets_[begin], offsets_[end]); }

  // Length of a contraction ('s 't 're 've 'm 'll 'd) at i, or 0. ASCII case folding when asked.
  size_t contraction(size_t i, size_t end, bool fold_case) const {
    if (cps_[i] != '\'' || i + 1 >= end) return 0;
    auto lower = [&](size_t k) {
      uint32_t c = cps_[k];
      return (fold_case && c >= 'A' && c <= 'Z') ? c + 32 : c;
    };
    const uint32_t c1 = lower(i + 1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (i + 2 >= end) return 0;
    const uint32_t c2 = lower(i + 2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
  }

  // \s+(?!\S)|\s+ at i (cps_[i] is whitespace): the run, less its last character when a
  // non-space follows and the run is longer than one.
  size_t whitespace_run(size_t i, size_t end) const {
    size_t k = i;
    while (k < end && space(k)) ++k;
    if (k < end && k - i > 1) --k;
    return k;
  }

  void split_gpt2(size_t begin, size_t end) {
    size_t i = begin;
    while (i < end) {
      if (size_t n = contraction(i, end, false)) {
        emit(i, i + n);
        i += n;
        continue;
      }
      const size_t j = (cps_[i] == ' ') ? i + 1 : i;  // the optional leading space
      size_t k = j;
      if (j < end && letter(j)) {
        while (k < end && letter(k)) ++k;
      } else if (j < end && number(j)) {
        while (k < end && number(k)) ++k;
      } else if (j < end && other(j)) {
        while (k < end && other(k)) ++k;
      } else {
        k = whitespace_run(i, end);
      }
      emit(i, k);
      i = k;
    }
  }

  void split_llama3(size_t begin, size_t end, size_t max_digits) {
    size_t i = begin;
    while (i < end) {
      if (size_t n = contraction(i, end, true)) {
        emit(i, i + n);
        i += n;
        continue;
      }
      size_t k = i;
      if (letter(i) || (!newline(i) && !number(i) && i + 1 < end && letter(i + 1))) {
        // [^\r\n\p{L}\p{N}]?\p{L}+
        k = i + 1;
        while (k < end && letter(k)) ++k;
      } else if (number(i)) {  // \p{N}{1,max}
        while (k < end && number(k) && k - i < max_digits) ++k;
      } else if (size_t j = (cps_[i] == ' ') ? i + 1 : i; j < end && other(j)) {
        // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
        k = j;
        while (k < end && other(k)) ++k;
        while (k < end && newline(k)) ++k;
      } else if (space(i)) {
        // \s*[\r\n]+ ends after the run's last newline; else \s+(?!\S)|\s+
        size_t run_end = i, after_newline = 0;
        while (run_end < end && space(run_end)) {
          if (newline(run_end)) after_newline = run_end + 1;
          ++run_end;
        }
        k = after_newline != 0 ? after_newline : whitespace_run(i, end);
      } else {
        k = i + 1;  // not reachable: every code point is a letter, number, space or other
      }
      emit(i, k);
      i = k;
    }
  }

  void split_digits_then_gpt2(size_t begin, size_t end) {
    size_t start = begin;
    for (size_t i = begin; i < end; ++i) {
      if (!number(i)) continue;
      if (start < i) split_gpt2(start, i);
      emit(i, i + 1);
      start = i + 1;
    }
    if (start < end) split_gpt2(start, end);
  }

 private:
  std::vector<uint32_t> cps_;
  std::vector<uint32_t> offsets_;
  std::vector<uint8_t> flags_;
  std::vector<std::pair<uint32_t, uint32_t>>& words_;
};

}  // namespace

PreTokenizerKind pre_tokenizer_kind(const std::string& name) {
  static const char* const kGpt2Names[] = {"", "default", "gpt2", "gpt-2"};
  static const char* const kDigitNames[] = {"smollm",    "starcoder", "refact", "command-r",
                                            "codeshell", "exaone",    "minerva"};
  static const char* const kLlama3Names[] = {"llama3", "llama-bpe", "llama-v3", "smaug-bpe",
                                             "dbrx"};
  static const char* const kQwen2Names[] = {"qwen2", "deepseek-r1-qwen"};
  auto in = [&](const auto& names) {
    return std::find(std::begin(names), std::end(names), name) != std::end(names);
  };
  if (in(kGpt2Names)) return PreTokenizerKind::kGpt2;
  if (in(kDigitNames)) return PreTokenizerKind::kDigitsThenGpt2;
  if (in(kLlama3Names)) return PreTokenizerKind::kLlama3;
  if (in(kQwen2Names)) return PreTokenizerKind::kQwen2;
  throw Unsupported(cat("tokenizer: pre-tokenizer '", name,
                        "' (tokenizer.ggml.pre) is not supported; known: default, gpt2, smollm, "
                        "starcoder, refact, command-r, codeshell, exaone, minerva, llama3, "
                        "llama-bpe, smaug-bpe, dbrx, qwen2"));
}

void pre_tokenize(PreTokenizerKind kind, std::string_view text,
                  std::vector<std::pair<uint32_t, uint32_t>>& words) {
  if (text.empty()) return;
  Scanner scanner(text, words);
  const size_t n = scanner.size();
  switch (kind) {
    case PreTokenizerKind::kGpt2:
      scanner.split_gpt2(0, n);
      break;
    case PreTokenizerKind::kDigitsThenGpt2:
      scanner.split_digits_then_gpt2(0, n);
      break;
    case PreTokenizerKind::kLlama3:
      scanner.split_llama3(0, n, 3);
      break;
    case PreTokenizerKind::kQwen2:
      scanner.split_llama3(0, n, 1);
      break;
  }
}

}  // namespace tandem::llm::detail
