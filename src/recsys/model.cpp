// SPDX-License-Identifier: Apache-2.0
// RecModel: weights (generated, saved, loaded), graph, validation and execution of nodes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <utility>

#include "recsys/architecture.h"
#include "recsys/model_impl.h"
#include "tandem/core/error.h"
#include "tandem/core/json.h"

namespace tandem::rec {

uint64_t table_salt(const std::string& table_name) { return fnv1a64("salt:" + table_name); }

std::vector<int64_t> rows_of_ids(const TableConfig& c, const std::vector<int64_t>& ids) {
  if (!c.hash) return ids;
  std::vector<int64_t> rows(ids.size());
  const uint64_t salt = table_salt(c.name);
  for (size_t i = 0; i < ids.size(); ++i) rows[i] = hash_id(ids[i], salt, c.rows);
  return rows;
}

bool is_lookup_kind(const std::string& kind) {
  return kind == "emb_bag" || kind == "emb_gather" || kind == "wide";
}

const char* to_string(CostClass c) {
  return c == CostClass::kMem ? "MEM" : c == CostClass::kComp ? "COMP" : "TINY";
}

CostClass classify(const OpNode& node, const DeviceProfile& device, const CostClassOptions& opt) {
  static const RooflineCostModel roofline;
  const CostModel& model = opt.model ? *opt.model : roofline;
  if (model.predict_op_s(node, device) < opt.tiny_s) return CostClass::kTiny;
  const double bytes = node.bytes_moved();
  const double ridge = device.peak_flops / device.mem_bandwidth_bytes_per_s;
  return (bytes > 0 && node.flops / bytes < ridge) ? CostClass::kMem : CostClass::kComp;
}

std::vector<WeightSpec> dense_weight_specs(const ModelConfig& c) {
  const Architecture& arch = architecture(c.kind);
  std::vector<WeightSpec> out;
  add_mlp_weights(out, "bottom", c.dense_features, c.bottom_mlp);
  add_mlp_weights(out, "top", arch.top_input_width(c), c.top_mlp);
  arch.weights(c, out);
  return out;
}

const Tensor& RecModel::Impl::w(const std::string& name) const {
  auto it = weights.find(name);
  if (it == weights.end()) throw NotFound(cat("model '", cfg.name, "' has no weight '", name, "'"));
  return it->second;
}

RecModel::RecModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  architecture(impl_->cfg.kind).build(*impl_);
  impl_->order = impl_->graph(1).topological_order();
}
RecModel::RecModel(RecModel&&) noexcept = default;
RecModel& RecModel::operator=(RecModel&&) noexcept = default;
RecModel::~RecModel() = default;

RecModel RecModel::generate(const ModelConfig& cfg) {
  auto impl = std::make_unique<Impl>();
  impl->cfg = cfg;
  for (const auto& s : dense_weight_specs(cfg))
    impl->weights[s.name] = generate_tensor(s.shape, cfg.seed, s.name, s.scale, s.offset);
  for (const auto& t : cfg.tables)
    impl->tables.push_back(EmbeddingTable::generate(t.name, t.rows, t.dim, cfg.table_dtype,
                                                    cfg.seed, table_scale(t.dim)));
  for (const auto& t : cfg.item_tables)
    impl->item_tables.push_back(EmbeddingTable::generate(t.name, t.rows, t.dim, cfg.table_dtype,
                                                         cfg.seed, table_scale(t.dim)));
  if (architecture(cfg.kind).wide_tables)
    for (const auto& t : cfg.tables)
      impl->wide_tables.push_back(EmbeddingTable::generate("wide." + t.name, t.rows, 1, DType::kF32,
                                                           cfg.seed, kWideTableScale));
  return RecModel(std::move(impl));
}

RecModel RecModel::generate_mapped(const ModelConfig& cfg, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(cat("cannot create table directory '", dir, "': ", ec.message()));
  auto impl = std::make_unique<Impl>();
  impl->cfg = cfg;
  for (const auto& s : dense_weight_specs(cfg))
    impl->weights[s.name] = generate_tensor(s.shape, cfg.seed, s.name, s.scale, s.offset);
  auto mapped = [&](const TableConfig& t) {
    const std::string path = cat(dir, "/", cfg.name, ".", t.name, ".", dtype_name(cfg.table_dtype),
                                 ".s", cfg.seed, ".temb");
    bool reuse = false;
    try {
      const EmbeddingTable m = EmbeddingTable::map_file(path, t.name);
      reuse = m.rows() == t.rows && m.dim() == t.dim && m.dtype() == cfg.table_dtype;
    } catch (const Error&) {
      reuse = false;
    }
    if (!reuse)
      EmbeddingTable::write_generated_file(path, t.name, t.rows, t.dim, cfg.table_dtype, cfg.seed,
                                           table_scale(t.dim));
    return EmbeddingTable::map_file(path, t.name);
  };
  for (const auto& t : cfg.tables) impl->tables.push_back(mapped(t));
  for (const auto& t : cfg.item_tables) impl->item_tables.push_back(mapped(t));
  if (architecture(cfg.kind).wide_tables)
    for (const auto& t : cfg.tables)
      impl->wide_tables.push_back(EmbeddingTable::generate("wide." + t.name, t.rows, 1, DType::kF32,
                                                           cfg.seed, kWideTableScale));
  return RecModel(std::move(impl));
}

namespace {

const char* table_format(DType d) {
  return d == DType::kF32 ? "f32" : d == DType::kF16 ? "f16" : "i8_rowwise";
}

StoredTensor store_table(const EmbeddingTable& t) {
  StoredTensor s;
  s.dtype = t.dtype() == DType::kF32 ? "F32" : t.dtype() == DType::kF16 ? "F16" : "U8";
  s.shape = t.dtype() == DType::kI8 ? std::vector<int64_t>{t.rows(), t.dim() + 8}
                                    : std::vector<int64_t>{t.rows(), t.dim()};
  s.data.assign(t.row_data(0), t.row_data(0) + t.bytes());
  return s;
}

// A file written by RecModel::save states the config it was made from: metadata that is not that
// JSON, or that describes another model, is refused before any tensor is compared. What does not
// shape the weights (the default query size, the generator's seed, the description) may differ.
void check_stored_config(const SafetensorsFile& f, const ModelConfig& cfg,
                         const std::string& path) {
  const auto it = f.metadata.find("tandem.config");
  if (it == f.metadata.end()) return;
  nlohmann::json stored = parse_json(it->second, path + ": __metadata__.tandem.config");
  if (!stored.is_object())
    throw ParseError(path, -1, "__metadata__.tandem.config is not a JSON object");
  nlohmann::json want = cfg.to_json();
  for (const char* key : {"query_size", "seed", "description"}) {
    stored.erase(key);
    want.erase(key);
  }
  if (stored == want) return;
  std::string key = "(extra keys)";
  for (const auto& [k, v] : want.items()) {
    if (!stored.contains(k) || stored[k] != v) {
      key = k;
      break;
    }
  }
  throw ParseError(path, -1,
                   cat("__metadata__.tandem.config describes another model than '", cfg.name,
                       "' (first difference: '", key, "')"));
}

}  // namespace

void RecModel::save(const std::string& path) const {
  SafetensorsFile f;
  f.metadata["format"] = "tandem-rec";
  f.metadata["tandem.config"] = impl_->cfg.to_json().dump();
  for (const auto& [name, t] : impl_->weights) {
    StoredTensor s;
    s.dtype = "F32";
    s.shape = t.shape().to_vector();
    const auto* p = static_cast<const uint8_t*>(t.raw_data());
    s.data.assign(p, p + t.nbytes());
    f.tensors[name] = std::move(s);
  }
  auto put = [&](const std::vector<EmbeddingTable>& ts) {
    for (const auto& t : ts) {
      f.tensors[t.name()] = store_table(t);
      f.metadata["tandem.table." + t.name()] = table_format(t.dtype());
    }
  };
  put(impl_->tables);
  put(impl_->item_tables);
  put(impl_->wide_tables);
  write_safetensors(path, f);
}

RecModel RecModel::load(const ModelConfig& cfg, const std::string& path) {
  SafetensorsFile f = read_safetensors(path);
  check_stored_config(f, cfg, path);
  auto impl = std::make_unique<Impl>();
  impl->cfg = cfg;
  auto take = [&](const std::string& name) -> StoredTensor& {
    auto it = f.tensors.find(name);
    if (it == f.tensors.end())
      throw ParseError(path, -1, cat("tensor '", name, "' of model '", cfg.name, "' is missing"));
    return it->second;
  };
  for (const auto& s : dense_weight_specs(cfg)) {
    StoredTensor& t = take(s.name);
    if (t.dtype != "F32" || t.shape != s.shape.to_vector())
      throw ParseError(path, -1,
                       cat("tensor '", s.name, "' is ", t.dtype, " ", Shape(t.shape).to_string(),
                           ", expected F32 ", s.shape.to_string()));
    Tensor w = Tensor::empty(s.shape, DType::kF32);
    std::memcpy(w.raw_data(), t.data.data(), t.data.size());
    impl->weights[s.name] = std::move(w);
  }
  auto load_tables = [&](const std::vector<TableConfig>& tcs, const std::string& prefix,
                         DType dtype, bool dim1, std::vector<EmbeddingTable>& out) {
    for (const auto& tc : tcs) {
      const std::string name = prefix + tc.name;
      const int64_t dim = dim1 ? 1 : tc.dim;
      StoredTensor& t = take(name);
      const std::string want = dtype == DType::kF32 ? "F32" : dtype == DType::kF16 ? "F16" : "U8";
      const int64_t width = dtype == DType::kI8 ? dim + 8 : dim;
      if (t.dtype != want || t.shape != std::vector<int64_t>{tc.rows, width})
        throw ParseError(path, -1,
                         cat("table '", name, "' is ", t.dtype, " ", Shape(t.shape).to_string(),
                             ", expected ", want, " [", tc.rows, ", ", width, "]"));
      auto meta = f.metadata.find("tandem.table." + name);
      if (meta != f.metadata.end() && meta->second != table_format(dtype))
        throw ParseError(path, -1,
                         cat("table '", name, "' is stored as ", meta->second,
                             ", the config asks for ", table_format(dtype)));
      out.push_back(EmbeddingTable::from_rows(name, t.data.data(), tc.rows, dim, dtype));
      t.data.clear();
      t.data.shrink_to_fit();
    }
  };
  load_tables(cfg.tables, "", cfg.table_dtype, false, impl->tables);
  load_tables(cfg.item_tables, "", cfg.table_dtype, false, impl->item_tables);
  if (architecture(cfg.kind).wide_tables)
    load_tables(cfg.tables, "wide.", DType::kF32, true, impl->wide_tables);
  return RecModel(std::move(impl));
}

const ModelConfig& RecModel::config() const { return impl_->cfg; }
int RecModel::num_nodes() const { return static_cast<int>(impl_->nodes.size()); }
const std::string& RecModel::node_name(int id) const { return impl_->nodes.at(id).name; }
const std::vector<int>& RecModel::topological_order() const { return impl_->order; }
int64_t RecModel::touch(const QueryInputs& q) const {
  const Impl& m = *impl_;
  int64_t pages = 0;
  std::vector<int64_t> rows;
  auto touch_ids = [&](const EmbeddingTable& t, const TableConfig& c,
                       const std::vector<int64_t>& ids) {
    if (!t.mapped()) return;
    rows = rows_of_ids(c, ids);
    pages += t.touch_rows(rows.data(), static_cast<int64_t>(rows.size()));
  };
  for (size_t t = 0; t < m.tables.size() && t < q.ids.size(); ++t)
    touch_ids(m.tables[t], m.cfg.tables[t], q.ids[t]);
  for (size_t k = 0; k < m.item_tables.size(); ++k) {
    if (k < q.item_ids.size()) touch_ids(m.item_tables[k], m.cfg.item_tables[k], q.item_ids[k]);
    if (k < q.seq_ids.size()) touch_ids(m.item_tables[k], m.cfg.item_tables[k], q.seq_ids[k]);
  }
  return pages;
}

std::vector<TableRows> RecModel::lookup_rows(int id, const QueryInputs& q) const {
  const NodeDef& n = impl_->nodes.at(size_t(id));
  return n.rows ? n.rows(q) : std::vector<TableRows>{};
}

const EmbeddingTable& RecModel::lookup_table(int table) const {
  const auto pooled = static_cast<int>(impl_->tables.size());
  if (table < 0 || table >= pooled + static_cast<int>(impl_->item_tables.size()))
    throw InvalidArgument(cat("model '", impl_->cfg.name, "' has no lookup table ", table));
  return table < pooled ? impl_->tables[size_t(table)] : impl_->item_tables[size_t(table - pooled)];
}

const std::vector<EmbeddingTable>& RecModel::tables() const { return impl_->tables; }
const std::vector<EmbeddingTable>& RecModel::item_tables() const { return impl_->item_tables; }

Graph RecModel::Impl::graph(int64_t q) const {
  Graph g(cfg.name);
  for (const auto& n : nodes) {
    OpNode o = n.cost(q);
    o.name = n.name;
    o.kind = n.kind;
    o.inputs = n.inputs;
    o.attrs["q"] = q;
    g.add_node(std::move(o));
  }
  g.validate();
  return g;
}

Graph RecModel::graph(int64_t q, const DeviceProfile& device, const CostClassOptions& opt) const {
  Graph g = impl_->graph(q);
  for (int id = 0; id < g.size(); ++id) {
    OpNode& o = g.node(id);
    o.attrs["cost_class"] = to_string(classify(o, device, opt));
  }
  return g;
}

QueryState RecModel::make_state(const QueryInputs& in) const {
  QueryState st;
  st.inputs = &in;
  st.values.resize(impl_->nodes.size());
  return st;
}

namespace {
// The block for the output of the node this thread runs (set by run_node around the node).
thread_local OutputBlock t_output;

struct OutputScope {
  explicit OutputScope(OutputBlock b) { t_output = b; }
  ~OutputScope() { t_output = {}; }
};
}  // namespace

Tensor node_output(const Shape& shape) {
  const OutputBlock b = std::exchange(t_output, OutputBlock{});
  const size_t bytes = sizeof(float) * static_cast<size_t>(shape.numel());
  if (b.data && b.bytes >= bytes) return Tensor::from_blob(b.data, shape, DType::kF32);
  return Tensor::empty(shape, DType::kF32);
}

void RecModel::run_node(int id, QueryState& st, int max_threads, Stream* stream) const {
  if (id < 0 || id >= num_nodes())
    throw InvalidArgument(cat("model '", impl_->cfg.name, "': no node ", id));
  if (!impl_->ops_path) {
    OutputScope scope(size_t(id) < st.outputs.size() ? st.outputs[size_t(id)] : OutputBlock{});
    st.values[id] = impl_->nodes[id].run(st, max_threads);
  } else
    st.values[id] = impl_->run_on_device(id, st, stream ? stream : st.stream);
}

void RecModel::to(Device device, bool ops_path_on_cpu) {
  impl_->to_device(device, ops_path_on_cpu);
}
Device RecModel::device() const { return impl_->device; }

std::vector<float> RecModel::scores(const QueryState& st) const {
  const Tensor& t = st.values[impl_->order.back()];
  if (!t.defined()) throw InvalidArgument("scores(): the output node has not run");
  if (st.stream) st.stream->synchronize();  // the output node's work may still be queued
  if (!t.device().is_cpu()) return t.to(Device::cpu()).to_float_vector();
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

void RecModel::validate(const QueryInputs& in) const { validate_query(impl_->cfg, in); }

void validate_query(const ModelConfig& c, const QueryInputs& in) {
  auto bad = [&](const std::string& what) {
    return InvalidArgument(cat("query for model '", c.name, "': ", what));
  };
  if (in.rows <= 0) throw bad(cat("rows ", in.rows, " must be positive"));
  if (static_cast<int64_t>(in.dense.size()) != in.rows * c.dense_features)
    throw bad(
        cat("dense has ", in.dense.size(), " values, expected ", in.rows, " x ", c.dense_features));
  if (in.ids.size() != c.tables.size() || in.offsets.size() != c.tables.size())
    throw bad(cat("ids/offsets for ", in.ids.size(), "/", in.offsets.size(), " tables, expected ",
                  c.tables.size()));
  for (size_t t = 0; t < c.tables.size(); ++t) {
    const auto& off = in.offsets[t];
    const auto& tc = c.tables[t];
    if (static_cast<int64_t>(off.size()) != in.rows + 1 || off.front() != 0 ||
        off.back() != static_cast<int64_t>(in.ids[t].size()))
      throw bad(
          cat("table ", tc.name, ": offsets must have rows + 1 entries from 0 to ids.size()"));
    for (int64_t r = 0; r < in.rows; ++r)
      if (off[r + 1] < off[r]) throw bad(cat("table ", tc.name, ": offsets decrease at row ", r));
    if (!tc.hash)
      for (int64_t id : in.ids[t])
        if (id < 0 || id >= tc.rows)
          throw bad(cat("table ", tc.name, ": id ", id, " outside [0, ", tc.rows, ")"));
  }
  if (architecture(c.kind).sequence) {
    if (in.item_ids.size() != c.item_tables.size() || in.seq_ids.size() != c.item_tables.size())
      throw bad(cat("item/sequence ids for ", in.item_ids.size(), " tables, expected ",
                    c.item_tables.size()));
    for (size_t k = 0; k < c.item_tables.size(); ++k) {
      const auto& tc = c.item_tables[k];
      if (static_cast<int64_t>(in.item_ids[k].size()) != in.rows ||
          static_cast<int64_t>(in.seq_ids[k].size()) != in.rows * c.seq_len)
        throw bad(cat("item table ", tc.name, ": need rows candidate ids and rows x ", c.seq_len,
                      " behaviour ids"));
      if (!tc.hash)
        for (const auto* v : {&in.item_ids[k], &in.seq_ids[k]})
          for (int64_t id : *v)
            if (id < 0 || id >= tc.rows)
              throw bad(cat("item table ", tc.name, ": id ", id, " outside [0, ", tc.rows, ")"));
    }
  }
}

std::vector<float> RecModel::forward(const QueryInputs& in) const {
  validate(in);
  QueryState st = make_state(in);
  for (int id : impl_->order) run_node(id, st);
  return scores(st);
}

void RecModel::set_cache_rows(int64_t rows_per_table) {
  impl_->caches.clear();
  if (rows_per_table <= 0) return;
  for (const auto& t : impl_->tables)
    impl_->caches.push_back(std::make_unique<HotRowCache>(
        std::max<int64_t>(4, std::min(rows_per_table, t.rows())), t.dim(), 4));
}

std::vector<CacheStats> RecModel::cache_stats() const {
  std::vector<CacheStats> out;
  for (const auto& c : impl_->caches) out.push_back(c->stats());
  return out;
}

int64_t RecModel::weight_bytes() const {
  int64_t b = 0;
  for (const auto& [n, t] : impl_->weights) b += t.nbytes();
  for (const auto* ts : {&impl_->tables, &impl_->item_tables, &impl_->wide_tables})
    for (const auto& t : *ts) b += t.bytes();
  return b;
}

QueryInputs concat_queries(const std::vector<const QueryInputs*>& parts) {
  QueryInputs out;
  if (parts.empty()) return out;
  const size_t nt = parts[0]->ids.size(), ni = parts[0]->item_ids.size();
  out.ids.resize(nt);
  out.offsets.assign(nt, {0});
  out.item_ids.resize(ni);
  out.seq_ids.resize(ni);
  for (const QueryInputs* p : parts) {
    if (p->ids.size() != nt || p->item_ids.size() != ni)
      throw InvalidArgument("concat_queries: queries of different models");
    out.rows += p->rows;
    out.dense.insert(out.dense.end(), p->dense.begin(), p->dense.end());
    for (size_t t = 0; t < nt; ++t) {
      const int64_t base = static_cast<int64_t>(out.ids[t].size());
      out.ids[t].insert(out.ids[t].end(), p->ids[t].begin(), p->ids[t].end());
      for (size_t r = 1; r < p->offsets[t].size(); ++r)
        out.offsets[t].push_back(base + p->offsets[t][r]);
    }
    for (size_t k = 0; k < ni; ++k) {
      out.item_ids[k].insert(out.item_ids[k].end(), p->item_ids[k].begin(), p->item_ids[k].end());
      out.seq_ids[k].insert(out.seq_ids[k].end(), p->seq_ids[k].begin(), p->seq_ids[k].end());
    }
  }
  return out;
}

QueryInputs slice_query(const QueryInputs& q, int64_t begin, int64_t end) {
  if (begin < 0 || end > q.rows || begin >= end)
    throw InvalidArgument(cat("slice_query: rows [", begin, ", ", end, ") of a query of ", q.rows));
  auto rows_of = [&](const auto& v, int64_t per_row) {
    return std::decay_t<decltype(v)>(v.begin() + begin * per_row, v.begin() + end * per_row);
  };
  QueryInputs out;
  out.rows = end - begin;
  out.dense = rows_of(q.dense, static_cast<int64_t>(q.dense.size()) / q.rows);
  for (size_t t = 0; t < q.ids.size(); ++t) {
    const auto& off = q.offsets[t];
    out.ids.emplace_back(q.ids[t].begin() + off[size_t(begin)],
                         q.ids[t].begin() + off[size_t(end)]);
    std::vector<int64_t> o(off.begin() + begin, off.begin() + end + 1);
    for (int64_t& x : o) x -= off[size_t(begin)];
    out.offsets.push_back(std::move(o));
  }
  for (size_t k = 0; k < q.item_ids.size(); ++k) {
    out.item_ids.push_back(rows_of(q.item_ids[k], 1));
    out.seq_ids.push_back(
        rows_of(q.seq_ids[k], static_cast<int64_t>(q.seq_ids[k].size()) / q.rows));
  }
  return out;
}

}  // namespace tandem::rec
