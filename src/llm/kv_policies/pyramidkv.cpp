// SPDX-License-Identifier: Apache-2.0
// pyramidkv: SnapKV scores with per-layer prefix budgets falling linearly from max_num (layer 0) to
// min_num (last layer): min_num = keep / beta, max_num = 2 keep - min_num, so the layers average
// the SnapKV budget (llm spec 3.2; beta from extra "beta", default 20).
#include <cmath>

#include "llm/kv_policies/window_policy.h"

namespace tandem::llm {
namespace {

class PyramidKvPolicy final : public WindowEvictionPolicy {
 public:
  PyramidKvPolicy(const KvPolicyOptions& o, const KvCacheShape& s)
      : WindowEvictionPolicy("pyramidkv", o, s, o.window),
        pool_(static_cast<int>(kv_extra_number(o, "pool", 5, 0, 1024, "pyramidkv"))),
        beta_(kv_extra_number(o, "beta", 20, 1, 1e6, "pyramidkv")) {}

 protected:
  std::vector<std::vector<int64_t>> select(int layer, const std::vector<HeadView>& heads,
                                           int64_t keep) override {
    const int layers = shape().n_layers;
    // Integer budgets per layer whose sum over layers is exactly layers * keep.
    auto cumulative = [&](int upto) {  // budget of layers [0, upto), rounded
      const double min_num = static_cast<double>(keep) / beta_, max_num = 2.0 * keep - min_num;
      double sum = 0;
      for (int l = 0; l < upto; ++l) {
        sum += layers == 1 ? keep : max_num - (max_num - min_num) * l / (layers - 1);
      }
      return static_cast<int64_t>(std::llround(sum));
    };
    const int64_t layer_keep = cumulative(layer + 1) - cumulative(layer);
    std::vector<std::vector<int64_t>> out;
    for (const HeadView& h : heads)
      out.push_back(top_k_indices(avg_pool_1d(h.scores, pool_), layer_keep));
    return out;
  }

 private:
  int pool_;
  double beta_;
};

KvPolicyRegistration pyramidkv_registration(
    "pyramidkv", "SnapKV scores, per-layer budgets falling linearly with depth (extra beta=20)",
    [](const KvPolicyOptions& o, const KvCacheShape& s) {
      return std::make_shared<PyramidKvPolicy>(o, s);
    },
    {"pool", "beta"});

}  // namespace
}  // namespace tandem::llm
