// SPDX-License-Identifier: Apache-2.0
// Lenient UTF-8, category lookup and GPT-2's byte map (see unicode.h).
#include "llm/unicode.h"

#include <algorithm>
#include <memory>

namespace tandem::llm::unicode {
namespace {

bool is_white_space_property(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

uint8_t lookup_ranges(uint32_t cp) {
  const CategoryRange* end = kCategoryRanges + kCategoryRangeCount;
  const CategoryRange* it = std::upper_bound(
      kCategoryRanges, end, cp, [](uint32_t c, const CategoryRange& r) { return c < r.first; });
  if (it == kCategoryRanges) return 0;
  --it;
  return cp <= it->last ? it->flags : 0;
}

// Flags of the Basic Multilingual Plane in one flat table (64 KiB), built on first use.
const uint8_t* bmp_table() {
  static const std::unique_ptr<uint8_t[]> table = [] {
    std::unique_ptr<uint8_t[]> t(new uint8_t[0x10000]());
    for (size_t i = 0; i < kCategoryRangeCount; ++i) {
      const CategoryRange& r = kCategoryRanges[i];
      for (uint32_t cp = r.first; cp <= r.last && cp < 0x10000; ++cp) t[cp] = r.flags;
    }
    for (uint32_t cp = 0; cp < 0x10000; ++cp) {
      if (is_white_space_property(cp)) t[cp] |= kWhitespace;
    }
    return t;
  }();
  return table.get();
}

struct ByteMaps {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 324> from_unicode;  // stand-ins are all below U+0144
};

const ByteMaps& byte_maps() {
  static const ByteMaps maps = [] {
    ByteMaps m;
    m.from_unicode.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the others (controls, space, 0x7F-0xA0, 0xAD)
    // are moved to U+0100 and up, in byte order.
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      uint32_t cp = printable ? b : next++;
      m.to_unicode[b].clear();
      append_utf8(cp, m.to_unicode[b]);
      m.from_unicode[cp] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return maps;
}

}  // namespace

uint8_t flags(uint32_t cp) {
  if (cp < 0x10000) return bmp_table()[cp];
  if (cp >= kInvalidBase) return 0;
  return lookup_ranges(cp);
}

void decode_utf8(std::string_view text, std::vector<uint32_t>& cps,
                 std::vector<uint32_t>& offsets) {
  cps.clear();
  offsets.clear();
  cps.reserve(text.size());
  offsets.reserve(text.size() + 1);
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b0 = s[i];
    offsets.push_back(static_cast<uint32_t>(i));
    if (b0 < 0x80) {
      cps.push_back(b0);
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if ((b0 & 0xE0) == 0xC0) {
      len = 2, cp = b0 & 0x1F, min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      len = 3, cp = b0 & 0x0F, min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      len = 4, cp = b0 & 0x07, min = 0x10000;
    }
    bool ok = len != 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) {
        ok = false;
      } else {
        cp = (cp << 6) | (s[i + k] & 0x3F);
      }
    }
    ok = ok && cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      cps.push_back(cp);
      i += len;
    } else {
      cps.push_back(kInvalidBase + b0);
      ++i;
    }
  }
  offsets.push_back(static_cast<uint32_t>(n));
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t incomplete_utf8_tail(std::string_view bytes) {
  const size_t n = bytes.size();
  // Walk back over at most three continuation bytes to the lead byte.
  size_t k = 0;
  while (k < 3 && k < n && (static_cast<uint8_t>(bytes[n - 1 - k]) & 0xC0) == 0x80) ++k;
  if (k == n) return 0;
  const auto lead = static_cast<uint8_t>(bytes[n - 1 - k]);
  size_t len = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2;
  } else if ((lead & 0xF0) == 0xE0) {
    len = 3;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4;
  }
  if (len == 0 || k + 1 >= len) return 0;  // not a lead byte, or the sequence is complete
  if (k >= 1) {                            // the second byte must be in range for the lead
    const auto b1 = static_cast<uint8_t>(bytes[n - k]);
    if ((lead == 0xE0 && b1 < 0xA0) || (lead == 0xED && b1 > 0x9F) || (lead == 0xF0 && b1 < 0x90) ||
        (lead == 0xF4 && b1 > 0x8F)) {
      return 0;
    }
  }
  return k + 1;
}

const std::array<std::string, 256>& byte_to_unicode() { return byte_maps().to_unicode; }

int unicode_to_byte(uint32_t cp) {
  const auto& from = byte_maps().from_unicode;
  return cp < from.size() ? from[cp] : -1;
}

}  // namespace tandem::llm::unicode
