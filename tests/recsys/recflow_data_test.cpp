// SPDX-License-Identifier: Apache-2.0
// Real-format RecFlow requests (recflow_data.h): the converter's output for a tiny made-up day in
// RecFlow's layout (feather + pickled dicts, tests/recsys/data/recflow-tiny.trf, made by
// `bench/recsys/recflow_convert.py fixture` then the converter) reads back to the values the
// fixture generator wrote independently (recflow-tiny-expected.json); its mapping onto the
// RecFlow-schema models; and bad files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/recsys/config.h"
#include "tandem/recsys/recflow_data.h"

namespace tandem::rec {
namespace {

std::string data(const char* name) {
  return (std::filesystem::path(TANDEM_REC_DATA_DIR) / name).string();
}

std::string bytes_of(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

using Item = std::array<int64_t, 5>;

TEST(RecFlowData, ConvertedFixtureHasTheGeneratorsValues) {
  const auto file = read_recflow_requests(data("recflow-tiny.trf"));
  std::ifstream ef(data("recflow-tiny-expected.json"));
  const auto expected = nlohmann::json::parse(ef)["requests"];
  ASSERT_EQ(file.requests.size(), expected.size());
  EXPECT_EQ(file.seq_len, 50);
  EXPECT_EQ(file.header["id_counts"]["user_id"], 500);
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto& r = file.requests[i];
    const auto& e = expected[i];
    SCOPED_TRACE(i);
    EXPECT_EQ(r.request_id, e["request_id"].get<int64_t>());
    EXPECT_EQ(r.timestamp_ms, e["timestamp_ms"].get<int64_t>());
    const auto user = e["user"].get<std::vector<int64_t>>();
    EXPECT_EQ((std::vector<int64_t>{r.user_id, r.device_id, r.age, r.gender, r.province}), user);
    // RecFlow's rows of one request are scattered through the day's file: compare as sets, each
    // candidate with its stage.
    std::vector<std::pair<Item, int>> got, want;
    for (size_t c = 0; c < r.candidates.size(); ++c) got.push_back({r.candidates[c], r.stage[c]});
    for (size_t c = 0; c < e["candidates"].size(); ++c)
      want.push_back({e["candidates"][c].get<Item>(), e["stage"][c].get<int>()});
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want);
    // Behaviours keep their order (oldest first) and lose RecFlow's padding rows.
    EXPECT_EQ(r.behaviours, e["behaviours"].get<std::vector<Item>>());
  }
}

bool same(const RecFlowRequest& a, const RecFlowRequest& b) {
  return a.request_id == b.request_id && a.timestamp_ms == b.timestamp_ms &&
         a.user_id == b.user_id && a.device_id == b.device_id && a.age == b.age &&
         a.gender == b.gender && a.province == b.province && a.candidates == b.candidates &&
         a.stage == b.stage && a.behaviours == b.behaviours;
}

TEST(RecFlowData, WritesAndReadsBackTheSameRequests) {
  const auto file = read_recflow_requests(data("recflow-tiny.trf"));
  const std::string path = testing::TempDir() + "/recflow-again.trf";
  write_recflow_requests(path, file);
  const auto again = read_recflow_requests(path);
  EXPECT_EQ(again.header, file.header);
  ASSERT_EQ(again.requests.size(), file.requests.size());
  for (size_t i = 0; i < file.requests.size(); ++i)
    EXPECT_TRUE(same(again.requests[i], file.requests[i])) << "request " << i;
  // Writing what was read gives the same bytes.
  const std::string bytes = bytes_of(path);
  write_recflow_requests(path, again);
  EXPECT_TRUE(bytes_of(path) == bytes);
}

TEST(RecFlowData, QueriesUseRecFlowsEncodingOnTheSchemaModels) {
  ModelConfig din = zoo_config("recflow-din");
  RecFlowRequest r;
  r.request_id = 9;
  r.timestamp_ms = 1705111200000;  // 2024-01-13 02:00 UTC = 10:00 in UTC+8, a Saturday
  r.user_id = 41;
  r.device_id = 7;
  r.age = 2;
  r.gender = 1;
  r.province = 39;  // + 1 = 40 is past the zoo's 40 provinces: folded to row 0
  r.candidates = {{5, 6, 7, 8, 8}, {10, 11, 12, 13, 1}};
  r.stage = {0, 5};
  r.behaviours = {{100, 101, 1, 2, 3}, {200, 201, 4, 5, 6}};
  int64_t folded = 0;
  const QueryInputs q = recflow_query(r, din, &folded);
  EXPECT_EQ(folded, 1);  // the province (a user field is mapped once per request)
  ASSERT_EQ(q.rows, 2);
  // User tables: uid, did, gender, age, province, weekday, hour, minute.
  const int64_t user[] = {42, 8, 2, 3, 0, 6, 11, 1};
  for (size_t t = 0; t < 8; ++t)
    EXPECT_EQ(q.ids[t], (std::vector<int64_t>{user[t], user[t]})) << "table " << t;
  EXPECT_EQ(q.item_ids[0], (std::vector<int64_t>{6, 11}));
  EXPECT_EQ(q.item_ids[4], (std::vector<int64_t>{9, 2}));
  // Behaviours are left-padded with row 0 to seq_len, the latest last, the same for every row.
  ASSERT_EQ(q.seq_ids[0].size(), size_t(2 * din.seq_len));
  const auto s = static_cast<size_t>(din.seq_len);
  EXPECT_EQ(q.seq_ids[0][0], 0);
  EXPECT_EQ(q.seq_ids[0][s - 2], 101);
  EXPECT_EQ(q.seq_ids[0][s - 1], 201);
  EXPECT_EQ(q.seq_ids[3][2 * s - 1], 6);

  // Every request of the fixture is a valid input of every stage model's schema, tables scaled.
  din.scale_rows(1e-3);
  const auto file = read_recflow_requests(data("recflow-tiny.trf"));
  for (const auto& req : file.requests) {
    const QueryInputs qi = recflow_query(req, din);
    for (size_t k = 0; k < qi.item_ids.size(); ++k) {
      for (int64_t v : qi.item_ids[k]) EXPECT_LT(v, din.item_tables[k].rows);
      for (int64_t v : qi.seq_ids[k]) EXPECT_LT(v, din.item_tables[k].rows);
    }
  }
  EXPECT_THROW(recflow_query(r, zoo_config("tiny-dlrm")), InvalidArgument);
  r.candidates.clear();
  EXPECT_THROW(recflow_query(r, din), InvalidArgument);
}

// Each corruption of the fixture raises ParseError naming what is wrong.
TEST(RecFlowData, BadFilesAreRejectedByField) {
  const std::string good = bytes_of(data("recflow-tiny.trf"));
  uint32_t header_len = 0;
  std::memcpy(&header_len, good.data() + 8, 4);
  const size_t first = 12 + header_len;  // the first request
  auto expect_error = [](const std::string& bytes, const std::string& what) {
    try {
      parse_recflow_requests(bytes, "bad.trf");
      ADD_FAILURE() << "accepted: " << what;
    } catch (const ParseError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  auto with = [&](size_t at, int64_t v, size_t width = 8) {
    std::string b = good;
    std::memcpy(b.data() + at, &v, width);
    return b;
  };
  expect_error("TRFREQ02" + good.substr(8), "not a tandem-recflow-requests file");
  expect_error(good.substr(0, 6), "file ends early");
  expect_error(good.substr(0, good.size() - 3), "file ends early");
  expect_error(good + "x", "bytes after the last");
  expect_error(with(8, 1 << 30, 4), "over the limit");
  expect_error(with(first + 2 * 8, -4), "requests[0].user_id: negative id");
  expect_error(with(first + 56, int64_t(1) << 21, 4), "requests[0].candidates");
  expect_error(with(first + 60, 51, 4), "over the header's seq_len");
  expect_error(with(first + 64 + 5 * 8, 6), "candidate[0].stage: 6 is outside 0..5");
  std::string h = good;
  const auto pos = h.find("\"version\": 1");
  ASSERT_NE(pos, std::string::npos);
  h[pos + 11] = '2';
  expect_error(h, "header.version");
  EXPECT_THROW(read_recflow_requests(data("no-such.trf")), IoError);
}

}  // namespace
}  // namespace tandem::rec
