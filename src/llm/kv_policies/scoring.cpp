// SPDX-License-Identifier: Apache-2.0
// Scoring pieces shared by the eviction policies: window attention scores, 1-D pooling, top-k,
// the budget rule (see kv_policies.h).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_policies.h"

namespace tandem::llm {
namespace {

constexpr int64_t kParallelScoreWork = 4096;  // queries x keys below which one thread scores

// Widens the K rows of one (layer, head) to f32 [n, head_dim] and collects the slot positions.
void gather_keys(const KvCache& cache, int layer, int head, std::vector<float>& keys,
                 std::vector<int32_t>& positions) {
  const int64_t d = cache.shape().head_dim;
  keys.clear();
  positions.clear();
  for (const KvBlock& b : cache.blocks(layer, head)) {
    // Blocks on a GPU are copied to the host (keys only; a scoring pass, not the decode path).
    const Tensor host = b.k.device().is_cpu() ? b.k : b.k.to(Device::cpu());
    if (b.dtype == DType::kF32) {
      const float* k = host.data<float>();
      keys.insert(keys.end(), k, k + b.used * d);
    } else if (b.dtype == DType::kF16) {
      const auto* k = static_cast<const uint16_t*>(host.raw_data());
      for (int64_t i = 0; i < b.used * d; ++i) keys.push_back(f16_to_f32(k[i]));
    } else {
      throw Unsupported(cat("window_attention_scores: blocks of dtype ", dtype_name(b.dtype),
                            " (layer ", layer, ", head ", head,
                            "); run eviction before quantization in a policy chain"));
    }
    positions.insert(positions.end(), b.positions.begin(), b.positions.begin() + b.used);
  }
}

}  // namespace

std::vector<std::vector<float>> window_attention_scores(const KvCache& cache, int layer,
                                                        const Tensor& q,
                                                        std::span<const int32_t> positions) {
  const KvCacheShape& s = cache.shape();
  if (q.rank() != 3 || q.dtype() != DType::kF32 || !q.device().is_cpu() ||
      q.size(2) != s.head_dim || q.size(1) % s.n_kv_heads != 0 ||
      q.size(0) != static_cast<int64_t>(positions.size())) {
    throw InvalidArgument(cat("window_attention_scores(layer ", layer, "): queries ", q.to_string(),
                              " with ", positions.size(),
                              " positions do not fit the cache (head_dim ", s.head_dim, ", ",
                              s.n_kv_heads, " kv heads)"));
  }
  const Tensor qc = q.contiguous();
  const int64_t w = q.size(0), hq = q.size(1), d = s.head_dim, group = hq / s.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<std::vector<float>> out(s.n_kv_heads);
  for (int h = 0; h < s.n_kv_heads; ++h) {
    std::vector<float> keys;
    std::vector<int32_t> pos;
    gather_keys(cache, layer, h, keys, pos);
    const int64_t n = static_cast<int64_t>(pos.size());
    std::vector<float> partial(static_cast<size_t>(group * n), 0.0f);
    const float* qd = qc.data<float>();
    auto score_group = [&](int64_t g) {
      std::vector<float> logit(static_cast<size_t>(n));
      float* acc = partial.data() + g * n;
      for (int64_t i = 0; i < w; ++i) {
        const float* qi = qd + (i * hq + h * group + g) * d;
        float mx = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          if (pos[j] > positions[i]) {
            logit[j] = -INFINITY;
            continue;
          }
          const float* kj = keys.data() + j * d;
          float dot = 0.0f;
          for (int64_t e = 0; e < d; ++e) dot += qi[e] * kj[e];
          logit[j] = dot * scale;
          mx = std::max(mx, logit[j]);
        }
        if (mx == -INFINITY) continue;  // the query sees no key
        double sum = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          logit[j] = logit[j] == -INFINITY ? 0.0f : std::exp(logit[j] - mx);
          sum += logit[j];
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < n; ++j) acc[j] += logit[j] * inv;
      }
    };
    // Small passes (H2O scores every decode query) stay out of OpenMP altogether: entering even a
    // serialized parallel region between the model's parallel kernels cost H2O's decode more than
    // the scoring itself (docs/kv-eviction.md, H2O's decode).
    if (n * w > kParallelScoreWork) {
#pragma omp parallel for schedule(static) num_threads(cpu_num_threads())
      for (int64_t g = 0; g < group; ++g) score_group(g);
    } else {
      for (int64_t g = 0; g < group; ++g) score_group(g);
    }
    out[h].assign(static_cast<size_t>(n), 0.0f);
    for (int64_t g = 0; g < group; ++g) {
      for (int64_t j = 0; j < n; ++j) out[h][j] += partial[g * n + j] / static_cast<float>(group);
    }
  }
  return out;
}

std::vector<float> avg_pool_1d(std::span<const float> x, int kernel) {
  const int64_t n = static_cast<int64_t>(x.size());
  if (kernel <= 1 || n == 0) return {x.begin(), x.end()};
  std::vector<double> prefix(static_cast<size_t>(n + 1), 0.0);
  for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + x[i];
  const int64_t left = (kernel - 1) / 2, right = kernel / 2;
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t lo = std::max<int64_t>(0, i - left), hi = std::min(n, i + right + 1);
    out[i] = static_cast<float>((prefix[hi] - prefix[lo]) / static_cast<double>(hi - lo));
  }
  return out;
}

std::vector<float> max_pool_1d(std::span<const float> x, int kernel) {
  const int64_t n = static_cast<int64_t>(x.size());
  if (kernel <= 1 || n == 0) return {x.begin(), x.end()};
  const int64_t left = (kernel - 1) / 2, right = kernel / 2;
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t lo = std::max<int64_t>(0, i - left), hi = std::min(n, i + right + 1);
    out[i] = *std::max_element(x.begin() + lo, x.begin() + hi);
  }
  return out;
}

std::vector<int64_t> top_k_indices(std::span<const float> x, int64_t k) {
  const int64_t n = static_cast<int64_t>(x.size());
  k = std::clamp<int64_t>(k, 0, n);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int64_t a, int64_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
  std::nth_element(idx.begin(), idx.begin() + k, idx.end(), better);
  idx.resize(static_cast<size_t>(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

int64_t resolve_kv_budget(const KvPolicyOptions& options, int64_t prompt_tokens,
                          const std::string& policy) {
  if (options.budget_tokens > 0) return options.budget_tokens;
  if (options.budget_ratio > 0 && options.budget_ratio <= 1.0) {
    return std::max<int64_t>(
        1, static_cast<int64_t>(
               std::ceil(options.budget_ratio * static_cast<double>(prompt_tokens) - 1e-9)));
  }
  throw InvalidArgument(cat("KV policy '", policy, "': needs budget_tokens > 0 or budget_ratio in ",
                            "(0, 1] (got ", options.budget_tokens, " tokens, ratio ",
                            options.budget_ratio, ")"));
}

}  // namespace tandem::llm
