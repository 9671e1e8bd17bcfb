// SPDX-License-Identifier: Apache-2.0
// parse_json (json.h): nlohmann's SAX parser feeding its DOM builder through a guard that bounds
// the nesting depth and refuses repeated keys.
#include "tandem/core/json.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <vector>

#include "tandem/core/error.h"

namespace tandem {
namespace {

using json = nlohmann::json;

// Forwards every event to the DOM builder after checking depth and keys; throws ParseError.
class GuardedSax {
 public:
  GuardedSax(json& out, const std::string& source, int64_t base_offset)
      : dom_(out, /*allow_exceptions=*/true), source_(source), base_(base_offset) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return dom_.number_float(v, s);
  }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }

  bool start_object(std::size_t n) {
    enter();
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    if (!keys_.back().insert(k).second)
      throw ParseError(source_, -1, cat("duplicate key '", k, "' in one object"));
    return dom_.key(k);
  }
  bool end_object() {
    keys_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    enter();
    return dom_.start_array(n);
  }
  bool end_array() {
    keys_.pop_back();
    return dom_.end_array();
  }

  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& e) {
    // nlohmann counts bytes from 1; ParseError offsets count from 0.
    const int64_t at = base_ + (position > 0 ? static_cast<int64_t>(position) - 1 : 0);
    if (e.id == 406) throw ParseError(source_, at, cat("number out of range: ", last_token));
    // Its message starts with an exception id ("[json.exception.parse_error.101] parse error at
    // line 1, column 5: ...").
    std::string what = e.what();
    if (const size_t p = what.find("parse error at "); p != std::string::npos)
      what = what.substr(p + 15);
    throw ParseError(source_, at, cat("invalid JSON: ", what));
  }

 private:
  void enter() {
    if (static_cast<int>(keys_.size()) >= kMaxJsonDepth)
      throw ParseError(source_, -1, cat("JSON nested deeper than ", kMaxJsonDepth, " levels"));
    keys_.emplace_back();  // an array's set stays empty
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<std::set<std::string>> keys_;  // keys seen in each open object or array
  const std::string& source_;
  int64_t base_;
};

}  // namespace

json parse_json(std::string_view text, const std::string& source, int64_t base_offset) {
  json out;
  GuardedSax sax(out, source, base_offset);
  json::sax_parse(text.begin(), text.end(), &sax);
  return out;
}

std::string read_text_file(const std::string& path, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw IoError(cat("cannot open '", path, "': ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw IoError(cat("'", path, "' is not a regular file"));
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    throw IoError(cat("'", path, "' has ", st.st_size, " bytes, more than the ", max_bytes,
                      " this reader accepts"));
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IoError(cat("cannot open '", path, "': ", std::strerror(errno)));
  std::string text(static_cast<size_t>(st.st_size), '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (f.bad() || f.gcount() != static_cast<std::streamsize>(text.size()))
    throw IoError(cat("error reading '", path, "'"));
  return text;
}

json read_json_file(const std::string& path) { return parse_json(read_text_file(path), path); }

}  // namespace tandem
