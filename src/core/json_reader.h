// SPDX-License-Identifier: Apache-2.0
// JsonField: strict, path-tracking access to a parsed JSON document (internal to libtandem).
//
// Every value read through a JsonField knows the source it came from ("cluster.json") and its JSON
// path
// ("devices[1].peak_flops"), so a bad value raises
//   ParseError("cluster.json: devices[1].peak_flops: expected a positive number, got -3").
// Objects are checked against the keys a reader accepts, so a typo is reported by name instead of
// being silently ignored. Used by the cluster, profile and graph readers.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/json.h"

namespace tandem::detail {

class JsonField {
 public:
  JsonField(const nlohmann::json& value, std::string source, std::string path)
      : value_(&value), source_(std::move(source)), path_(std::move(path)) {}

  const nlohmann::json& value() const { return *value_; }
  const std::string& path() const { return path_; }
  const std::string& source() const { return source_; }

  // Throws ParseError "<source>: <path>: <what>".
  [[noreturn]] void fail(const std::string& what) const {
    throw ParseError(source_, -1, path_.empty() ? what : cat(path_, ": ", what));
  }

  // A short rendering of the value for messages ("got -3", "got \"abc\"").
  std::string shown() const {
    std::string s = value_->dump();
    if (s.size() > 48) s = s.substr(0, 45) + "...";
    return s;
  }

  // Checks that this is an object whose keys are all in `allowed`.
  void expect_object(std::initializer_list<const char*> allowed) const {
    if (!value_->is_object()) fail(cat("expected an object, got ", shown()));
    for (auto it = value_->begin(); it != value_->end(); ++it) {
      bool ok = false;
      for (const char* a : allowed) ok = ok || it.key() == a;
      if (!ok) {
        std::string list;
        for (const char* a : allowed) list += list.empty() ? a : cat(", ", a);
        fail(cat("unknown key '", it.key(), "' (allowed: ", list, ")"));
      }
    }
  }

  bool has(const char* key) const { return value_->is_object() && value_->contains(key); }

  // The member `key` (required).
  JsonField at(const char* key) const {
    if (!value_->is_object()) fail(cat("expected an object, got ", shown()));
    auto it = value_->find(key);
    if (it == value_->end()) fail(cat("missing required key '", key, "'"));
    return JsonField(*it, source_, child_path(key));
  }

  size_t array_size() const {
    if (!value_->is_array()) fail(cat("expected an array, got ", shown()));
    return value_->size();
  }
  JsonField operator[](size_t i) const {
    return JsonField((*value_)[i], source_, cat(path_, '[', i, ']'));
  }
  // Members of an object as (key, field) pairs, in the document's (sorted) order.
  std::vector<std::pair<std::string, JsonField>> members() const {
    if (!value_->is_object()) fail(cat("expected an object, got ", shown()));
    std::vector<std::pair<std::string, JsonField>> out;
    for (auto it = value_->begin(); it != value_->end(); ++it)
      out.emplace_back(it.key(), JsonField(*it, source_, child_path(it.key())));
    return out;
  }

  std::string string() const {
    if (!value_->is_string()) fail(cat("expected a string, got ", shown()));
    return value_->get<std::string>();
  }
  std::string non_empty_string() const {
    std::string s = string();
    if (s.empty()) fail("expected a non-empty string");
    return s;
  }
  bool boolean() const {
    if (!value_->is_boolean()) fail(cat("expected true or false, got ", shown()));
    return value_->get<bool>();
  }
  double number() const {
    if (!value_->is_number()) fail(cat("expected a number, got ", shown()));
    const double v = value_->get<double>();
    if (!std::isfinite(v)) fail(cat("expected a finite number, got ", shown()));
    return v;
  }
  double positive_number() const {
    if (!value_->is_number() || !(value_->get<double>() > 0) ||
        !std::isfinite(value_->get<double>()))
      fail(cat("expected a positive number, got ", shown()));
    return value_->get<double>();
  }
  double non_negative_number() const {
    if (!value_->is_number() || !(value_->get<double>() >= 0) ||
        !std::isfinite(value_->get<double>()))
      fail(cat("expected a non-negative number, got ", shown()));
    return value_->get<double>();
  }
  // `v` (read from this field) when it lies in [lo, hi]; otherwise fails naming the range.
  double in_range(double v, double lo, double hi) const {
    if (!(v >= lo && v <= hi)) fail(cat("expected a value in [", lo, ", ", hi, "], got ", shown()));
    return v;
  }
  int64_t integer() const {
    if (!value_->is_number_integer()) fail(cat("expected an integer, got ", shown()));
    if (value_->is_number_unsigned() && value_->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(cat("integer out of range, got ", shown()));
    return value_->get<int64_t>();
  }
  int64_t positive_integer() const {
    if (!value_->is_number_integer() || value_->get<int64_t>() <= 0 ||
        (value_->is_number_unsigned() &&
         value_->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
      fail(cat("expected a positive integer, got ", shown()));
    return value_->get<int64_t>();
  }
  int64_t non_negative_integer() const {
    if (!value_->is_number_integer() || value_->get<int64_t>() < 0 ||
        (value_->is_number_unsigned() &&
         value_->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
      fail(cat("expected a non-negative integer, got ", shown()));
    return value_->get<int64_t>();
  }

 private:
  std::string child_path(const std::string& key) const {
    return path_.empty() ? key : cat(path_, '.', key);
  }

  const nlohmann::json* value_;
  std::string source_;
  std::string path_;
};

// Reads and parses a JSON file through tandem::read_json_file (json.h): IoError naming the path
// when it cannot be read, ParseError when it is not acceptable JSON.
using ::tandem::read_json_file;

// Writes `text` to `path` (truncating); IoError naming the path on failure.
inline void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw IoError(cat("cannot create '", path, "': ", std::strerror(errno)));
  f << text;
  f.close();
  if (!f) throw IoError(cat("error writing '", path, "'"));
}

}  // namespace tandem::detail
