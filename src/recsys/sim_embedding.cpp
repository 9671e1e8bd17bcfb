// SPDX-License-Identifier: Apache-2.0
// SimExecutor's embedding store (SimEmbeddingOptions, sim_executor.h): tables in host memory
// behind one EmbeddingCache per table, lookup ops priced by their real keys, asynchronous
// insertion and prefetch on the copy stream, and the prefetch policy wrapper.
#include <algorithm>
#include <map>
#include <unordered_set>

#include "tandem/core/error.h"
#include "tandem/recsys/embedding_cache.h"
#include "tandem/recsys/sim_executor.h"

namespace tandem::rec {

namespace {

// One table of one model as the simulated device holds it.
struct TableState {
  const EmbeddingTable* table = nullptr;
  std::unique_ptr<EmbeddingCache> cache;  // null: no cache (none asked, or a share below a set)
  std::unordered_set<int64_t> in_flight;  // rows on the copy stream, not yet inserted
  int64_t hits = 0, misses = 0;           // lookups' unique keys
  int64_t sync_rows = 0, async_rows = 0, prefetch_rows = 0;
  double host_bytes = 0;  // over the host link: misses, asynchronous insertions, prefetches
};

// Bytes one row costs over the host link: its f32 value and its key.
double link_row_bytes(const EmbeddingTable& t) { return double(t.dim() * 4 + 8); }

std::vector<int64_t> unique_sorted(std::vector<int64_t> keys) {
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

std::vector<float> read_rows(const EmbeddingTable& t, const std::vector<int64_t>& rows) {
  std::vector<float> v(rows.size() * size_t(t.dim()));
  for (size_t i = 0; i < rows.size(); ++i) t.read_row(rows[i], v.data() + i * size_t(t.dim()));
  return v;
}

// True when every value the cache served for `keys` (those not missing) equals the table's row.
bool served_rows_match(const EmbeddingTable& t, const std::vector<int64_t>& keys,
                       const std::vector<float>& values, const EmbeddingCacheQuery& q) {
  std::vector<float> row(size_t(t.dim()));
  size_t m = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (m < q.missing_index.size() && q.missing_index[m] == int64_t(i)) {
      ++m;
      continue;
    }
    t.read_row(keys[i], row.data());
    if (!std::equal(row.begin(), row.end(), values.begin() + long(i * row.size()))) return false;
  }
  return true;
}

}  // namespace

struct SimExecutor::EmbeddingStore {
  SimEmbeddingOptions opt;
  std::map<const RecModel*, std::vector<TableState>> models;

  // The model's tables, each with its share of the cache budget (built on first use).
  std::vector<TableState>& tables(const RecModel& m) {
    auto it = models.find(&m);
    if (it != models.end()) return it->second;
    std::vector<TableState> tabs(m.tables().size() + m.item_tables().size());
    double total = 0;
    for (size_t t = 0; t < tabs.size(); ++t) {
      tabs[t].table = &m.lookup_table(int(t));
      total += double(tabs[t].table->rows() * EmbeddingCache::row_bytes(tabs[t].table->dim()));
    }
    for (auto& ts : tabs) {
      const EmbeddingTable& t = *ts.table;
      const double weight = double(t.rows() * EmbeddingCache::row_bytes(t.dim()));
      EmbeddingCacheOptions co;
      co.dim = t.dim();
      co.budget_bytes = int64_t(double(opt.cache_bytes) * weight / total);
      co.set_associativity = opt.set_associativity;
      co.warp_size = opt.warp_size;
      co.tau = opt.tau;
      const int64_t set_bytes =
          EmbeddingCache::row_bytes(t.dim()) * co.set_associativity * co.warp_size;
      if (co.budget_bytes >= set_bytes) ts.cache = std::make_unique<EmbeddingCache>(co);
    }
    return models.emplace(&m, std::move(tabs)).first->second;
  }
};

std::shared_ptr<SimExecutor::EmbeddingStore> SimExecutor::make_embedding_store(
    const SimDevice& device, const SimEmbeddingOptions& o) {
  if (o.cache_bytes < 0)
    throw InvalidArgument(
        cat("SimExecutor: embedding cache_bytes must be >= 0, got ", o.cache_bytes));
  if (!(device.host_link_bytes_per_s > 0))
    throw InvalidArgument(cat("SimExecutor: device '", device.name,
                              "' needs host_link_bytes_per_s > 0 for host tables"));
  EmbeddingCacheOptions layout;  // the cache's own checks, before any table is sized
  layout.set_associativity = o.set_associativity;
  layout.warp_size = o.warp_size;
  layout.tau = o.tau;
  EmbeddingCache::check_layout(layout);
  auto store = std::make_shared<EmbeddingStore>();
  store->opt = o;
  return store;
}

namespace {

// Sends the rows of `keys` that no transfer is bringing yet over the host link (on the copy
// stream), then into ts's cache; returns how many it sent.
template <class Send>
int64_t send_rows(TableState& ts, const std::vector<int64_t>& keys, Send&& host_transfer) {
  std::vector<int64_t> rows;
  for (int64_t k : keys)
    if (ts.in_flight.insert(k).second) rows.push_back(k);
  if (rows.empty()) return 0;
  const double bytes = double(rows.size()) * link_row_bytes(*ts.table);
  ts.host_bytes += bytes;
  host_transfer(bytes, [&ts, rows, values = read_rows(*ts.table, rows)] {
    ts.cache->replace(rows.data(), int64_t(rows.size()), values.data());
    for (int64_t k : rows) ts.in_flight.erase(k);
  });
  return int64_t(rows.size());
}

}  // namespace

double SimExecutor::embedding_us(const std::vector<OpInstance>& ops, bool& link_bound,
                                 double work_us) {
  auto transfer = [this](double bytes, std::function<void()> then) {
    host_transfer(bytes, std::move(then));
  };
  double link_bytes = 0, insert_bytes = 0;
  for (const OpInstance& op : ops) {
    if (op.state->error) continue;
    std::vector<TableState>& tabs = emb_->tables(*op.model);
    for (const TableRows& tr : op.model->lookup_rows(op.node, *op.state->inputs)) {
      TableState& ts = tabs.at(size_t(tr.table));
      const EmbeddingTable& t = *ts.table;
      const std::vector<int64_t> keys = unique_sorted(tr.rows);
      std::vector<int64_t> missing = keys;
      if (ts.cache) {
        std::vector<float> values(keys.size() * size_t(t.dim()));
        EmbeddingCacheQuery q = ts.cache->query(keys.data(), int64_t(keys.size()), values.data());
        if (opt_.compute && !served_rows_match(t, keys, values, q))
          op.state->error = std::make_exception_ptr(ContractError(
              cat("GPU cache of table '", t.name(), "' served a row unlike the table's")));
        missing = std::move(q.missing_keys);
      }
      ts.hits += int64_t(keys.size() - missing.size());
      ts.misses += int64_t(missing.size());
      const double bytes = double(missing.size()) * link_row_bytes(t);
      link_bytes += bytes;
      ts.host_bytes += bytes;
      if (!ts.cache || missing.empty()) continue;
      if (ts.cache->insert_synchronously()) {
        const std::vector<float> values = read_rows(t, missing);
        ts.cache->replace(missing.data(), int64_t(missing.size()), values.data());
        ts.sync_rows += int64_t(missing.size());
        insert_bytes += double(missing.size() * EmbeddingCache::row_bytes(t.dim()));
      } else {
        ts.async_rows += send_rows(ts, missing, transfer);
      }
    }
  }
  const double link_us =
      link_bytes > 0 ? dev_.launch_overhead_us + 1e6 * link_bytes / dev_.host_link_bytes_per_s : 0;
  const double insert_us =
      insert_bytes > 0
          ? dev_.launch_overhead_us + 1e6 * insert_bytes / dev_.profile.mem_bandwidth_bytes_per_s
          : 0;
  link_bound = link_us > work_us + insert_us;
  return link_us + insert_us;
}

void SimExecutor::prefetch(const RecModel& model, const QueryInputs& q) {
  std::lock_guard lk(mu_);
  if (!emb_) return;
  auto transfer = [this](double bytes, std::function<void()> then) {
    host_transfer(bytes, std::move(then));
  };
  std::vector<TableState>& tabs = emb_->tables(model);
  for (int node = 0; node < model.num_nodes(); ++node)
    for (const TableRows& tr : model.lookup_rows(node, q)) {
      TableState& ts = tabs.at(size_t(tr.table));
      if (!ts.cache) continue;
      const std::vector<int64_t> keys = unique_sorted(tr.rows);
      std::vector<float> values(keys.size() * size_t(ts.table->dim()));
      const EmbeddingCacheQuery probe =
          ts.cache->query(keys.data(), int64_t(keys.size()), values.data(), false);
      ts.prefetch_rows += send_rows(ts, probe.missing_keys, transfer);
    }
}

nlohmann::json SimExecutor::embedding_stats() const {
  std::lock_guard lk(mu_);
  if (!emb_) return nullptr;
  nlohmann::json tables = nlohmann::json::array();
  int64_t hits = 0, misses = 0;
  double host_bytes = 0;
  for (const auto& [model, tabs] : emb_->models)
    for (const TableState& ts : tabs) {
      const int64_t n = ts.hits + ts.misses;
      tables.push_back({{"model", model->config().name},
                        {"table", ts.table->name()},
                        {"cache_rows", ts.cache ? ts.cache->capacity() : 0},
                        {"table_rows", ts.table->rows()},
                        {"hits", ts.hits},
                        {"misses", ts.misses},
                        {"hit_rate", n ? double(ts.hits) / double(n) : 0.0},
                        {"sync_inserted_rows", ts.sync_rows},
                        {"async_inserted_rows", ts.async_rows},
                        {"prefetched_rows", ts.prefetch_rows},
                        {"host_link_bytes", ts.host_bytes}});
      hits += ts.hits, misses += ts.misses, host_bytes += ts.host_bytes;
    }
  return {{"cache_bytes", emb_->opt.cache_bytes},
          {"tau", emb_->opt.tau},
          {"set_associativity", emb_->opt.set_associativity},
          {"warp_size", emb_->opt.warp_size},
          {"host_link_bytes_per_s", dev_.host_link_bytes_per_s},
          {"hits", hits},
          {"misses", misses},
          {"hit_rate", hits + misses ? double(hits) / double(hits + misses) : 0.0},
          {"host_link_bytes", host_bytes},
          {"tables", tables}};
}

namespace {

class GpuPrefetchPolicy final : public ServingPolicy {
 public:
  GpuPrefetchPolicy(std::unique_ptr<ServingPolicy> inner, const RecModel& model, SimExecutor& ex)
      : inner_(std::move(inner)), model_(model), ex_(ex) {}
  std::string name() const override { return inner_->name(); }
  std::future<Response> submit(std::shared_ptr<const QueryInputs> query,
                               const RequestMeta& meta) override {
    ex_.prefetch(model_, *query);
    return inner_->submit(std::move(query), meta);
  }
  nlohmann::json stats() const override {
    nlohmann::json j = inner_->stats();
    j["embedding"] = ex_.embedding_stats();
    return j;
  }

 private:
  std::unique_ptr<ServingPolicy> inner_;
  const RecModel& model_;
  SimExecutor& ex_;
};

}  // namespace

std::unique_ptr<ServingPolicy> with_gpu_prefetch(std::unique_ptr<ServingPolicy> inner,
                                                 const RecModel& model, SimExecutor& executor) {
  if (!inner) throw InvalidArgument("GPU prefetch: no policy to wrap");
  return std::make_unique<GpuPrefetchPolicy>(std::move(inner), model, executor);
}

}  // namespace tandem::rec
