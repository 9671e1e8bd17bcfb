// SPDX-License-Identifier: Apache-2.0
// Strict JSON reader of recommendation-model configurations and the built-in zoo.
#include "tandem/recsys/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/json_reader.h"
#include "recsys/architecture.h"
#include "tandem/core/error.h"

namespace tandem::rec {

using detail::JsonField;

const char* to_string(ModelKind k) {
  switch (k) {
    case ModelKind::kDlrm:
      return "dlrm";
    case ModelKind::kWnd:
      return "wnd";
    case ModelKind::kDin:
      return "din";
    case ModelKind::kBst:
      return "bst";
    case ModelKind::kSasrec:
      return "sasrec";
    case ModelKind::kDssm:
      return "dssm";
  }
  return "?";
}
const char* to_string(Interaction i) { return i == Interaction::kDot ? "dot" : "cat"; }
const char* to_string(Pooling p) { return p == Pooling::kSum ? "sum" : "mean"; }

int64_t ModelConfig::item_dim() const {
  int64_t d = 0;
  for (const auto& t : item_tables) d += t.dim;
  return d;
}

namespace {

constexpr int64_t kMaxRows = int64_t{1} << 40;
// All tables of a model together, in their widest row layout (f32, or i8's dim + 8): far above any
// real model (RM1 is 4 GiB) and far from int64 overflow in table_bytes().
constexpr int64_t kMaxTableBytes = int64_t{1} << 50;

// The bytes of `tables` with `rows(t)` rows each in the widest layout, stopping once past
// kMaxTableBytes (each term is at most 2^40 rows x 2^18 bytes, so the sum never overflows).
template <class Rows>
int64_t widest_table_bytes(const std::vector<TableConfig>& tables, Rows rows) {
  int64_t b = 0;
  for (const auto& t : tables) {
    if (b > kMaxTableBytes) break;
    b += rows(t) * std::max(4 * t.dim, t.dim + 8);
  }
  return b;
}

}  // namespace

void ModelConfig::scale_rows(double factor) {
  if (!(factor > 0) || !std::isfinite(factor))
    throw InvalidArgument(cat("scale_rows(", factor, "): need a positive factor"));
  auto scaled = [&](const TableConfig& t) {
    const double r = std::round(static_cast<double>(t.rows) * factor);
    if (r > static_cast<double>(kMaxRows))
      throw InvalidArgument(cat("scale_rows(", factor, "): table ", t.name, " would have ", r,
                                " rows (at most 2^40)"));
    return std::max<int64_t>(1, static_cast<int64_t>(r));
  };
  if (widest_table_bytes(tables, scaled) + widest_table_bytes(item_tables, scaled) > kMaxTableBytes)
    throw InvalidArgument(
        cat("scale_rows(", factor, "): the tables would exceed 2^50 bytes (1 PiB)"));
  for (auto* ts : {&tables, &item_tables})
    for (auto& t : *ts) t.rows = scaled(t);
}

int64_t ModelConfig::table_bytes() const {
  int64_t b = 0;
  auto row = [&](int64_t dim) {
    return table_dtype == DType::kI8 ? dim + 8 : dim * dtype_block_bytes(table_dtype);
  };
  for (const auto& t : tables) b += t.rows * row(t.dim);
  for (const auto& t : item_tables) b += t.rows * row(t.dim);
  return b;
}

double ModelConfig::fit_tables(int64_t budget_bytes) {
  if (budget_bytes <= 0) throw InvalidArgument(cat("fit_tables: budget ", budget_bytes, " bytes"));
  const int64_t b = table_bytes();
  if (b <= budget_bytes) return 1.0;
  const double f = double(budget_bytes) / double(b);
  scale_rows(f);
  return f;
}

nlohmann::json tables_json(const std::vector<TableConfig>& tables) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& t : tables)
    a.push_back({{"rows", t.rows}, {"dim", t.dim}, {"pooling", t.pooling}, {"hash", t.hash}});
  return a;
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json j = {{"kind", to_string(kind)},
                      {"dense_features", dense_features},
                      {"bottom_mlp", bottom_mlp},
                      {"top_mlp", top_mlp},
                      {"tables", tables_json(tables)},
                      {"pooling_mode", to_string(pooling_mode)},
                      {"table_dtype", std::string(dtype_name(table_dtype))},
                      {"query_size", query_size},
                      {"seed", seed}};
  if (!description.empty()) j["description"] = description;
  architecture(kind).write(*this, j);
  return j;
}

// A positive integer no larger than `max` (keeps sizes far from int64 overflow).
int64_t bounded(const JsonField& f, int64_t max) {
  const int64_t v = f.positive_integer();
  if (v > max) f.fail(cat("at most ", max, ", got ", v));
  return v;
}

std::vector<int64_t> widths(const JsonField& f) {
  std::vector<int64_t> out;
  const size_t n = f.array_size();
  if (n > 64) f.fail(cat("at most 64 layers, got ", n));
  for (size_t i = 0; i < n; ++i) out.push_back(bounded(f[i], kMaxWidth));
  return out;
}

std::vector<TableConfig> parse_tables(const JsonField& f, const std::string& prefix,
                                      int64_t default_dim, int64_t default_pooling) {
  std::vector<TableConfig> out;
  const size_t n = f.array_size();
  for (size_t i = 0; i < n; ++i) {
    const JsonField e = f[i];
    e.expect_object({"rows", "count", "dim", "pooling", "hash"});
    TableConfig t;
    t.rows = bounded(e.at("rows"), kMaxRows);
    t.dim = e.has("dim") ? bounded(e.at("dim"), 65536) : default_dim;
    t.pooling = e.has("pooling") ? bounded(e.at("pooling"), 65536) : default_pooling;
    t.hash = e.has("hash") ? e.at("hash").boolean() : false;
    if (t.dim <= 0) e.fail("no 'dim' and no model 'embedding_dim'");
    const int64_t count = e.has("count") ? e.at("count").positive_integer() : 1;
    if (count > 4096) e.at("count").fail(cat("at most 4096 tables, got ", count));
    for (int64_t c = 0; c < count; ++c) {
      t.name = cat(prefix, '.', out.size());
      out.push_back(t);
    }
  }
  return out;
}

namespace {

// The architecture named by the "kind" key (ParseError listing the registered ones).
std::shared_ptr<const Architecture> read_kind(const JsonField& kind) {
  const std::string k = kind.string();
  if (!architectures().contains(k)) {
    std::string list;
    for (const auto& n : architectures().names()) list += list.empty() ? n : ", " + n;
    kind.fail(cat("unknown model kind '", k, "' (", list, ")"));
  }
  return architectures().get(k);
}

// Fails on a key of kKindKeys that `arch` does not accept, naming the architectures that do.
void check_kind_keys(const JsonField& f, const Architecture& arch) {
  for (const std::string& key : kKindKeys) {
    if (!f.has(key.c_str())) continue;
    if (std::find(arch.keys.begin(), arch.keys.end(), key) != arch.keys.end()) continue;
    std::vector<std::pair<ModelKind, std::string>> owners;
    for (const auto& [name, a] : architectures().entries())
      if (std::find(a->keys.begin(), a->keys.end(), key) != a->keys.end())
        owners.emplace_back(a->kind, a->title);
    std::sort(owners.begin(), owners.end());
    std::string who;
    for (size_t i = 0; i < owners.size(); ++i)
      who += (i == 0 ? "" : i + 1 == owners.size() ? " and " : ", ") + owners[i].second;
    f.at(key.c_str()).fail(cat("only ", who, " models have '", key, "'"));
  }
}

}  // namespace

ModelConfig parse_model_config(const nlohmann::json& j, const std::string& name,
                               const std::string& source, const std::string& path) {
  const JsonField f(j, source, path);
  f.expect_object({"kind", "description", "dense_features", "bottom_mlp", "top_mlp",
                   "embedding_dim", "pooling", "pooling_mode", "interaction", "tables",
                   "item_tables", "seq_len", "attention_mlp", "heads", "ffn_dim", "tower_mlp",
                   "query_size", "seed", "table_dtype"});
  ModelConfig c;
  c.name = name;
  const std::shared_ptr<const Architecture> arch = read_kind(f.at("kind"));
  c.kind = arch->kind;
  if (f.has("description")) c.description = f.at("description").string();
  if (f.has("dense_features")) {
    c.dense_features = f.at("dense_features").non_negative_integer();
    if (c.dense_features > kMaxWidth) f.at("dense_features").fail(cat("at most ", kMaxWidth));
  }
  if (f.has("bottom_mlp")) c.bottom_mlp = widths(f.at("bottom_mlp"));
  c.top_mlp = widths(f.at("top_mlp"));
  if (c.top_mlp.empty() || c.top_mlp.back() != 1)
    f.at("top_mlp").fail("the top MLP must end with a layer of width 1");
  const int64_t dim = f.has("embedding_dim") ? bounded(f.at("embedding_dim"), 65536) : 0;
  const int64_t pooling = f.has("pooling") ? bounded(f.at("pooling"), 65536) : 1;
  if (f.has("pooling_mode")) {
    const JsonField pm = f.at("pooling_mode");
    const std::string s = pm.string();
    if (s == "sum")
      c.pooling_mode = Pooling::kSum;
    else if (s == "mean")
      c.pooling_mode = Pooling::kMean;
    else
      pm.fail(cat("unknown pooling mode '", s, "' (sum, mean)"));
  }
  if (f.has("table_dtype")) {
    const JsonField td = f.at("table_dtype");
    const std::string s = td.string();
    if (s == "f32")
      c.table_dtype = DType::kF32;
    else if (s == "f16")
      c.table_dtype = DType::kF16;
    else if (s == "i8")
      c.table_dtype = DType::kI8;
    else
      td.fail(cat("unsupported table dtype '", s, "' (f32, f16, i8)"));
  }
  c.tables = parse_tables(f.at("tables"), arch->sequence ? "user" : "emb", dim, pooling);
  if (f.has("query_size")) c.query_size = bounded(f.at("query_size"), int64_t{1} << 24);
  if (f.has("seed")) c.seed = static_cast<uint64_t>(f.at("seed").non_negative_integer());
  check_kind_keys(f, *arch);
  arch->read(f, dim, c);
  auto rows = [](const TableConfig& t) { return t.rows; };
  if (widest_table_bytes(c.tables, rows) + widest_table_bytes(c.item_tables, rows) > kMaxTableBytes)
    f.at("tables").fail("the tables hold more than 2^50 bytes (1 PiB) of rows");
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  const nlohmann::json j = detail::read_json_file(path);
  if (j.is_object() && j.contains("models")) {
    auto zoo = parse_zoo(j, path);
    if (zoo.size() != 1)
      throw ParseError(path, -1,
                       cat("models: a model file holds exactly one model, found ", zoo.size(),
                           " (use zoo_config with a name)"));
    return zoo.front();
  }
  return parse_model_config(j, std::filesystem::path(path).stem().string(), path);
}

std::vector<ModelConfig> parse_zoo(const nlohmann::json& j, const std::string& source) {
  const JsonField f(j, source, "");
  f.expect_object({"models"});
  std::vector<ModelConfig> out;
  for (const auto& [name, m] : f.at("models").members())
    out.push_back(parse_model_config(m.value(), name, source, m.path()));
  return out;
}

const std::string& builtin_zoo_json() {
  static const std::string text =
#include "recsys/zoo_json.inc"
      ;
  return text;
}

namespace {
const std::vector<ModelConfig>& builtin_zoo() {
  static const std::vector<ModelConfig> zoo =
      parse_zoo(parse_json(builtin_zoo_json(), "builtin zoo"), "builtin zoo");
  return zoo;
}
}  // namespace

std::vector<std::string> zoo_names() {
  std::vector<std::string> names;
  for (const auto& m : builtin_zoo()) names.push_back(m.name);
  std::sort(names.begin(), names.end());
  return names;
}

ModelConfig zoo_config(const std::string& name_or_path) {
  for (const auto& m : builtin_zoo())
    if (m.name == name_or_path) return m;
  std::error_code ec;
  if (std::filesystem::is_regular_file(name_or_path, ec)) return load_model_config(name_or_path);
  std::string list;
  for (const auto& n : zoo_names()) list += list.empty() ? n : ", " + n;
  throw NotFound(
      cat("no model '", name_or_path, "' in the zoo (", list, ") and no such config file"));
}

}  // namespace tandem::rec
