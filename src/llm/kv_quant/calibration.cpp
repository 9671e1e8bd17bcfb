// SPDX-License-Identifier: Apache-2.0
// QoKV: window-attention importance, the grouped 8-bit selection, and the offline calibration
// (position groups by 1-D k-means of important positions; per-channel scales by a clipping
// threshold sweep minimising the QK^T error of the deployed quantizers). See kv_quant.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "tandem/core/backend.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_quant.h"

namespace tandem::llm {

void qokv_attention_totals(const float* q, std::span<const int32_t> qpos, int n_heads,
                           int first_head, int group, const float* k, std::span<const int32_t> kpos,
                           int head_dim, std::span<double> total, std::span<int64_t> count) {
  const auto n = static_cast<int64_t>(kpos.size());
  const int64_t d = head_dim;
  if (first_head < 0 || group < 1 || first_head + group > n_heads) {
    throw InvalidArgument(cat("qokv_importance: heads [", first_head, ", ", first_head + group,
                              ") outside ", n_heads));
  }
  if (static_cast<int64_t>(total.size()) != n || static_cast<int64_t>(count.size()) != n) {
    throw InvalidArgument(cat("qokv_attention_totals: ", n, " keys but totals of ", total.size(),
                              " and counts of ", count.size()));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const auto nq = static_cast<int64_t>(qpos.size());
  // The scoring pass is O(queries * keys * d): query rows are split over the CPU threads, each
  // with its own sums, added up in thread order at the end (the result does not depend on the
  // thread count beyond double rounding; one thread sums exactly as a plain loop).
  const int threads = static_cast<int>(std::clamp<int64_t>(nq / 8, 1, cpu_num_threads()));
  std::vector<std::vector<double>> part_total(static_cast<size_t>(threads));
  std::vector<std::vector<int64_t>> part_count(static_cast<size_t>(threads));
#pragma omp parallel num_threads(threads)
  {
#ifdef _OPENMP
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
#else
    const int tid = 0, nt = 1;
#endif
    std::vector<double>& tot = part_total[tid];
    std::vector<int64_t>& cnt = part_count[tid];
    tot.assign(static_cast<size_t>(n), 0.0);
    cnt.assign(static_cast<size_t>(n), 0);
    std::vector<float> p(static_cast<size_t>(n));
    for (int64_t t = nq * tid / nt; t < nq * (tid + 1) / nt; ++t) {
      for (int hh = first_head; hh < first_head + group; ++hh) {
        const float* qv = q + (t * n_heads + hh) * d;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          if (kpos[j] > qpos[t]) continue;
          float sum = 0;
          for (int64_t i = 0; i < d; ++i) sum += qv[i] * k[j * d + i];
          p[j] = sum * scale;
          mx = std::max(mx, p[j]);
        }
        if (mx == -std::numeric_limits<float>::infinity()) continue;
        double z = 0;
        for (int64_t j = 0; j < n; ++j) {
          if (kpos[j] <= qpos[t]) z += (p[j] = std::exp(p[j] - mx));
        }
        for (int64_t j = 0; j < n; ++j) {
          if (kpos[j] > qpos[t]) continue;
          tot[j] += p[j] / z;
          ++cnt[j];
        }
      }
    }
  }
  for (int th = 0; th < threads; ++th) {
    if (part_total[th].empty()) continue;
    for (int64_t j = 0; j < n; ++j) total[j] += part_total[th][j], count[j] += part_count[th][j];
  }
}

std::vector<float> qokv_importance(const float* q, std::span<const int32_t> qpos, int n_heads,
                                   int first_head, int group, const float* k,
                                   std::span<const int32_t> kpos, int head_dim) {
  const size_t n = kpos.size();
  std::vector<double> total(n, 0.0);
  std::vector<int64_t> count(n, 0);
  qokv_attention_totals(q, qpos, n_heads, first_head, group, k, kpos, head_dim, total, count);
  std::vector<float> a(n, 0.0f);
  for (size_t j = 0; j < n; ++j) {
    if (count[j] > 0) a[j] = static_cast<float>(total[j] / static_cast<double>(count[j]));
  }
  return a;
}

std::vector<uint8_t> qokv_select(std::span<const float> importance,
                                 std::span<const double> fractions, double ratio, int groups) {
  const auto n = static_cast<int64_t>(importance.size());
  std::vector<double> f(fractions.begin(), fractions.end());
  if (f.empty()) f.assign(static_cast<size_t>(std::max(groups, 1)), 1.0);
  const double sum = std::accumulate(f.begin(), f.end(), 0.0);
  if (!(sum > 0)) throw InvalidArgument("qokv_select: group fractions sum to zero");
  const auto g = static_cast<int64_t>(f.size());
  const auto per_group = static_cast<int64_t>(std::lround(static_cast<double>(n) * ratio / g));
  std::vector<uint8_t> wide(static_cast<size_t>(n), 0);
  double acc = 0;
  int64_t lo = 0;
  std::vector<int64_t> idx;
  for (int64_t j = 0; j < g; ++j) {
    acc += f[j];
    const int64_t hi =
        j + 1 == g ? n
                   : std::clamp<int64_t>(std::llround(acc / sum * static_cast<double>(n)), lo, n);
    idx.resize(static_cast<size_t>(hi - lo));
    std::iota(idx.begin(), idx.end(), lo);
    const int64_t k = std::min<int64_t>(per_group, hi - lo);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
      return importance[a] != importance[b] ? importance[a] > importance[b] : a < b;
    });
    for (int64_t i = 0; i < k; ++i) wide[idx[i]] = 1;
    lo = hi;
  }
  return wide;
}

namespace {

constexpr int64_t kSearchRows = 256;  // key / value rows in the scale search (strided)

// 1-D k-means (Lloyd) with several seeded initialisations; returns sorted cluster sizes.
std::vector<int64_t> kmeans_1d_sizes(std::vector<double> x, int k) {
  std::sort(x.begin(), x.end());
  const auto n = static_cast<int64_t>(x.size());
  k = static_cast<int>(std::min<int64_t>(k, n));
  std::mt19937 rng(0);
  double best = std::numeric_limits<double>::infinity();
  std::vector<int64_t> best_sizes;
  for (int init = 0; init < 10; ++init) {
    std::vector<double> c(static_cast<size_t>(k));
    for (int j = 0; j < k; ++j) {
      c[j] = init == 0 ? x[(2 * j + 1) * n / (2 * k)]
                       : x[std::uniform_int_distribution<int64_t>(0, n - 1)(rng)];
    }
    std::sort(c.begin(), c.end());
    std::vector<int> label(static_cast<size_t>(n));
    for (int it = 0; it < 100; ++it) {
      bool moved = false;
      for (int64_t i = 0; i < n; ++i) {
        int bj = 0;
        for (int j = 1; j < k; ++j) {
          if (std::fabs(x[i] - c[j]) < std::fabs(x[i] - c[bj])) bj = j;
        }
        moved = moved || label[i] != bj;
        label[i] = bj;
      }
      std::vector<double> s(static_cast<size_t>(k), 0.0);
      std::vector<int64_t> m(static_cast<size_t>(k), 0);
      for (int64_t i = 0; i < n; ++i) s[label[i]] += x[i], ++m[label[i]];
      for (int j = 0; j < k; ++j) {
        if (m[j] > 0) c[j] = s[j] / static_cast<double>(m[j]);
      }
      if (!moved && it > 0) break;
    }
    double inertia = 0;
    for (int64_t i = 0; i < n; ++i) inertia += (x[i] - c[label[i]]) * (x[i] - c[label[i]]);
    if (inertia < best) {
      best = inertia;
      std::vector<std::pair<double, int64_t>> cl(static_cast<size_t>(k), {0.0, 0});
      for (int j = 0; j < k; ++j) cl[j].first = c[j];
      for (int64_t i = 0; i < n; ++i) ++cl[label[i]].second;
      std::sort(cl.begin(), cl.end());
      best_sizes.clear();
      for (const auto& [centre, size] : cl) best_sizes.push_back(size);
    }
  }
  return best_sizes;
}

// Round trip of rows x [n, d] through a deployed 4-bit quantizer: per-token symmetric absmax
// (group 0: the QoKV keys) or affine per `group` channels (scale + min, as KvCodec::kAffine), with
// the codec's f16 scales.
void quant4_roundtrip(std::vector<float>& x, int64_t n, int64_t d, int group) {
  const int64_t g = group <= 0 ? d : std::min<int64_t>(group, d);
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t lo = 0; lo < d; lo += g) {
      float* r = x.data() + s * d + lo;
      const int64_t m = std::min(g, d - lo);
      if (group <= 0) {
        float amax = 0;
        for (int64_t i = 0; i < m; ++i) amax = std::max(amax, std::fabs(r[i]));
        const float sc = f16_to_f32(f32_to_f16(amax / 7.0f));
        if (sc == 0) continue;
        for (int64_t i = 0; i < m; ++i) {
          r[i] = sc * std::clamp(std::nearbyint(r[i] / sc), -7.0f, 7.0f);
        }
        continue;
      }
      float mn = r[0], mx = r[0];
      for (int64_t i = 0; i < m; ++i) mn = std::min(mn, r[i]), mx = std::max(mx, r[i]);
      const float mn16 = f16_to_f32(f32_to_f16(mn));
      const float sc = f16_to_f32(f32_to_f16((mx - mn16) / 15.0f));
      if (sc == 0) continue;
      for (int64_t i = 0; i < m; ++i) {
        r[i] = mn16 + sc * std::clamp(std::nearbyint((r[i] - mn16) / sc), 0.0f, 15.0f);
      }
    }
  }
}

// Clipping-threshold sweep: s_c = max(cmax_c / st, -cmin_c / st, 1) (tied within RoPE pairs
// when `pairs`); keeps the st whose quantized rows give the least error (QK^T for keys with the
// given queries, the rows themselves for values).
std::vector<float> search_scales(const std::vector<float>& x, int64_t n, int64_t d,
                                 const std::vector<float>* q, int64_t nq, int steps, bool pairs,
                                 int group) {
  std::vector<float> cmax(static_cast<size_t>(d), 0.0f), cmin(cmax.size(), 0.0f);
  float amax = 0;
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t i = 0; i < d; ++i) {
      cmax[i] = std::max(cmax[i], x[s * d + i]);
      cmin[i] = std::min(cmin[i], x[s * d + i]);
      amax = std::max(amax, std::fabs(x[s * d + i]));
    }
  }
  std::vector<float> best(static_cast<size_t>(d), 1.0f);
  if (amax <= 1.0f) return best;
  std::vector<double> ref;
  if (q != nullptr) {  // the exact scores
    ref.resize(static_cast<size_t>(nq * n));
    for (int64_t a = 0; a < nq; ++a) {
      for (int64_t s = 0; s < n; ++s) {
        double dot = 0;
        for (int64_t i = 0; i < d; ++i) dot += (*q)[a * d + i] * x[s * d + i];
        ref[a * n + s] = dot;
      }
    }
  }
  double best_err = std::numeric_limits<double>::infinity();
  std::vector<float> sc(static_cast<size_t>(d)), y;
  for (int step = 0; step <= steps; ++step) {
    // st from amax down to 1, geometric (the threshold matters relative to amax).
    const float st = amax * std::pow(1.0f / amax, static_cast<float>(step) / steps);
    for (int64_t i = 0; i < d; ++i) sc[i] = std::max({cmax[i] / st, -cmin[i] / st, 1.0f});
    if (pairs) {
      for (int64_t i = 0; i + 1 < d; i += 2) sc[i] = sc[i + 1] = std::max(sc[i], sc[i + 1]);
    }
    y = x;
    for (int64_t s = 0; s < n; ++s) {
      for (int64_t i = 0; i < d; ++i) y[s * d + i] /= sc[i];
    }
    quant4_roundtrip(y, n, d, group);
    for (int64_t s = 0; s < n; ++s) {
      for (int64_t i = 0; i < d; ++i) y[s * d + i] *= sc[i];
    }
    double err = 0;
    if (q != nullptr) {
      for (int64_t a = 0; a < nq; ++a) {
        for (int64_t s = 0; s < n; ++s) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += (*q)[a * d + i] * y[s * d + i];
          err += (dot - ref[a * n + s]) * (dot - ref[a * n + s]);
        }
      }
    } else {
      for (size_t i = 0; i < y.size(); ++i) err += (y[i] - x[i]) * (y[i] - x[i]);
    }
    if (err < best_err) best_err = err, best = sc;
  }
  return best;
}

}  // namespace

QokvLayerCalibration calibrate_qokv_layer(std::span<const QokvSample> samples, int n_heads,
                                          int n_kv_heads, int head_dim,
                                          const QokvCalibrationOptions& o) {
  if (samples.empty()) throw InvalidArgument("calibrate_qokv_layer: no samples");
  if (n_heads < 1 || n_kv_heads < 1 || n_heads % n_kv_heads != 0 || head_dim < 1 || o.groups < 1) {
    throw InvalidArgument(cat("calibrate_qokv_layer: ", n_heads, " heads, ", n_kv_heads,
                              " KV heads, head_dim ", head_dim, ", ", o.groups, " groups"));
  }
  const int64_t d = head_dim, group = n_heads / n_kv_heads;
  for (const QokvSample& s : samples) {
    if (s.n < 2 || static_cast<int64_t>(s.q.size()) != s.n * n_heads * d ||
        static_cast<int64_t>(s.k.size()) != s.n * n_kv_heads * d || s.v.size() != s.k.size()) {
      throw InvalidArgument(cat("calibrate_qokv_layer: a sample of ", s.n, " tokens has q/k/v of ",
                                s.q.size(), "/", s.k.size(), "/", s.v.size(), " values"));
    }
  }
  QokvLayerCalibration out;
  // A: group fractions, averaged over the samples.
  out.group_fractions.assign(static_cast<size_t>(o.groups), 0.0);
  for (const QokvSample& s : samples) {
    std::vector<int32_t> pos(static_cast<size_t>(s.n));
    std::iota(pos.begin(), pos.end(), 0);
    std::vector<double> abar(static_cast<size_t>(s.n), 0.0);
    std::vector<float> kh(static_cast<size_t>(s.n * d));
    for (int h = 0; h < n_kv_heads; ++h) {
      for (int64_t t = 0; t < s.n; ++t) {
        std::copy_n(s.k.data() + (t * n_kv_heads + h) * d, d, kh.data() + t * d);
      }
      const auto a = qokv_importance(s.q.data(), pos, n_heads, static_cast<int>(h * group),
                                     static_cast<int>(group), kh.data(), pos, head_dim);
      for (int64_t j = 0; j < s.n; ++j) abar[j] += a[j];
    }
    const int64_t top = std::max<int64_t>(std::min<int64_t>(o.top_tokens, s.n / 2), o.groups);
    std::vector<int64_t> idx(static_cast<size_t>(s.n));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + std::min(top, s.n), idx.end(),
                      [&](int64_t a, int64_t b) { return abar[a] > abar[b]; });
    std::vector<double> x;
    for (int64_t i = 0; i < std::min(top, s.n); ++i) x.push_back(static_cast<double>(idx[i]));
    const std::vector<int64_t> sizes = kmeans_1d_sizes(x, o.groups);
    std::vector<double> dens;
    for (int64_t m : sizes) dens.push_back(m > 0 ? static_cast<double>(x.size()) / m : 0.0);
    const double ds = std::accumulate(dens.begin(), dens.end(), 0.0);
    for (size_t g = 0; g < dens.size(); ++g) {
      out.group_fractions[g] += dens[g] / ds / static_cast<double>(samples.size());
    }
  }
  // B: channel scales per KV head, on the first sample's rows (at most kSearchRows, strided; keys:
  // the QK^T error of the last search_queries queries of the group's heads; values: the rows' own
  // error under the deployed value quantizer). Rows and queries of every sample were tried too
  // (docs/results/kv-quant-smollm2.md): on SmolLM2 they gave worse perplexity.
  out.k_scale.resize(static_cast<size_t>(n_kv_heads));
  out.v_scale.resize(static_cast<size_t>(n_kv_heads));
  for (int h = 0; h < n_kv_heads; ++h) {
    if (!o.channel_scales) {
      out.k_scale[h].assign(static_cast<size_t>(d), 1.0f);
      out.v_scale[h].assign(static_cast<size_t>(d), 1.0f);
      continue;
    }
    std::vector<float> k, v, q;
    const QokvSample& s = samples.front();
    const int64_t stride = std::max<int64_t>(1, s.n / kSearchRows);
    for (int64_t t = 0; t < s.n; t += stride) {
      const float* kr = s.k.data() + (t * n_kv_heads + h) * d;
      const float* vr = s.v.data() + (t * n_kv_heads + h) * d;
      k.insert(k.end(), kr, kr + d);
      v.insert(v.end(), vr, vr + d);
    }
    const int64_t nq = std::clamp<int64_t>(o.search_queries, 1, s.n);
    for (int64_t t = s.n - nq; t < s.n; ++t) {
      for (int64_t g = 0; g < group; ++g) {
        const float* qr = s.q.data() + (t * n_heads + h * group + g) * d;
        q.insert(q.end(), qr, qr + d);
      }
    }
    const int64_t n = static_cast<int64_t>(k.size()) / d;
    out.k_scale[h] =
        search_scales(k, n, d, &q, static_cast<int64_t>(q.size()) / d, o.search_steps, true, 0);
    out.v_scale[h] = search_scales(v, n, d, nullptr, 0, o.search_steps, false, o.value_group);
  }
  return out;
}

}  // namespace tandem::llm
