// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the KV calibration files a user passes with --kv-calibration: the same bytes go
// to the QoKV reader (parse_qokv_calibration, in memory) and, written to a scratch file, to the
// ClusterAttn reader (load_clusterattn_params takes a path). Any input must be read or raise a
// tandem::Error; anything else escaping (another exception type, a crash, a sanitizer report) is
// a bug. What a reader accepted must save, load back unchanged, and build its policy through the
// registry from the saved file (ClusterAttn's parameters also run one DBAC clustering). Replayed by
// ctest over tests/fuzz/corpus/kv_calibration; a libFuzzer binary with -DTANDEM_FUZZ=ON.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "tandem/llm/kv_policies.h"
#include "tandem/llm/kv_policy_registry.h"
#include "tandem/llm/kv_quant.h"

using tandem::fuzz::accepted;
using tandem::fuzz::must;
namespace llm = tandem::llm;

namespace {

bool same(const llm::QokvCalibration& a, const llm::QokvCalibration& b) {
  if (a.model != b.model || a.n_layers != b.n_layers || a.n_kv_heads != b.n_kv_heads ||
      a.head_dim != b.head_dim || a.value_group != b.value_group ||
      a.layers.size() != b.layers.size())
    return false;
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const auto &x = a.layers[l], &y = b.layers[l];
    if (x.group_fractions != y.group_fractions || x.k_scale != y.k_scale || x.v_scale != y.v_scale)
      return false;
  }
  return true;
}

bool same(const llm::ClusterAttnParams& a, const llm::ClusterAttnParams& b) {
  return a.window == b.window && a.pool == b.pool && a.dbac.eps == b.dbac.eps &&
         a.dbac.rho == b.dbac.rho && a.dbac.min_len == b.dbac.min_len &&
         a.per_head_fixed == b.per_head_fixed;
}

void qokv(const std::string& text) {
  const auto c = accepted([&] { return llm::parse_qokv_calibration(text, "fuzz-qokv.json"); });
  if (!c) return;
  const std::string path = tandem::fuzz::scratch_path("saved-qokv.json");
  llm::save_qokv_calibration(*c, path);
  must(same(llm::load_qokv_calibration(path), *c), "QoKV calibration changed in a round trip");
  // The policy reads the same file; a small cache of the calibration's shape.
  if (int64_t(c->n_layers) * c->n_kv_heads * c->head_dim <= (1 << 16)) {
    llm::KvPolicyOptions o;
    o.calibration_path = path;
    llm::KvCacheShape shape;
    shape.n_layers = c->n_layers;
    shape.n_kv_heads = c->n_kv_heads;
    shape.head_dim = c->head_dim;
    must(llm::make_kv_policy("qokv", o, shape) != nullptr, "no QoKV policy");
  }
}

void clusterattn(const std::string& text) {
  const std::string in = tandem::fuzz::fuzz_file("clusterattn.json", text);
  const auto p = accepted([&] { return llm::load_clusterattn_params(in); });
  if (!p) return;
  const std::string path = tandem::fuzz::scratch_path("saved-clusterattn.json");
  llm::save_clusterattn_params(path, *p, "fuzz");
  must(same(llm::load_clusterattn_params(path), *p), "ClusterAttn params changed in a round trip");
  llm::KvPolicyOptions o;
  o.budget_tokens = 16;
  o.calibration_path = path;
  llm::KvCacheShape shape;
  shape.n_layers = 1;
  shape.n_kv_heads = 1;
  shape.head_dim = 4;
  must(llm::make_kv_policy("clusterattn", o, shape) != nullptr, "no ClusterAttn policy");
  // Scores from the input's bytes (up to 64 tokens), clustered with the accepted parameters.
  std::vector<float> x(std::min<size_t>(64, text.size()));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(uint8_t(text[i])) / 255.0f;
  for (const auto& cl : llm::dbac_clusters(x, p->dbac))
    must(cl.begin >= 0 && cl.begin < cl.end && cl.end <= int64_t(x.size()), "cluster out of range");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  qokv(text);
  clusterattn(text);
  return 0;
}
