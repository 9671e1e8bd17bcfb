// SPDX-License-Identifier: Apache-2.0
// The "tandem-recflow-requests" file and its mapping onto RecFlow-schema model inputs
// (recflow_data.h).
#include "tandem/recsys/recflow_data.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "tandem/core/error.h"

namespace tandem::rec {
namespace {

constexpr char kMagic[8] = {'T', 'R', 'F', 'R', 'E', 'Q', '0', '1'};
constexpr uint32_t kMaxHeader = 1 << 20;
const std::vector<std::string> kRequestFields = {
    "request_id", "timestamp_ms", "user_id", "device_id", "age", "gender", "province"};
const std::vector<std::string> kItemFields = {"video_id", "author_id", "category_level_one",
                                              "category_level_two", "upload_type"};
std::vector<std::string> candidate_fields() {
  auto f = kItemFields;
  f.push_back("stage");
  return f;
}

// Bounds-checked little-endian reads over the bytes; errors name the source and where.
class Reader {
 public:
  Reader(std::string_view b, const std::string& source) : b_(b), source_(source) {}
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw ParseError(source_, int64_t(pos_), cat(where, ": ", what));
  }
  void need(size_t n, const std::string& where) const {
    if (b_.size() - pos_ < n)
      fail(where, cat("file ends early: ", n, " bytes needed, ", b_.size() - pos_, " left"));
  }
  template <typename T>
  T get(const std::string& where) {
    need(sizeof(T), where);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string_view bytes(size_t n, const std::string& where) {
    need(n, where);
    auto s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  size_t left() const { return b_.size() - pos_; }

 private:
  std::string_view b_;
  const std::string& source_;
  size_t pos_ = 0;
};

int64_t id_at(Reader& rd, const std::string& where) {
  const auto v = rd.get<int64_t>(where);
  if (v < 0) rd.fail(where, cat("negative id ", v));
  return v;
}

nlohmann::json read_header(Reader& rd) {
  const auto magic = rd.bytes(8, "magic");
  if (std::memcmp(magic.data(), kMagic, 8) != 0)
    rd.fail("magic", "not a tandem-recflow-requests file (expected \"TRFREQ01\")");
  const auto n = rd.get<uint32_t>("header length");
  if (n > kMaxHeader) rd.fail("header length", cat(n, " bytes is over the limit ", kMaxHeader));
  nlohmann::json h = nlohmann::json::parse(rd.bytes(n, "header"), nullptr, false);
  if (!h.is_object()) rd.fail("header", "not a JSON object");
  auto expect = [&](const char* key, const nlohmann::json& want) {
    if (!h.contains(key) || h[key] != want)
      rd.fail(cat("header.", key), cat("expected ", want.dump()));
  };
  expect("format", "tandem-recflow-requests");
  expect("version", 1);
  expect("request_fields", kRequestFields);
  expect("candidate_fields", candidate_fields());
  expect("behaviour_fields", kItemFields);
  for (const char* key : {"requests", "seq_len"})
    if (!h.contains(key) || !h[key].is_number_integer() || h[key].get<int64_t>() < 0)
      rd.fail(cat("header.", key), "expected a non-negative integer");
  if (h["seq_len"].get<int64_t>() > kRecFlowMaxSeqLen)
    rd.fail("header.seq_len", cat("over the limit ", kRecFlowMaxSeqLen));
  return h;
}

std::array<int64_t, 5> item_at(Reader& rd, const std::string& where) {
  std::array<int64_t, 5> a{};
  for (size_t f = 0; f < a.size(); ++f) a[f] = id_at(rd, cat(where, ".", kItemFields[f]));
  return a;
}

RecFlowRequest read_request(Reader& rd, int64_t index, int64_t seq_len) {
  const std::string at = cat("requests[", index, "]");
  RecFlowRequest r;
  r.request_id = id_at(rd, at + ".request_id");
  r.timestamp_ms = id_at(rd, at + ".timestamp_ms");
  int64_t* user[] = {&r.user_id, &r.device_id, &r.age, &r.gender, &r.province};
  for (size_t f = 0; f < 5; ++f) *user[f] = id_at(rd, cat(at, ".", kRequestFields[f + 2]));
  const auto c = rd.get<uint32_t>(at + ".candidates");
  const auto b = rd.get<uint32_t>(at + ".behaviours");
  if (c > kRecFlowMaxCandidates)
    rd.fail(at + ".candidates", cat(c, " is over the limit ", kRecFlowMaxCandidates));
  if (b > seq_len) rd.fail(at + ".behaviours", cat(b, " is over the header's seq_len ", seq_len));
  // Every row is at least 40 bytes: check the count against what is left before reserving.
  rd.need(size_t(c) * 48 + size_t(b) * 40, at + " rows");
  r.candidates.reserve(c);
  r.stage.reserve(c);
  for (uint32_t i = 0; i < c; ++i) {
    const std::string where = cat(at, ".candidate[", i, "]");
    r.candidates.push_back(item_at(rd, where));
    const auto s = rd.get<int64_t>(where + ".stage");
    if (s < 0 || s >= kRecFlowStages)
      rd.fail(where + ".stage", cat(s, " is outside 0..", kRecFlowStages - 1));
    r.stage.push_back(static_cast<int8_t>(s));
  }
  r.behaviours.reserve(b);
  for (uint32_t i = 0; i < b; ++i)
    r.behaviours.push_back(item_at(rd, cat(at, ".behaviour[", i, "]")));
  return r;
}

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Weekday (1 = Monday .. 7), hour (0..23) and minute (0..59) of a Unix time in ms at UTC+8.
std::array<int64_t, 3> local_time_fields(int64_t ms) {
  const int64_t s = ms / 1000 + 8 * 3600;
  const int64_t days = s >= 0 ? s / 86400 : (s - 86399) / 86400;
  const int64_t sod = s - days * 86400;
  const int64_t wday = ((days % 7) + 7 + 3) % 7 + 1;  // 1970-01-01 was a Thursday
  return {wday, sod / 3600, (sod / 60) % 60};
}

}  // namespace

RecFlowRequestFile parse_recflow_requests(std::string_view bytes, const std::string& source) {
  Reader rd(bytes, source);
  RecFlowRequestFile f;
  f.header = read_header(rd);
  f.seq_len = f.header["seq_len"].get<int64_t>();
  const int64_t n = f.header["requests"].get<int64_t>();
  // The smallest request is 64 bytes: a count past that is a corrupt header, not a huge reserve.
  if (uint64_t(n) > rd.left() / 64)
    rd.fail("header.requests", cat(n, " requests cannot fit in the ", rd.left(), " bytes left"));
  f.requests.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) f.requests.push_back(read_request(rd, i, f.seq_len));
  if (rd.left() != 0) rd.fail("end", cat(rd.left(), " bytes after the last of ", n, " requests"));
  return f;
}

RecFlowRequestFile read_recflow_requests(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(cat("cannot open '", path, "': ", std::strerror(errno)));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw IoError(cat("error reading '", path, "'"));
  return parse_recflow_requests(bytes, path);
}

void write_recflow_requests(const std::string& path, const RecFlowRequestFile& file) {
  nlohmann::json h = file.header.is_object() ? file.header : nlohmann::json::object();
  h["format"] = "tandem-recflow-requests";
  h["version"] = 1;
  h["requests"] = file.requests.size();
  h["seq_len"] = file.seq_len;
  h["request_fields"] = kRequestFields;
  h["candidate_fields"] = candidate_fields();
  h["behaviour_fields"] = kItemFields;
  const std::string hs = h.dump();
  std::string out(kMagic, 8);
  put(out, static_cast<uint32_t>(hs.size()));
  out += hs;
  for (const auto& r : file.requests) {
    for (int64_t v :
         {r.request_id, r.timestamp_ms, r.user_id, r.device_id, r.age, r.gender, r.province})
      put(out, v);
    put(out, static_cast<uint32_t>(r.candidates.size()));
    put(out, static_cast<uint32_t>(r.behaviours.size()));
    for (size_t i = 0; i < r.candidates.size(); ++i) {
      for (int64_t v : r.candidates[i]) put(out, v);
      put(out, static_cast<int64_t>(r.stage.at(i)));
    }
    for (const auto& b : r.behaviours)
      for (int64_t v : b) put(out, v);
  }
  std::ofstream f(path, std::ios::binary);
  if (!f) throw IoError(cat("cannot create '", path, "': ", std::strerror(errno)));
  f.write(out.data(), std::streamsize(out.size()));
  if (!f) throw IoError(cat("error writing '", path, "'"));
}

QueryInputs recflow_query(const RecFlowRequest& r, const ModelConfig& schema, int64_t* folded) {
  if (schema.tables.size() != 8 || schema.item_tables.size() != 5 || schema.seq_len <= 0)
    throw InvalidArgument(cat("model '", schema.name,
                              "' does not have RecFlow's schema (8 user tables, 5 item tables, a "
                              "behaviour sequence); use a recflow-* zoo model"));
  if (r.candidates.empty())
    throw InvalidArgument(cat("RecFlow request ", r.request_id, " has no candidates"));
  int64_t fold_count = 0;
  auto row = [&](int64_t id, int64_t rows) {
    const int64_t v = id + 1;
    if (v < rows) return v;
    ++fold_count;
    return v % rows;
  };
  const auto [wday, hour, minute] = local_time_fields(r.timestamp_ms);
  const int64_t user[8] = {r.user_id,  r.device_id, r.gender, r.age,
                           r.province, wday - 1,    hour,     minute};
  const auto n = static_cast<int64_t>(r.candidates.size());
  QueryInputs q;
  q.rows = n;
  q.dense.assign(size_t(n * schema.dense_features), 0.0f);
  for (size_t t = 0; t < 8; ++t) {
    const TableConfig& tc = schema.tables[t];
    const int64_t id = row(user[t], tc.rows);
    std::vector<int64_t> ids, offsets{0};
    for (int64_t i = 0; i < n; ++i) {
      ids.insert(ids.end(), size_t(tc.pooling), id);
      offsets.push_back(static_cast<int64_t>(ids.size()));
    }
    q.ids.push_back(std::move(ids));
    q.offsets.push_back(std::move(offsets));
  }
  const auto s = static_cast<size_t>(schema.seq_len);
  const size_t kept = std::min(s, r.behaviours.size());
  for (size_t k = 0; k < 5; ++k) {
    const int64_t rows = schema.item_tables[k].rows;
    std::vector<int64_t> items, seq(s, 0);
    for (const auto& c : r.candidates) items.push_back(row(c[k], rows));
    for (size_t i = 0; i < kept; ++i)
      seq[s - kept + i] = row(r.behaviours[r.behaviours.size() - kept + i][k], rows);
    std::vector<int64_t> behaviours;
    behaviours.reserve(size_t(n) * s);
    for (int64_t i = 0; i < n; ++i) behaviours.insert(behaviours.end(), seq.begin(), seq.end());
    q.item_ids.push_back(std::move(items));
    q.seq_ids.push_back(std::move(behaviours));
  }
  if (folded) *folded += fold_count;
  return q;
}

}  // namespace tandem::rec
