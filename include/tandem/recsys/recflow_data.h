// SPDX-License-Identifier: Apache-2.0
// Real RecFlow requests (the recsys spec §2.9) for the multi-stage pipeline, beside the generated
// ones of recflow.h. RecFlow ships Arrow feather tables and pickled Python dicts; neither has a
// system C++ reader here (Debian packages no Arrow C++, and pickle is Python's), so an offline
// converter, bench/recsys/recflow_convert.py, joins a day's `all_stage/*.feather` (the candidates
// of every stage with the user and video fields) with `seq_effective_50_dict/*.pkl` (each
// request's last effective views) into one "tandem-recflow-requests" file, read here.
//
// File (little-endian):
//   8 bytes   "TRFREQ01"
//   u32       n, then n bytes of JSON: {"format": "tandem-recflow-requests", "version": 1,
//             "requests": R, "seq_len": S, "request_fields": [...], "candidate_fields": [...],
//             "behaviour_fields": [...], "id_counts": {...}, "source": "..."}; the field lists
//             must be exactly the ones below (version 1 fixes the layout)
//   R times:  i64 request_id, timestamp_ms, user_id, device_id, age, gender, province
//             u32 candidates C, u32 behaviours B (B <= S)
//             C x i64 video_id, author_id, category_level_one, category_level_two, upload_type,
//                     stage
//             B x i64 video_id, author_id, category_level_one, category_level_two, upload_type
//                     (oldest first; RecFlow's padding rows dropped)
// Ids are RecFlow's raw ids (>= 0). `stage` is how far the candidate went in the funnel: 0 cut at
// pre-rank (prerank_neg), 1 cut at coarse (coarse_neg), 2 cut at rank (rank_neg), 3 cut at re-rank
// (rerank_neg), 4 passed re-rank (rerank_pos), 5 shown (realshow). Every count and id is checked
// against the bytes left and the limits below; a bad file raises ParseError naming the file, the
// request and the field.
//
//   auto file = tandem::rec::read_recflow_requests("day-2024-01-13.trf");
//   int64_t folded = 0;
//   auto q = tandem::rec::recflow_query(file.requests[0], schema, &folded);  // schema: recflow-din
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/export.h"
#include "tandem/recsys/config.h"
#include "tandem/recsys/model.h"

namespace tandem::rec {

inline constexpr int kRecFlowStages = 6;                   // stage values 0..5
inline constexpr int64_t kRecFlowMaxCandidates = 1 << 20;  // per request
inline constexpr int64_t kRecFlowMaxSeqLen = 4096;

struct RecFlowRequest {
  int64_t request_id = 0, timestamp_ms = 0;
  int64_t user_id = 0, device_id = 0, age = 0, gender = 0, province = 0;
  // Per candidate: video_id, author_id, category_level_one, category_level_two, upload_type.
  std::vector<std::array<int64_t, 5>> candidates;
  std::vector<int8_t> stage;                       // per candidate, 0..5 (above)
  std::vector<std::array<int64_t, 5>> behaviours;  // same fields, oldest first
};

struct RecFlowRequestFile {
  int64_t seq_len = 0;
  nlohmann::json header;  // the JSON header as read (id_counts, source, ...)
  std::vector<RecFlowRequest> requests;
};

// Reads and checks a converted file (ParseError naming the file, the request index and the field;
// IoError when it cannot be opened).
TANDEM_API RecFlowRequestFile read_recflow_requests(const std::string& path);
// The same from bytes in memory (`source` names them in errors).
TANDEM_API RecFlowRequestFile parse_recflow_requests(std::string_view bytes,
                                                     const std::string& source);
// Writes `file` (the converter's layout; used by tests and tools that subset a file).
TANDEM_API void write_recflow_requests(const std::string& path, const RecFlowRequestFile& file);

// One request as the inputs of a RecFlow-schema model (the recflow-* zoo models: user tables uid,
// did, gender, age, province, weekday, hour, minute; item tables video, author, category one,
// category two, upload type), one row per candidate, as RecFlow's DIN encodes them: every id + 1
// (row 0 is padding), weekday / hour / minute of the request time in UTC+8 (Kuaishou's zone) + 1,
// behaviours left-padded with row 0 to the schema's seq_len (the most recent kept). An id past its
// table's rows (the zoo models are smaller than RecFlow's id counts, and scaled tables smaller
// still) is folded modulo the rows and counted in *folded. InvalidArgument for a schema of another
// shape (table counts, seq_len 0) or a request without candidates.
TANDEM_API QueryInputs recflow_query(const RecFlowRequest& r, const ModelConfig& schema,
                                     int64_t* folded = nullptr);

}  // namespace tandem::rec
