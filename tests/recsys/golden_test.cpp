// SPDX-License-Identifier: Apache-2.0
// Golden graphs and scores of every architecture at a fixed seed: the node list (names, kinds,
// inputs, shapes, FLOPs, bytes, attributes and cost classes at q = 1 and q = 5) hashes to a
// recorded digest, and the scores of two queries, on the CPU nodes and on the ops path, match
// recorded values. They were recorded from the single build_nodes function before it was split per
// architecture, so a refactor that changes a graph or a result fails here.
//
// TANDEM_REC_PRINT_GOLDEN=1 prints the current digests and scores (to re-record after an intended
// change), plus a digest of the scores' exact bits, which is the same before and after a pure
// refactor on one machine. SASRec and DSSM were recorded when they were added.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "recsys_device.h"
#include "tandem/recsys/model.h"
#include "tandem/recsys/workload.h"

namespace tandem::rec {
namespace {

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

// Everything a node of the graph says, in one canonical line.
std::string describe(const OpNode& n) {
  std::string s;
  for (const std::string& part : {n.name, n.kind}) s.append(part).append("|");
  for (int i : n.inputs) s.append(std::to_string(i)).append(",");
  s.append("|");
  for (const Shape& sh : n.output_shapes) s.append(sh.to_string());
  for (double v : {n.flops, n.bytes_read, n.bytes_written, n.param_bytes})
    s.append("|").append(hex(v));
  s.append("|");
  for (const auto& [k, v] : n.attrs) s.append(k).append("=").append(v.dump()).append(";");
  return s;
}

uint64_t graph_digest(const RecModel& m) {
  uint64_t h = fnv1a(std::to_string(m.num_nodes()));
  for (int64_t q : {1, 5}) {
    const Graph g = m.graph(q, test_cpu_profile());
    for (const OpNode& n : g.nodes()) h = fnv1a(describe(n) + "\n", h);
  }
  return h;
}

// Two queries of the model's default and of 2 rows, scores concatenated.
std::vector<float> scores_of(const RecModel& m) {
  QueryFactory qf(m.config(), {});
  std::vector<float> out;
  for (int64_t rows : {int64_t{0}, int64_t{2}}) {
    const std::vector<float> s = m.forward(qf.make(static_cast<uint64_t>(rows) + 3, rows));
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

uint64_t bits_digest(const std::vector<float>& v) {
  std::string s(v.size() * sizeof(float), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return fnv1a(s);
}

ModelConfig variant(const std::string& zoo, DType dtype, int64_t dense = -1) {
  ModelConfig c = zoo_config(zoo);
  c.table_dtype = dtype;
  if (dense >= 0) c.dense_features = dense;
  return c;
}

struct Golden {
  const char* label;
  ModelConfig cfg;
  uint64_t graph;
  std::vector<float> scores;
};

std::vector<Golden> goldens() {
  ModelConfig rm2 = zoo_config("rm2");
  rm2.scale_rows(1e-3);
  rm2.query_size = 3;
  return {
      {"tiny-dlrm",
       zoo_config("tiny-dlrm"),
       0x02804b935683b60full,
       {0.468230098f, 0.473052621f, 0.472718f, 0.46844998f, 0.470233172f, 0.447311372f,
        0.458314449f}},
      {"tiny-dlrm-cat-f16",
       variant("tiny-dlrm-cat", DType::kF16),
       0x3d9b3d7a124811aaull,
       {0.531011641f, 0.521735668f, 0.537181735f, 0.539617062f, 0.527413845f, 0.544573665f}},
      {"tiny-wnd-i8",
       variant("tiny-wnd", DType::kI8),
       0x2a738fd99c745dfdull,
       {0.516055226f, 0.485195667f, 0.439514905f, 0.633972704f, 0.491835475f, 0.614997983f}},
      {"tiny-din",
       zoo_config("tiny-din"),
       0x6d29a254c9b03fdeull,
       {0.590699136f, 0.559500158f, 0.591813862f, 0.543449759f, 0.531119108f}},
      {"tiny-din-no-dense",
       variant("tiny-din", DType::kF32, 0),
       0x0071dc70fb107600ull,
       {0.543748081f, 0.57721287f, 0.598204553f, 0.583134115f, 0.585477233f}},
      {"tiny-bst-i8",
       variant("tiny-bst", DType::kI8),
       0xbce85aabfcfd22f4ull,
       {0.601963341f, 0.610876262f, 0.596192956f, 0.607843161f, 0.607635677f}},
      {"tiny-sasrec",
       zoo_config("tiny-sasrec"),
       0xc8b1856c822c1243ull,
       {0.486881852f, 0.584107876f, 0.476725787f, 0.420590401f, 0.573283374f}},
      {"tiny-dssm-f16",
       variant("tiny-dssm", DType::kF16),
       0x765036edf0098b8full,
       {0.520337641f, 0.533047795f, 0.527158558f, 0.533780932f, 0.534331441f}},
      {"rm2-small",
       rm2,
       0x3947e9ae615c6387ull,
       {0.503599465f, 0.511891901f, 0.515136302f, 0.51381129f, 0.486229271f}},
  };
}

TEST(RecGolden, GraphsAndScoresOfEveryArchitecture) {
  const bool print = std::getenv("TANDEM_REC_PRINT_GOLDEN") != nullptr;
  for (const Golden& g : goldens()) {
    SCOPED_TRACE(g.label);
    RecModel m = RecModel::generate(g.cfg);
    const uint64_t digest = graph_digest(m);
    const std::vector<float> host = scores_of(m);
    m.to(Device::cpu(), true);
    const std::vector<float> ops = scores_of(m);
    if (print) {
      std::printf("%s graph 0x%016llx bits host 0x%016llx ops 0x%016llx\n  scores", g.label,
                  static_cast<unsigned long long>(digest),
                  static_cast<unsigned long long>(bits_digest(host)),
                  static_cast<unsigned long long>(bits_digest(ops)));
      for (float s : host) std::printf(" %.9gf,", s);
      std::printf("\n");
      continue;
    }
    EXPECT_EQ(digest, g.graph) << "the graph changed";
    ASSERT_EQ(host.size(), g.scores.size());
    for (size_t i = 0; i < host.size(); ++i) {
      // Recorded with 9 significant digits: equal up to the last bit or two of a float.
      EXPECT_NEAR(host[i], g.scores[i], 2e-7) << "score " << i;
      EXPECT_NEAR(ops[i], host[i], 1e-5) << "ops path, score " << i;
    }
  }
}

}  // namespace
}  // namespace tandem::rec
