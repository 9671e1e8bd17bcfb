// SPDX-License-Identifier: Apache-2.0
// Recommendation-model configurations: what a DLRM, Wide&Deep, DIN, BST, SASRec or DSSM model looks
// like (MLP
// widths, embedding tables, interaction, behaviour sequence), read from JSON with strict checks.
//
// The model zoo (configs/recsys/zoo.json, also compiled into the library) holds the DeepRecSys /
// MLPerf-style sizes of the recsys spec (RM1, RM2, RM3, WnD, DIN, BST, a DLRM benchmark) plus tiny
// variants for tests. A config is one JSON object:
//
//   {"kind": "dlrm", "dense_features": 13, "bottom_mlp": [64, 16], "top_mlp": [64, 1],
//    "embedding_dim": 16, "pooling": 20, "interaction": "dot",
//    "tables": [{"rows": 100000, "count": 8}]}
//
//   auto cfg = tandem::rec::zoo_config("rm2");               // or load_model_config("my.json")
//   cfg.scale_rows(1.0 / 16);                                // fit a small machine
//
// Every field is documented in docs/recsys.md. Unknown keys, wrong types, impossible shapes (a dot
// interaction whose bottom MLP does not end at the embedding width, a top MLP that does not end at
// 1) raise ParseError naming the source and the JSON path ("zoo.json: models.rm1.tables[0].rows:
// expected a positive integer, got 0"). Thread-safety: configs are plain values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/core/dtype.h"
#include "tandem/export.h"

namespace tandem::rec {

// One value per architecture; each is implemented by one entry of the library's architecture
// registry (src/recsys/architecture.h), found by its to_string name.
enum class ModelKind { kDlrm, kWnd, kDin, kBst, kSasrec, kDssm };
enum class Interaction { kDot, kCat };
enum class Pooling { kSum, kMean };

TANDEM_API const char* to_string(ModelKind k);    // "dlrm", "wnd", "din", "bst", "sasrec", "dssm"
TANDEM_API const char* to_string(Interaction i);  // "dot", "cat"
TANDEM_API const char* to_string(Pooling p);      // "sum", "mean"

// One embedding table (one sparse feature).
struct TableConfig {
  std::string name;     // "emb.3", "user.0", "item.1" (assigned by the parser)
  int64_t rows = 0;     // rows after scaling
  int64_t dim = 0;      // embedding width
  int64_t pooling = 1;  // ids per row (bag size) for pooled tables; 1 for item tables
  bool hash = false;    // raw ids are hashed to rows (else ids must lie in [0, rows))
};

struct TANDEM_API ModelConfig {
  std::string name;
  ModelKind kind = ModelKind::kDlrm;
  int64_t dense_features = 0;       // width of the dense input (0 = none)
  std::vector<int64_t> bottom_mlp;  // widths of the layers applied to the dense input
  std::vector<int64_t> top_mlp;     // widths of the layers after the interaction; last is 1
  std::vector<TableConfig> tables;  // pooled tables (DLRM/WnD sparse features; DIN/BST user side)
  Interaction interaction = Interaction::kCat;  // DLRM only
  Pooling pooling_mode = Pooling::kSum;
  DType table_dtype = DType::kF32;  // f32, f16 or i8 (row-wise uint8 codes with scale and bias)
  // Sequence models (DIN, BST): the candidate item and the behaviour sequence are looked up in the
  // same item tables; an item's embedding is the concatenation over them.
  std::vector<TableConfig> item_tables;
  int64_t seq_len = 0;                 // behaviours per query row
  std::vector<int64_t> attention_mlp;  // DIN: hidden widths of the attention unit (output 1 added)
  int64_t heads = 0;                   // BST, SASRec: attention heads (item width % heads == 0)
  int64_t ffn_dim = 0;                 // BST, SASRec: feed-forward hidden width
  std::vector<int64_t> tower_mlp;      // DSSM: widths of the user tower and of the item tower
  int64_t query_size = 128;            // default candidates per query
  uint64_t seed = 1;                   // weight generator seed
  std::string description;

  int64_t item_dim() const;  // sum of item table widths
  // Multiplies every table's rows by `factor` (at least 1 row each); used to fit zoo sizes.
  void scale_rows(double factor);
  // Total table bytes in table_dtype.
  int64_t table_bytes() const;
  // Scales rows down (never up) so that table_bytes() <= budget_bytes; returns the factor used.
  double fit_tables(int64_t budget_bytes);
  nlohmann::json to_json() const;
};

// Parses one model object. `source` names the file and `path` the JSON path of `j` in messages.
TANDEM_API ModelConfig parse_model_config(const nlohmann::json& j, const std::string& name,
                                          const std::string& source = "config",
                                          const std::string& path = "");
// A file holding one model object, or a zoo ({"models": {...}}) with exactly one model.
TANDEM_API ModelConfig load_model_config(const std::string& path);
// The zoo document compiled into the library (the same text as configs/recsys/zoo.json).
TANDEM_API const std::string& builtin_zoo_json();
// Names in the built-in zoo, sorted.
TANDEM_API std::vector<std::string> zoo_names();
// A model of the built-in zoo, or (when `name_or_path` is an existing file) load_model_config.
// Throws NotFound listing the zoo's names.
TANDEM_API ModelConfig zoo_config(const std::string& name_or_path);
// Parses a zoo document ({"models": {"name": {...}, ...}}) into configs.
TANDEM_API std::vector<ModelConfig> parse_zoo(const nlohmann::json& j, const std::string& source);

}  // namespace tandem::rec
