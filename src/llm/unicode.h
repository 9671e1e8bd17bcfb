// SPDX-License-Identifier: Apache-2.0
// Unicode helpers for the tokenizers, without ICU: lenient UTF-8 decoding (every byte of a
// malformed sequence becomes its own pseudo code point, so arbitrary bytes survive a round trip),
// the general categories the pre-tokenizer regexes ask about (\p{L}, \p{N}, \s), and GPT-2's byte
// <-> unicode map.
//
// The category table (unicode_table.cpp) is generated from Python's unicodedata (Unicode 14.0) by
// `scripts/ref/tokenizer_reference.py unicode-table`; whitespace is the Unicode White_Space
// property. Thread-safety: every function is pure or reads tables that are built once (thread-safe
// statics).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::llm::unicode {

// Category bits returned by flags().
inline constexpr uint8_t kLetter = 1;      // general category L*
inline constexpr uint8_t kNumber = 2;      // general category N*
inline constexpr uint8_t kWhitespace = 4;  // White_Space property

// Pseudo code points for the bytes of malformed UTF-8: kInvalidBase + byte. They have no category.
inline constexpr uint32_t kInvalidBase = 0x110000;

uint8_t flags(uint32_t cp);
inline bool is_letter(uint32_t cp) { return (flags(cp) & kLetter) != 0; }
inline bool is_number(uint32_t cp) { return (flags(cp) & kNumber) != 0; }
inline bool is_whitespace(uint32_t cp) { return (flags(cp) & kWhitespace) != 0; }

// Decodes `text` leniently into code points; offsets[i] is the byte offset of cps[i] and
// offsets.back() == text.size() (offsets has one more entry than cps). Well-formed means: shortest
// form, no surrogates, at most U+10FFFF.
void decode_utf8(std::string_view text, std::vector<uint32_t>& cps, std::vector<uint32_t>& offsets);

// Appends the UTF-8 form of a scalar value (cp < 0x110000, not a surrogate).
void append_utf8(uint32_t cp, std::string& out);

// Number of bytes at the end of `bytes` that start a well-formed multi-byte sequence which is not
// complete yet (0..3): what a streaming decoder must hold back until more bytes arrive.
size_t incomplete_utf8_tail(std::string_view bytes);

// GPT-2 byte-level map: byte -> the UTF-8 of its printable stand-in character (e.g. ' ' -> "Ġ").
const std::array<std::string, 256>& byte_to_unicode();
// Inverse map: stand-in code point -> byte, or -1 when cp stands for no byte.
int unicode_to_byte(uint32_t cp);

// Generated table: sorted, disjoint ranges [first, last] with their category bits.
struct CategoryRange {
  uint32_t first;
  uint32_t last;
  uint8_t flags;
};
extern const CategoryRange kCategoryRanges[];
extern const size_t kCategoryRangeCount;

}  // namespace tandem::llm::unicode
