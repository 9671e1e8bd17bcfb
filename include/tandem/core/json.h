// SPDX-License-Identifier: Apache-2.0
// Reading JSON from outside. Every JSON document tandem reads (cluster, profile, plan, graph,
// calibration, recommender zoo, safetensors header, worker message metadata) goes through
// parse_json, so the same rules hold everywhere:
//   - nesting deeper than kMaxJsonDepth is refused before it is built (a deep document would
//     otherwise overflow the stack when it is destroyed);
//   - a key repeated within one object is refused (the last one would silently win);
//   - every malformation, including a number outside double's range (1e999), is a ParseError
//     naming the source and, where known, the byte offset.
//
//   nlohmann::json j = tandem::read_json_file("cluster.json");   // IoError / ParseError
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "tandem/export.h"

namespace tandem {

inline constexpr int kMaxJsonDepth = 64;  // objects and arrays, nested
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t{256} << 20;

// Parses `text`; errors name `source`. `base_offset` is added to reported byte offsets (for JSON
// embedded in a larger file).
TANDEM_API nlohmann::json parse_json(std::string_view text, const std::string& source,
                                     int64_t base_offset = 0);

// The whole of a regular file of at most `max_bytes`: IoError naming the path when it cannot be
// opened, is not a regular file (a directory, /dev/zero, a FIFO) or is larger.
TANDEM_API std::string read_text_file(const std::string& path,
                                      uint64_t max_bytes = kMaxJsonFileBytes);

// read_text_file + parse_json, the source being the path.
TANDEM_API nlohmann::json read_json_file(const std::string& path);

}  // namespace tandem
