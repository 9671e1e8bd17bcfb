// SPDX-License-Identifier: Apache-2.0
// Which kernel a convolution runs (ConvKernel::Impl, conv_impl.h), chosen once per geometry for
// the whole input, and the probe that its row bands come out bit-identical to the whole map (the
// guarantee tiles rely on): oneDNN's Winograd on grid-aligned bands, jit_1x1 on any band, else the
// engine's own 1x1 kernel, oneDNN's NHWC brgemm or its generic jit kernel.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cnn/conv_impl.h"
#include "tandem/core/log.h"

#if defined(TANDEM_HAVE_DNNL)

namespace tandem::cnn::kernels {

namespace {

// A 1x1 conv that is not band-exact with jit_1x1 (and does not fit the own kernel) tries oneDNN's
// NHWC brgemm kernel before the generic blocked one on output maps of at most kNhwcMaxPixels
// pixels with at least kNhwcMinChannels input channels.
constexpr int64_t kNhwcMaxPixels = 14 * 14;
constexpr int64_t kNhwcMinChannels = 1024;
constexpr const char* kOwn1x1Name = "tandem:conv1x1_avx512";

bool own_1x1_everywhere() {
  const char* e = std::getenv("TANDEM_CNN_OWN_1X1");
  return e && std::string(e) == "all";
}

bool env_off(const char* name) {
  const char* e = std::getenv(name);
  return e && std::string(e) == "0";
}

// The output tile grid of a oneDNN implementation: 4 for F(4x4, 3x3) Winograd, 2 for F(2x2, 3x3),
// 1 for every other kernel.
int winograd_grid(const std::string& impl) {
  if (impl.find("wino_4x3") != std::string::npos) return 4;
  if (impl.find("wino_2x3") != std::string::npos) return 2;
  return 1;
}

}  // namespace

const std::string& ConvKernel::Impl::full_impl(int threads) {
  if (!full_impl_name.empty()) return full_impl_name;
  if (own_1x1_everywhere() && block == 16 && conv1x1_fits(node) && conv1x1_available() &&
      !plain_layout()) {
    own_1x1 = true;
    full_impl_name = kOwn1x1Name;
    return full_impl_name;
  }
  const Window& w = node.window;
  const int64_t ho = window_output_size(in_full[2], w.kh, w.sh, w.dh, w.pt, w.pb, false);
  const int64_t wo = window_output_size(in_full[3], w.kw, w.sw, w.dw, w.pl, w.pr, false);
  const EdgePads p{w.pt, w.pl, w.pb, w.pr};
  const Dims xd{in_full[0], in_full[1], in_full[2], in_full[3]};
  const Dims yd{in_full[0], node.weight.size(0), ho, wo};
  dnnl::convolution_forward::primitive_desc pd = make_pd(xd, yd, p, "");
  full_impl_name = pd.impl_info_str();
  const int grid = winograd_grid(full_impl_name);
  if ((full_impl_name.find("1x1") == std::string::npos && grid == 1) || ho < 2)
    return full_impl_name;
  static std::mutex cache_mu;
  static std::map<std::array<int64_t, 15>, std::pair<int, std::string>> cache;
  const std::array<int64_t, 15> key{xd[0], xd[1], xd[2], xd[3], yd[1], w.kh,    w.kw,  w.sh,
                                    w.sw,  w.pt,  w.pl,  w.pb,  w.pr,  threads, layout};
  {
    std::lock_guard lk(cache_mu);
    if (auto it = cache.find(key); it != cache.end()) {
      layout = it->second.first;
      full_impl_name = it->second.second;
      own_1x1 = full_impl_name == kOwn1x1Name;
      winograd = winograd && full_impl_name.find("wino") != std::string::npos;
      return full_impl_name;
    }
  }
  if (grid > 1) {
    // oneDNN's Winograd kernels change how they block the channel sum with the number of
    // transform tiles for some geometries (VGG-16's 256- and 512-channel convs: 10-45 of 70
    // grid-aligned row bands rounded differently from the whole map): probe grid-aligned bands
    // and use the direct kernel where they differ.
    if (!bands_exact(ho, threads, grid)) {
      winograd = false;
      prims.clear();
      full_impl_name = make_pd(xd, yd, p, "").impl_info_str();
      log().debug("cnn conv '{}': Winograd is not exact on row bands, using {}", node.name,
                  full_impl_name);
    }
    prims.clear();
    std::lock_guard lk(cache_mu);
    cache.emplace(key, std::make_pair(layout, full_impl_name));
    return full_impl_name;
  }
  bool exact = bands_exact(ho, threads);
  if (!exact && block == 16 && conv1x1_fits(node) && conv1x1_available() &&
      !env_off("TANDEM_CNN_OWN_1X1")) {
    own_1x1 = true;  // exact on any band by construction
    prims.clear();
    full_impl_name = kOwn1x1Name;
    log().debug("cnn conv '{}': jit_1x1 is not exact on row bands, using {}", node.name,
                full_impl_name);
    std::lock_guard lk(cache_mu);
    cache.emplace(key, std::make_pair(layout, full_impl_name));
    return full_impl_name;
  }
  if (!exact && layout == 0 && ho * wo <= kNhwcMaxPixels && xd[1] >= kNhwcMinChannels &&
      !env_off("TANDEM_CNN_1X1_NHWC")) {
    // oneDNN's brgemm 1x1 convolution on NHWC activations (reordered from and to the blocked
    // layout around the conv), when it is exact on bands. Measured on ResNet-50 (one core):
    // on 14x14 and 7x7 outputs it beats the generic jit kernel, reorders included (1024->2048
    // stride 2: 2.0 vs 6.3 ms), on 28x28 and 56x56 it loses (256->512 stride 2: 5.9 vs 2.4),
    // and with fewer input channels the reorders eat the gain (MobileNetV2's projections).
    layout = 2;
    prims.clear();
    full_impl_name = make_pd(xd, yd, p, "").impl_info_str();
    exact = bands_exact(ho, threads);
    log().debug("cnn conv '{}': NHWC {} {} on row bands", node.name, full_impl_name,
                exact ? "is exact" : "is not exact");
    if (!exact) {
      layout = 0;
      full_impl_name = pd.impl_info_str();
    }
  }
  if (!exact) {
    avoid_jit_1x1 = true;
    const std::string alt = make_pd(xd, yd, p, "").impl_info_str();
    if (alt.find("1x1") == std::string::npos) {
      full_impl_name = alt;
    } else {  // no generic blocked kernel: oneDNN's GEMM convolution on NCHW
      avoid_jit_1x1 = false;
      layout = 1;
      prims.clear();
      full_impl_name = make_pd(xd, yd, p, "").impl_info_str();
    }
    log().debug("cnn conv '{}': jit_1x1 is not exact on row bands, using {}{}", node.name,
                full_impl_name, layout == 1 ? " on NCHW" : "");
  }
  prims.clear();  // primitives made while probing
  std::lock_guard lk(cache_mu);
  cache.emplace(key, std::make_pair(layout, full_impl_name));
  return full_impl_name;
}

bool ConvKernel::Impl::bands_exact(int64_t ho, int threads, int grid) {
  const Window& w = node.window;
  Tensor x = Tensor::empty(in_full, DType::kF32);
  float* xp = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i)
    xp[i] = static_cast<float>((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
  const Region all{0, ho, 0, window_output_size(in_full[3], w.kw, w.sw, w.dw, w.pl, w.pr, false)};
  Tensor y = Tensor::empty({in_full[0], node.weight.size(0), all.h1, all.w1}, DType::kF32);
  // The residual, when the conv sums: varied values (the sum's place in the order matters).
  Tensor res = Tensor::empty(y.shape(), DType::kF32);
  float* rp = res.data<float>();
  for (int64_t i = 0; i < res.numel(); ++i)
    rp[i] = static_cast<float>((i * 40503u) % 1999) / 997.0f - 1.0f;
  std::memcpy(y.raw_data(), rp, static_cast<size_t>(res.nbytes()));
  execute(get(x, edge_pads(w, in_full, all), y, threads), xp, y.raw_data());
  std::vector<std::pair<int64_t, int64_t>> bands;  // [h0, h1)
  if (grid <= 1) {
    for (int64_t h = 1; h <= std::min<int64_t>(16, ho - 1); ++h) bands.emplace_back(1, 1 + h);
    bands.emplace_back(1, 1 + std::max<int64_t>(1, ho / 2));
    bands.emplace_back(1, ho);
  } else {
    for (int64_t h0 = 0; h0 <= 2 * grid && h0 < ho; h0 += grid) {
      for (int64_t k = 1; k <= 8; ++k) bands.emplace_back(h0, std::min(ho, h0 + k * grid));
      bands.emplace_back(h0, std::min(ho, (h0 + ho / 2 + grid - 1) / grid * grid));
      bands.emplace_back(h0, ho);
    }
  }
  for (const auto& [h0, h1] : bands) {
    const Region out{h0, h1, all.w0, all.w1};
    const int64_t lo = std::max<int64_t>(0, out.h0 * w.sh - w.pt);
    const int64_t hi = std::min<int64_t>(
        in_full[2], (out.h1 - 1) * w.sh - w.pt + static_cast<int64_t>(w.kh - 1) * w.dh + 1);
    const Tensor xt = x.slice(2, lo, hi).contiguous();
    Tensor yt = Tensor::empty({in_full[0], node.weight.size(0), h1 - h0, all.w1}, DType::kF32);
    const Tensor r = res.slice(2, out.h0, out.h1).contiguous();
    std::memcpy(yt.raw_data(), r.raw_data(), static_cast<size_t>(r.nbytes()));
    execute(get(xt, edge_pads(w, in_full, out), yt, threads), const_cast<void*>(xt.raw_data()),
            yt.raw_data());
    const Tensor want = y.slice(2, out.h0, out.h1).contiguous();
    if (std::memcmp(want.raw_data(), yt.raw_data(), static_cast<size_t>(want.nbytes())) != 0)
      return false;
  }
  return true;
}

int ConvKernel::Impl::output_grid(int threads) {
  OmpThreads scope(threads);
  std::lock_guard lk(mu);
  choose_layout(threads);
  return winograd_grid(full_impl(threads));
}

}  // namespace tandem::cnn::kernels

#endif  // TANDEM_HAVE_DNNL
