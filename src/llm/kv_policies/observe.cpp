// SPDX-License-Identifier: Apache-2.0
// observe_policy_queries: the model's call into KvPolicy::observe_queries (see observe.h).
#include "llm/kv_policies/observe.h"

#include <algorithm>

namespace tandem::llm {

void observe_policy_queries(KvCache& cache, int layer, const Tensor& q3,
                            std::span<const int32_t> positions) {
  KvPolicy& policy = cache.policy();
  const int64_t t = q3.size(0);
  // One row is a decode step (generate() and kv-eval feed prompts in chunks of many rows); it goes
  // only to policies that want decode queries.
  const bool decode = t == 1;
  if (decode && !policy.observes_decode_queries()) return;
  const int64_t want = decode ? 1 : std::min<int64_t>(t, policy.query_window());
  if (want <= 0) return;
  Tensor rows = q3.slice(0, t - want, t);
  rows = rows.device().is_cpu() ? rows.contiguous() : rows.to(Device::cpu());
  policy.observe_queries(cache, layer, rows, positions.subspan(positions.size() - want), !decode);
}

}  // namespace tandem::llm
