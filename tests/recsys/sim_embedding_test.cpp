// SPDX-License-Identifier: Apache-2.0
// SimExecutor's embedding store (SimEmbeddingOptions): scores with host tables and the GPU cache
// (synchronous, asynchronous, prefetched) equal the sequential ones; RecModel::lookup_rows names
// the rows the lookup nodes read; the lookups' real keys go
// through the cache (exact hit and miss counts); misses cost host-link time; asynchronous
// insertions and prefetches land on the copy stream; bad options are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "serving_check.h"
#include "tandem/core/error.h"
#include "tandem/recsys/embedding_cache.h"

namespace tandem::rec {
namespace {

SimOptions host_tables(int64_t cache_bytes, double tau) {
  SimOptions o;
  o.seed = 5;
  o.jitter = 0;
  o.embedding.host_tables = true;
  o.embedding.cache_bytes = cache_bytes;
  o.embedding.tau = tau;
  o.embedding.set_associativity = 2;
  o.embedding.warp_size = 4;
  return o;
}

// Unique rows per table that one query's lookups read.
std::vector<std::set<int64_t>> unique_rows(const RecModel& m, const QueryInputs& q) {
  std::vector<std::set<int64_t>> out(m.tables().size() + m.item_tables().size());
  for (int n = 0; n < m.num_nodes(); ++n)
    for (const auto& tr : m.lookup_rows(n, q))
      out[size_t(tr.table)].insert(tr.rows.begin(), tr.rows.end());
  return out;
}

// Serves q alone on ex (fcfs) and returns its simulated latency, µs.
double serve_one(SimExecutor& ex, const RecModel& m, std::shared_ptr<const QueryInputs> q,
                 std::unique_ptr<ServingPolicy>& policy) {
  if (!policy) policy = make_policy(m, ex, {.policy = "fcfs", .streams = 1});
  const double t0 = ex.now_us();
  auto f = policy->submit(std::move(q), {});
  ex.synchronize();
  f.get();
  return ex.now_us() - t0;
}

TEST(RecSimEmbedding, ScoresWithTheCacheEqualTheSequentialOnes) {
  for (const char* model : {"tiny-dlrm", "tiny-din", "tiny-bst"}) {
    Fixture fx(model);
    for (double tau : {1.0, 0.0, 0.9})
      for (bool prefetch : {false, true}) {
        SimExecutor sim(sim_device("h100"), host_tables(2048, tau));
        auto p = make_policy(fx.model, sim, {.policy = "recos", .streams = 3});
        if (prefetch) p = with_gpu_prefetch(std::move(p), fx.model, sim);
        const std::string tag = cat(model, " tau ", tau, prefetch ? " prefetch" : "");
        const LoadStats s = check_served(fx, *p, tag, 8, &sim, 2e-3);
        EXPECT_GT(s.completed, 8) << tag;
        const nlohmann::json e = sim.embedding_stats();
        EXPECT_GT(e["hits"].get<int64_t>(), 0) << tag;
        EXPECT_GT(e["misses"].get<int64_t>(), 0) << tag;
        if (prefetch) {
          int64_t prefetched = 0;
          for (const auto& t : e["tables"]) prefetched += t["prefetched_rows"].get<int64_t>();
          EXPECT_GT(prefetched, 0) << tag;
          EXPECT_TRUE(p->stats().contains("embedding")) << tag;
        }
      }
  }
}

// RecModel::lookup_rows names the rows the lookup nodes read: rebuilding each node's output from
// those rows of the tables gives the node's own output (pooled sums; concatenated item rows).
TEST(RecSimEmbedding, LookupRowsAreTheRowsTheNodesRead) {
  for (const char* model : {"tiny-dlrm", "tiny-din", "tiny-dssm"}) {
    Fixture fx(model);
    const RecModel& m = fx.model;
    const QueryInputs& q = *fx.pool[7];
    QueryState st = m.make_state(q);
    for (int id : m.topological_order()) m.run_node(id, st);
    int checked = 0;
    for (int n = 0; n < m.num_nodes(); ++n) {
      const std::vector<TableRows> trs = m.lookup_rows(n, q);
      if (trs.empty()) continue;
      const Tensor& out = st.values[size_t(n)];
      const int64_t width = out.numel() / q.rows;
      const bool pooled = trs.size() == 1 && trs[0].table < int(m.tables().size());
      std::vector<float> want(size_t(out.numel()), 0.0f), row;
      int64_t col = 0;
      for (const TableRows& tr : trs) {
        const EmbeddingTable& t = m.lookup_table(tr.table);
        row.resize(size_t(t.dim()));
        for (size_t i = 0; i < tr.rows.size(); ++i) {
          t.read_row(tr.rows[i], row.data());
          // A pooled bag: rows [offsets[r], offsets[r+1]) sum into output row r; an item gather:
          // the i-th row is the i-th output position, at this table's columns.
          const auto& off = q.offsets[size_t(tr.table)];
          const int64_t at =
              pooled ? (std::upper_bound(off.begin(), off.end(), off.front() + int64_t(i)) -
                        off.begin() - 1) *
                           width
                     : int64_t(i) * (width / int64_t(tr.rows.size() / size_t(q.rows))) + col;
          for (int64_t d = 0; d < t.dim(); ++d) want[size_t(at + d)] += row[size_t(d)];
        }
        col += t.dim();
      }
      const float* got = out.data<float>();
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-5f) << model << " node " << m.node_name(n) << " at " << i;
      ++checked;
    }
    EXPECT_GE(checked, 2) << model;
  }
}

TEST(RecSimEmbedding, LookupKeysGoThroughTheCache) {
  Fixture fx("tiny-din");
  const auto& q = fx.pool[3];
  const auto rows = unique_rows(fx.model, *q);
  int64_t unique = 0, per_node = 0;  // unique rows per table; per node and table
  for (const auto& r : rows) unique += int64_t(r.size());
  for (int n = 0; n < fx.model.num_nodes(); ++n)
    for (const auto& tr : fx.model.lookup_rows(n, *q))
      per_node += int64_t(std::set<int64_t>(tr.rows.begin(), tr.rows.end()).size());
  // Large enough for every row of every table, synchronous insertion: the first run misses each
  // unique row once (a second node reading it hits), the second run hits them all.
  SimExecutor ex(sim_device("h100"), host_tables(1 << 20, 1.0));
  std::unique_ptr<ServingPolicy> p;
  const double cold = serve_one(ex, fx.model, q, p);
  nlohmann::json e = ex.embedding_stats();
  const int64_t first_misses = e["misses"].get<int64_t>();
  EXPECT_EQ(first_misses, unique);
  EXPECT_EQ(e["hits"].get<int64_t>() + first_misses, per_node);
  const double warm = serve_one(ex, fx.model, q, p);
  e = ex.embedding_stats();
  EXPECT_EQ(e["misses"].get<int64_t>(), first_misses);  // nothing missed the second time
  EXPECT_LT(warm, cold);                                // no host-link time
  for (const auto& t : e["tables"]) EXPECT_EQ(t["async_inserted_rows"].get<int64_t>(), 0);
  // The same query on device-resident tables: no host link at all, as fast as the warm cache.
  SimExecutor resident(sim_device("h100"), {.seed = 5, .jitter = 0});
  std::unique_ptr<ServingPolicy> rp;
  EXPECT_DOUBLE_EQ(serve_one(resident, fx.model, q, rp), warm);
  EXPECT_TRUE(resident.embedding_stats().is_null());
  // No cache: every run pays the host link, and as much as the cold run does.
  SimExecutor none(sim_device("h100"), host_tables(0, 0.9));
  std::unique_ptr<ServingPolicy> np;
  const double none1 = serve_one(none, fx.model, q, np);
  EXPECT_DOUBLE_EQ(serve_one(none, fx.model, q, np), none1);
  EXPECT_EQ(none.embedding_stats()["hits"].get<int64_t>(), 0);
}

TEST(RecSimEmbedding, AsynchronousInsertionUsesTheCopyStream) {
  Fixture fx("tiny-dlrm");
  const auto& q = fx.pool[5];
  SimExecutor ex(sim_device("h100"), host_tables(1 << 20, 0.0));  // tau 0: always asynchronous
  std::unique_ptr<ServingPolicy> p;
  serve_one(ex, fx.model, q, p);
  const int streams = ex.num_streams();  // the policy's stream and the copy stream
  EXPECT_EQ(streams, 2);
  nlohmann::json e = ex.embedding_stats();
  int64_t async_rows = 0, sync_rows = 0;
  for (const auto& t : e["tables"]) {
    async_rows += t["async_inserted_rows"].get<int64_t>();
    sync_rows += t["sync_inserted_rows"].get<int64_t>();
  }
  EXPECT_EQ(sync_rows, 0);
  EXPECT_GT(async_rows, 0);
  const int64_t misses = e["misses"].get<int64_t>();
  serve_one(ex, fx.model, q, p);  // the transfers ended before: all hits now
  EXPECT_EQ(ex.embedding_stats()["misses"].get<int64_t>(), misses);
}

TEST(RecSimEmbedding, BadOptionsAreRefused) {
  SimOptions o = host_tables(1024, 0.9);
  o.embedding.warp_size = 3;
  EXPECT_THROW(SimExecutor(sim_device("h100"), o), InvalidArgument);
  o = host_tables(-1, 0.9);
  EXPECT_THROW(SimExecutor(sim_device("h100"), o), InvalidArgument);
  o = host_tables(1024, 2.0);
  EXPECT_THROW(SimExecutor(sim_device("h100"), o), InvalidArgument);
  SimDevice d = sim_device("h100");
  nlohmann::json j = d.to_json();
  j["host_link_bytes_per_s"] = 0;
  EXPECT_THROW(SimDevice::from_json(j), InvalidArgument);
  j.erase("host_link_bytes_per_s");
  EXPECT_EQ(SimDevice::from_json(j).host_link_bytes_per_s, 25e9);
}

}  // namespace
}  // namespace tandem::rec
