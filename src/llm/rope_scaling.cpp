// SPDX-License-Identifier: Apache-2.0
// RoPE with scaled frequencies (linear, YaRN, llama3 rope_freqs); see model.h. The frequencies
// follow llama.cpp's ggml_rope_ext: pair i of an n_dims-wide rotation turns by
//   theta_extrap = pos * base^(-2i/n_dims) / freq_factor[i],   theta_interp = theta_extrap / factor
// and YaRN blends them per pair: theta = theta_interp (1 - r_i) + theta_extrap r_i with
// r_i = ext_factor * ramp(i), where the ramp is 1 below the "fast" correction dim, 0 above the
// "slow" one and linear between; cos and sin are scaled by attn_factor (1 + 0.1 ln factor).
// Since theta is linear in pos, each pair keeps one effective frequency.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/llm/model.h"

namespace tandem::llm {
namespace {

// The dim (of n_dims) at which a wavelength makes n_rot turns over the original context.
double yarn_corr_dim(int n_dims, int64_t n_ctx_orig, double n_rot, double base) {
  return n_dims * std::log(static_cast<double>(n_ctx_orig) / (n_rot * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(base));
}

}  // namespace

std::vector<double> rope_pair_frequencies(const ModelConfig& c, std::span<const float> factors) {
  const int n_dims = c.rope_dim, half = n_dims / 2;
  if (!factors.empty() && static_cast<int>(factors.size()) != half) {
    throw InvalidArgument(cat("rope_pair_frequencies: ", factors.size(), " frequency factors for ",
                              half, " rotary pairs"));
  }
  const double base = c.rope_theta;
  const RopeScaling& s = c.rope_scaling;
  const double freq_scale = s.type == RopeScalingType::kNone ? 1.0 : 1.0 / s.factor;
  const double ext = s.type == RopeScalingType::kYarn ? s.ext_factor : 0.0;
  double low = 0.0, high = 0.0;
  if (ext != 0.0) {
    low = std::max(0.0, std::floor(yarn_corr_dim(n_dims, s.orig_context, s.beta_fast, base)));
    high =
        std::min(n_dims - 1.0, std::ceil(yarn_corr_dim(n_dims, s.orig_context, s.beta_slow, base)));
  }
  std::vector<double> freqs(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    double extrap = std::pow(base, -2.0 * i / n_dims);
    if (!factors.empty()) extrap /= factors[i];
    const double interp = freq_scale * extrap;
    double f = interp;
    if (ext != 0.0) {
      const double y = (i - low) / std::max(0.001, high - low);
      const double mix = (1.0 - std::clamp(y, 0.0, 1.0)) * ext;
      f = interp * (1.0 - mix) + extrap * mix;
    }
    freqs[i] = f;
  }
  return freqs;
}

double rope_pair_magnitude(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScalingType::kNone) return 1.0;
  double m = s.attn_factor;
  if (s.type == RopeScalingType::kYarn && s.ext_factor != 0.0f) {
    m *= 1.0 + 0.1 * std::log(static_cast<double>(s.factor));
  }
  return m;
}

void rope_with_frequencies(Tensor& x, std::span<const int32_t> positions,
                           std::span<const double> freqs, double magnitude) {
  if (x.rank() != 3 || x.dtype() != DType::kF32 || !x.is_contiguous() || !x.device().is_cpu() ||
      x.size(0) != static_cast<int64_t>(positions.size()) ||
      2 * static_cast<int64_t>(freqs.size()) > x.size(2)) {
    throw InvalidArgument(cat("rope_with_frequencies: x ", x.to_string(),
                              " must be contiguous f32 cpu [", positions.size(),
                              ", H, D >= ", 2 * freqs.size(), "]"));
  }
  const int64_t t_count = x.size(0), h = x.size(1), d = x.size(2);
  const int64_t half = static_cast<int64_t>(freqs.size());
  float* xp = x.data<float>();
  const int threads = static_cast<int>(std::clamp<int64_t>(
      t_count * h * d / (int64_t{1} << 15), 1, std::min<int64_t>(t_count, cpu_num_threads())));
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int64_t t = 0; t < t_count; ++t) {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      const double ang = static_cast<double>(positions[t]) * freqs[i];
      cs[i] = static_cast<float>(std::cos(ang) * magnitude);
      sn[i] = static_cast<float>(std::sin(ang) * magnitude);
    }
    for (int64_t hh = 0; hh < h; ++hh) {
      float* r = xp + (t * h + hh) * d;
      for (int64_t i = 0; i < half; ++i) {
        const float a = r[2 * i], b = r[2 * i + 1];
        r[2 * i] = a * cs[i] - b * sn[i];
        r[2 * i + 1] = a * sn[i] + b * cs[i];
      }
    }
  }
}

}  // namespace tandem::llm
