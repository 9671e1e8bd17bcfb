// SPDX-License-Identifier: Apache-2.0
// Convolution of the CNN engine: oneDNN's convolution primitive with bias and the fused
// activation as post-ops, weights packed once per layout, the source passed as a strided view;
// 1x1 convs that oneDNN's jit_1x1 cannot run band-exactly go to the engine's own AVX-512 kernel
// (conv1x1.h). Fallback without oneDNN: the core ops::conv2d, then the activation.
#include <omp.h>
#include <strings.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cnn/conv1x1.h"
#include "cnn/kernels.h"
#include "cnn/vector_exp.h"
#include "tandem/core/error.h"
#include "tandem/core/log.h"
#include "tandem/ops/ops.h"

#if defined(TANDEM_HAVE_DNNL)
#include <dnnl.hpp>
#endif

namespace tandem::cnn::kernels {

namespace {

// Runs with `threads` OpenMP threads on this thread, restoring the previous setting (oneDNN reads
// omp_get_max_threads() when it creates and when it runs a primitive).
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : saved_(omp_get_max_threads()), want_(std::max(threads, 1)) {
    if (want_ != saved_) omp_set_num_threads(want_);
  }
  ~OmpThreads() {
    if (want_ != saved_) omp_set_num_threads(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_, want_;
};

}  // namespace

#if defined(TANDEM_HAVE_DNNL)

namespace {

using Dims = dnnl::memory::dims;
using Tag = dnnl::memory::format_tag;
constexpr auto kF32 = dnnl::memory::data_type::f32;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// A primitive for one source shape/strides, padding and thread count, with its reorders and
// buffers.
struct Prim {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  dnnl::memory::desc src_user, dst_user;
  dnnl::reorder src_reorder, dst_reorder, dst_in_reorder;  // dst_in: residual into dst_buf
  dnnl::memory src_buf, dst_buf, scratch, src_scratch, dst_scratch, dst_in_scratch;
  dnnl::memory weights;      // packed into pd.weights_desc() (shared between primitives)
  bool dst_blocked = false;  // whole-input primitive: dst_user is the blocked layout
  bool post_silu = false;    // a Winograd conv of a SiLU node: SiLU runs after it (vector_exp.h)
  // Bound on the first execution and reused (only the data handles change per call): the stream,
  // the user memories and the convolution's arguments.
  bool bound = false;
  dnnl::stream stream;
  dnnl::memory src_mem, dst_mem;
  std::unordered_map<int, dnnl::memory> conv_args;
};

// key: N, C, H, W, 4 source strides, 4 edge pads, threads
using PrimKey = std::array<int64_t, 14>;  // + the activation layout (plain or any)

// Largest output map (pixels) for which a 1x1 conv that is not band-exact with jit_1x1 tries
// oneDNN's NHWC brgemm kernel before the generic blocked one.
// and at least this many input channels.
constexpr int64_t kNhwcMaxPixels = 14 * 14;
constexpr const char* kOwn1x1Name = "tandem:conv1x1_avx512";
constexpr int64_t kNhwcMinChannels = 1024;

bool own_1x1_everywhere() {
  const char* e = std::getenv("TANDEM_CNN_OWN_1X1");
  return e && std::string(e) == "all";
}

bool env_off(const char* name) {
  const char* e = std::getenv(name);
  return e && std::string(e) == "0";
}

Tag block_tag(int block) { return block == 16 ? Tag::nChw16c : Tag::nChw8c; }

// A scratchpad memory without storage of its own: execute() points it at the calling thread's
// shared scratch buffer before every use.
dnnl::memory make_scratch(const dnnl::memory::desc& md) {
  return md.get_size() > 0 ? dnnl::memory(md, engine(), nullptr) : dnnl::memory();
}

// One scratch buffer per calling thread, shared by every conv and reorder it runs (they run one
// at a time). The Winograd kernels need 2-17 MB each; a buffer per primitive was cold in cache at
// every call (ResNet-50's 3x3 Winograd convs took 1.4-2.2x the time they take on a warm buffer).
void bind_scratch(const dnnl::memory& m) {
  if (!m) return;
  thread_local std::vector<char> buf;
  const size_t need = m.get_desc().get_size() + 64;
  if (buf.size() < need) buf.assign(need, 0);
  const uintptr_t a = (reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63};
  m.set_data_handle(reinterpret_cast<void*>(a));
}

}  // namespace

struct ConvKernel::Impl {
  Node node;
  Shape in_full;
  bool direct_dw = false;
  bool onednn = true;
  std::string full_impl_name;
  std::string used_impl;  // the implementation of the primitive made last (profile)
  std::mutex mu;
  std::map<PrimKey, std::unique_ptr<Prim>> prims;
  std::vector<std::pair<dnnl::memory::desc, dnnl::memory>> packed;  // weights per layout
  dnnl::memory::desc weights_user, bias_md;

  dnnl::memory packed_weights(const dnnl::memory::desc& want) {
    for (auto& [md, mem] : packed)
      if (md == want) return mem;
    dnnl::memory user(weights_user, engine(), node.weight.raw_data());
    dnnl::memory mem(want, engine());
    if (want == weights_user) {
      mem = user;
    } else {
      dnnl::stream st(engine());
      dnnl::reorder(user, mem).execute(st, user, mem);
      st.wait();
    }
    packed.emplace_back(want, mem);
    return mem;
  }

  // The primitive descriptor for a source of `xd` dims/`xs` strides and edge pads `p`. When
  // `match` is set, the implementation with that name is chosen if oneDNN offers it (so tiles use
  // the kernel of the whole-image run and give bit-identical results).
  dnnl::convolution_forward::primitive_desc make_pd(const Dims& xd, const Dims& yd,
                                                    const EdgePads& p, const std::string& match) {
    return make_pd_alg(xd, yd, p, match, winograd);
  }

  dnnl::convolution_forward::primitive_desc make_pd_alg(const Dims& xd, const Dims& yd,
                                                        const EdgePads& p, const std::string& match,
                                                        bool allow_winograd) {
    const Window& w = node.window;
    // 1x1 convolutions run as a GEMM straight on NCHW (oneDNN's gemm convolution): no reorder of
    // the activations in or out, which costs more than the blocked kernel gains. Others let
    // oneDNN pick (blocked nChw16c, reordered per call).
    // Otherwise the activations are blocked (nChw16c on AVX-512, nChw8c below): the layout the
    // executor keeps between ops, so a whole-image run has no reorder around the conv. A source
    // with fewer channels than a block (the image) is left to oneDNN; so are grouped convs whose
    // groups do not fill whole blocks (depthwise ones do: oneDNN's jit_dw runs on blocks).
    Tag src_tag = Tag::nchw, dst_tag = Tag::nchw;
    if (layout == 2) {
      src_tag = dst_tag = Tag::nhwc;
    } else if (!plain_layout()) {
      const bool fits = node.groups == 1 || is_depthwise(node) ||
                        (xd[1] / node.groups % block == 0 && yd[1] / node.groups % block == 0);
      dst_tag = fits ? block_tag(block) : Tag::any;
      src_tag = fits && xd[1] >= block ? block_tag(block) : Tag::any;
    }
    const dnnl::memory::desc src_any(xd, kF32, src_tag);
    const dnnl::memory::desc dst_any(yd, kF32, dst_tag);
    const dnnl::memory::desc w_any(weights_user.dims(), kF32, Tag::any);
    const Dims strides{w.sh, w.sw}, dil{w.dh - 1, w.dw - 1};
    const Dims pad_l{p.top, p.left}, pad_r{p.bottom, p.right};
    const auto prop = dnnl::prop_kind::forward_inference;
    // Winograd (opt-in) for 3x3 stride-1 convs: fewer multiplications, but the result of a pixel
    // depends on its place in the transform's output tile, so tiles are no longer bit-identical.
    const bool wino = allow_winograd && !plain_layout() && w.kh == 3 && w.kw == 3 && w.sh == 1 &&
                      w.sw == 1 && w.dh == 1 && w.dw == 1 && node.groups == 1 && xd[1] >= block &&
                      yd[1] >= block;
    const auto alg =
        wino ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct;
    auto desc = node.bias.defined()
                    ? dnnl::convolution_forward::desc(prop, alg, src_any, w_any, bias_md, dst_any,
                                                      strides, dil, pad_l, pad_r)
                    : dnnl::convolution_forward::desc(prop, alg, src_any, w_any, dst_any, strides,
                                                      dil, pad_l, pad_r);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const Activation& a = node.act;
    const bool residual = node.inputs.size() == 2;
    if (a.kind != ActKind::kNone || residual) {
      dnnl::post_ops po;
      if (residual) po.append_sum(1.0f);  // dst holds the residual; the conv accumulates onto it
      switch (a.kind) {
        case ActKind::kRelu:
          po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
          break;
        case ActKind::kLeakyRelu:
          po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, a.alpha, 0.0f);
          break;
        case ActKind::kClip:
          po.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, a.alpha, a.beta);
          break;
        case ActKind::kSigmoid:
          po.append_eltwise(1.0f, dnnl::algorithm::eltwise_logistic, 0.0f, 0.0f);
          break;
        case ActKind::kSilu:
          // oneDNN's Winograd kernels take no swish post-op: execute() applies SiLU after them.
          if (!wino) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);
          break;
        case ActKind::kNone:
          break;
      }
      attr.set_post_ops(po);
    }
    dnnl::convolution_forward::primitive_desc pd;
    try {
      pd = dnnl::convolution_forward::primitive_desc(desc, attr, engine());
    } catch (const dnnl::error&) {
      if (!wino) throw;
      return make_pd_alg(xd, yd, p, match, false);  // no Winograd kernel here: direct
    }
    if (wino && match.empty()) {  // prefer F(4x4, 3x3) (jit_wino_4x3) over F(2x2, 3x3)
      dnnl::convolution_forward::primitive_desc first = pd;
      do {
        if (std::string(pd.impl_info_str()).find("wino_4x3") != std::string::npos) return pd;
      } while (pd.next_impl());
      return first;
    }
    if (avoid_jit_1x1 && match.empty()) {  // the generic jit kernel, when oneDNN offers it
      dnnl::convolution_forward::primitive_desc first = pd;
      do {
        const std::string name = pd.impl_info_str();
        if (name.find("1x1") == std::string::npos && name.rfind("jit:", 0) == 0) return pd;
      } while (pd.next_impl());
      return first;
    }
    if (match.empty() || pd.impl_info_str() == match) return pd;
    dnnl::convolution_forward::primitive_desc first = pd;
    while (pd.next_impl())
      if (pd.impl_info_str() == match) return pd;
    log().debug("cnn conv '{}': implementation {} unavailable for a tile, using {}", node.name,
                match, first.impl_info_str());
    return first;
  }

  int layout = -1;  // 1: plain NCHW activations (oneDNN's gemm convolution); 0: blocked
  int block = 16;   // channels per block of the blocked layout
  bool winograd = false;
  bool avoid_jit_1x1 = false;  // set when jit_1x1 is not exact on row bands (full_impl)
  // The engine's own AVX-512 1x1 kernel (conv1x1.h) instead of oneDNN: set by full_impl when
  // jit_1x1 is not exact on row bands and the conv fits it.
  bool own_1x1 = false;
  std::unique_ptr<Conv1x1Weights> own_weights;
  const Conv1x1Weights& own_packed() {
    if (!own_weights) own_weights = std::make_unique<Conv1x1Weights>(pack_conv1x1(node));
    return *own_weights;
  }
  bool plain_layout() const { return layout == 1; }

  // TANDEM_CNN_CONV_LAYOUT=plain runs every conv on plain NCHW activations (oneDNN's gemm
  // convolution, no activation reorders); the default is the blocked layout.
  void choose_layout(int) {
    if (layout >= 0) return;
    const char* e = std::getenv("TANDEM_CNN_CONV_LAYOUT");
    layout = e && std::string(e) == "plain" ? 1 : 0;
  }

  // The implementation oneDNN picks for the whole input (computed once). oneDNN's jit_1x1 kernel
  // blocks the input-channel sum by the output height (small maps with many channels), so a row
  // band can round differently from the whole map; for 1x1 convs the choice is probed once per
  // geometry (process-wide) and replaced, when a band differs, by the engine's own 1x1 kernel
  // (conv1x1.h), else oneDNN's NHWC brgemm kernel or its generic blocked jit kernel.
  // TANDEM_CNN_OWN_1X1=0 never uses the own kernel, =all uses it for every 1x1 conv it fits.
  const std::string& full_impl(int threads) {
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
    const int grid = full_impl_name.find("wino_4x3") != std::string::npos   ? 4
                     : full_impl_name.find("wino_2x3") != std::string::npos ? 2
                                                                            : 0;
    if ((full_impl_name.find("1x1") == std::string::npos && !grid) || ho < 2) return full_impl_name;
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
    if (grid) {
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

  // Whether row bands (full width) of the whole-input result come out bit-identical with the
  // implementation in full_impl_name: with grid 1, rows 1.. of heights 1..16, half and all but
  // one; with a Winograd grid g, bands starting at rows 0, g and 2g of heights g..8g, half and
  // the rest of the map (rounded to the grid, as the region algebra computes them).
  bool bands_exact(int64_t ho, int threads, int grid = 1) {
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

  Prim& get(const Tensor& x, const EdgePads& p, const Tensor& y, int threads) {
    choose_layout(threads);
    const PrimKey key{layout,      x.size(0),   x.size(1),   x.size(2),   x.size(3),
                      x.stride(0), x.stride(1), x.stride(2), x.stride(3), p.top,
                      p.left,      p.bottom,    p.right,     threads};
    auto it = prims.find(key);
    if (it != prims.end()) return *it->second;
    auto e = std::make_unique<Prim>();
    e->src_user = dnnl::memory::desc(Dims{x.size(0), x.size(1), x.size(2), x.size(3)}, kF32,
                                     Dims{x.stride(0), x.stride(1), x.stride(2), x.stride(3)});
    e->dst_user =
        dnnl::memory::desc(Dims{y.size(0), y.size(1), y.size(2), y.size(3)}, kF32, Tag::nchw);
    e->pd = make_pd(e->src_user.dims(), e->dst_user.dims(), p, full_impl(threads));
    finish(*e);
    used_impl = e->pd.impl_info_str();
    log().debug("cnn conv '{}' x {}: {} ({} threads)", node.name, x.shape().to_string(),
                e->pd.impl_info_str(), threads);
    return *prims.emplace(key, std::move(e)).first->second;
  }

  // The primitive, its scratchpad, the reorders between the user layouts and the primitive's, and
  // the packed weights.
  void finish(Prim& pr) {
    Prim* e = &pr;
    e->prim = dnnl::convolution_forward(e->pd);
    e->post_silu = node.act.kind == ActKind::kSilu &&
                   std::string(e->pd.impl_info_str()).find("wino") != std::string::npos;
    e->scratch = make_scratch(e->pd.scratchpad_desc());
    dnnl::primitive_attr rattr;
    rattr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (e->pd.src_desc() != e->src_user) {
      dnnl::reorder::primitive_desc rpd(engine(), e->src_user, engine(), e->pd.src_desc(), rattr);
      e->src_reorder = dnnl::reorder(rpd);
      e->src_buf = dnnl::memory(e->pd.src_desc(), engine());
      e->src_scratch = make_scratch(rpd.scratchpad_desc());
    }
    if (e->pd.dst_desc() != e->dst_user) {
      dnnl::reorder::primitive_desc rpd(engine(), e->pd.dst_desc(), engine(), e->dst_user, rattr);
      e->dst_reorder = dnnl::reorder(rpd);
      e->dst_buf = dnnl::memory(e->pd.dst_desc(), engine());
      e->dst_scratch = make_scratch(rpd.scratchpad_desc());
      if (node.inputs.size() == 2) {
        dnnl::reorder::primitive_desc in_rpd(engine(), e->dst_user, engine(), e->pd.dst_desc(),
                                             rattr);
        e->dst_in_reorder = dnnl::reorder(in_rpd);
        e->dst_in_scratch = make_scratch(in_rpd.scratchpad_desc());
      }
    }
    e->weights = packed_weights(e->pd.weights_desc());
  }

  void run(const Tensor& x, const EdgePads& p, Tensor& y, int threads) {
    OmpThreads scope(threads);
    std::lock_guard lk(mu);
    choose_layout(threads);
    full_impl(threads);
    if (own_1x1) {
      conv1x1_nchw_tile(own_packed(), node, x, y, threads);
      return;
    }
    execute(get(x, p, y, threads), const_cast<void*>(x.raw_data()), y.raw_data());
  }

  // Whole-input primitive with the source in the executor's layout `src_block` (0: NCHW, else
  // nChw{block}c) and the destination in the conv's own layout when that is the blocked one.
  Prim& get_full(int src_block, int threads) {
    choose_layout(threads);
    const PrimKey key{layout, -1, src_block, threads, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    auto it = prims.find(key);
    if (it != prims.end()) return *it->second;
    const Window& w = node.window;
    const int64_t ho = window_output_size(in_full[2], w.kh, w.sh, w.dh, w.pt, w.pb, false);
    const int64_t wo = window_output_size(in_full[3], w.kw, w.sw, w.dw, w.pl, w.pr, false);
    // The source is cropped to the rows and columns the output reads, as for a tile (a 1x1
    // stride-2 conv skips the last row of an even input): the same geometry, so the same kernel.
    const int64_t h1 = std::min(in_full[2], (ho - 1) * w.sh - w.pt + (w.kh - 1) * w.dh + 1);
    const int64_t w1 = std::min(in_full[3], (wo - 1) * w.sw - w.pl + (w.kw - 1) * w.dw + 1);
    const Dims full_dims{in_full[0], in_full[1], in_full[2], in_full[3]};
    const Dims xd{in_full[0], in_full[1], h1, w1};
    const Dims yd{in_full[0], node.weight.size(0), ho, wo};
    auto e = std::make_unique<Prim>();
    e->src_user = dnnl::memory::desc(full_dims, kF32, src_block ? block_tag(src_block) : Tag::nchw);
    if (xd != full_dims) e->src_user = e->src_user.submemory_desc(xd, Dims{0, 0, 0, 0});
    const EdgePads p = edge_pads(w, in_full, Region{0, ho, 0, wo});
    e->pd = make_pd(xd, yd, p, full_impl(threads));
    const dnnl::memory::desc blocked(yd, kF32, block_tag(block));
    // NHWC convs (layout 2) reorder from and to the blocked layout inside.
    e->dst_blocked = e->pd.dst_desc() == blocked || (layout == 2 && src_block == block);
    e->dst_user = e->dst_blocked ? blocked : dnnl::memory::desc(yd, kF32, Tag::nchw);
    finish(*e);
    used_impl = e->pd.impl_info_str();
    log().debug("cnn conv '{}' whole input (source {}): {} ({} threads)", node.name,
                src_block ? "blocked" : "plain", e->pd.impl_info_str(), threads);
    return *prims.emplace(key, std::move(e)).first->second;
  }

  int output_grid(int threads) {
    OmpThreads scope(threads);
    std::lock_guard lk(mu);
    choose_layout(threads);
    const std::string& name = full_impl(threads);
    if (name.find("wino_4x3") != std::string::npos) return 4;
    if (name.find("wino_2x3") != std::string::npos) return 2;
    return 1;
  }

  int full_dst_block(int src_block, int threads) {
    // oneDNN fixes a primitive's thread count when it creates it: plan under the run's count.
    OmpThreads scope(threads);
    std::lock_guard lk(mu);
    choose_layout(threads);
    full_impl(threads);
    if (own_1x1) {
      used_impl = full_impl_name;
      own_packed();
      return 16;
    }
    Prim& e = get_full(src_block, threads);
    return e.dst_blocked ? block : 0;
  }

  void run_full(const float* src, int src_block, float* dst, int threads) {
    OmpThreads scope(threads);
    std::lock_guard lk(mu);
    if (own_1x1) {
      conv1x1_whole(own_packed(), node, in_full, src, src_block, dst, threads);
      return;
    }
    execute(get_full(src_block, threads), const_cast<float*>(src), dst);
  }

  void execute(Prim& e, void* x, void* y) {
    if (!e.bound) {
      e.stream = dnnl::stream(engine());
      e.src_mem = dnnl::memory(e.src_user, engine(), x);
      e.dst_mem = dnnl::memory(e.dst_user, engine(), y);
      e.conv_args = {{DNNL_ARG_SRC, e.src_reorder ? e.src_buf : e.src_mem},
                     {DNNL_ARG_WEIGHTS, e.weights},
                     {DNNL_ARG_DST, e.dst_reorder ? e.dst_buf : e.dst_mem}};
      if (node.bias.defined())
        e.conv_args.emplace(DNNL_ARG_BIAS, dnnl::memory(bias_md, engine(), node.bias.raw_data()));
      if (e.scratch) e.conv_args.emplace(DNNL_ARG_SCRATCHPAD, e.scratch);
      e.bound = true;
    } else {
      e.src_mem.set_data_handle(x);
      e.dst_mem.set_data_handle(y);
    }
    dnnl::stream& st = e.stream;
    const dnnl::memory& src = e.src_mem;
    const dnnl::memory& dst = e.dst_mem;
    auto reorder = [&](const dnnl::reorder& r, const dnnl::memory& from, const dnnl::memory& to,
                       const dnnl::memory& pad) {
      std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
      bind_scratch(pad);
      if (pad) args.emplace(DNNL_ARG_SCRATCHPAD, pad);
      r.execute(st, args);
    };
    if (e.src_reorder) reorder(e.src_reorder, src, e.src_buf, e.src_scratch);
    if (e.dst_in_reorder) reorder(e.dst_in_reorder, dst, e.dst_buf, e.dst_in_scratch);
    bind_scratch(e.scratch);
    e.prim.execute(st, e.conv_args);
    if (e.dst_reorder) reorder(e.dst_reorder, e.dst_buf, dst, e.dst_scratch);
    st.wait();
    if (e.post_silu)  // blocked padding lanes stay zero: SiLU(0) = 0
      silu_inplace(static_cast<float*>(y), static_cast<int64_t>(e.dst_user.get_size() / 4),
                   omp_get_max_threads());
  }
};

#else

struct ConvKernel::Impl {
  Node node;
  Shape in_full;
  bool direct_dw = false;
  bool onednn = false;
  void run(const Tensor&, const EdgePads&, Tensor&, int) {
    throw Unsupported("cnn: built without oneDNN");
  }
  int full_dst_block(int, int) { return 0; }
  int output_grid(int) { return 1; }
  void run_full(const float*, int, float*, int) { throw Unsupported("cnn: built without oneDNN"); }
  std::string used_impl;
  int layout = 1;
  bool plain_layout() const { return true; }
};

#endif

ConvKernel::ConvKernel(const Node& node, const Shape& in_full, bool use_onednn, bool winograd)
    : impl_(std::make_unique<Impl>()) {
  impl_->node = node;
  impl_->in_full = in_full;
  {
    const Window& w = node.window;
    const int64_t ho = window_output_size(in_full[2], w.kh, w.sh, w.dh, w.pt, w.pb, false);
    const int64_t wo = window_output_size(in_full[3], w.kw, w.sw, w.dw, w.pl, w.pr, false);
    flops_ = 2 * in_full[0] * node.weight.size(0) * node.weight.size(1) * w.kh * w.kw * ho * wo;
    bytes_ = 4 * (in_full.numel() + in_full[0] * node.weight.size(0) * ho * wo);
  }
  // Depthwise: oneDNN's jit depthwise kernel on blocked activations (activation fused); the
  // engine's direct NCHW kernel without oneDNN or with TANDEM_CNN_DEPTHWISE=direct.
  const char* dw = std::getenv("TANDEM_CNN_DEPTHWISE");
  impl_->direct_dw = is_depthwise(node) && (!use_onednn || (dw && std::string(dw) == "direct"));
#if defined(TANDEM_HAVE_DNNL)
  impl_->onednn = use_onednn;
  impl_->block = block_size();
  {
    static const int64_t min_pixels = [] {
      const char* e = std::getenv("TANDEM_CNN_WINOGRAD_MIN_PIXELS");
      return e ? std::atoll(e) : kWinogradMinPixels;
    }();
    const Window& wn = node.window;
    const int64_t ho = window_output_size(in_full[2], wn.kh, wn.sh, wn.dh, wn.pt, wn.pb, false);
    const int64_t wo = window_output_size(in_full[3], wn.kw, wn.sw, wn.dw, wn.pl, wn.pr, false);
    impl_->winograd = winograd && ho * wo >= min_pixels;
  }
  const int64_t g = node.groups;
  const Tensor& w = node.weight;
  const Dims wdims = g > 1 ? Dims{g, w.size(0) / g, w.size(1), w.size(2), w.size(3)}
                           : Dims{w.size(0), w.size(1), w.size(2), w.size(3)};
  impl_->weights_user = dnnl::memory::desc(wdims, kF32, g > 1 ? Tag::goihw : Tag::oihw);
  impl_->bias_md = dnnl::memory::desc(Dims{w.size(0)}, kF32, Tag::x);
#else
  (void)use_onednn;
  (void)winograd;
#endif
}

ConvKernel::~ConvKernel() = default;

bool ConvKernel::uses_onednn() const { return impl_->onednn; }

std::string ConvKernel::impl_name() const {
  if (impl_->direct_dw) return "tandem:direct_dw";
  if (!impl_->onednn) return "ops::conv2d";
  if (impl_->used_impl.empty()) return "onednn:not run";
  return impl_->used_impl + (impl_->plain_layout() ? " (nchw)" : "") +
         (impl_->layout == 2 ? " (nhwc)" : "");
}

bool ConvKernel::blocked_capable() const { return impl_->onednn && !impl_->direct_dw; }

// Whether idle OpenMP threads sleep instead of spinning: OMP_WAIT_POLICY=passive (libgomp reads
// it when it loads; GOMP_SPINCOUNT=0 has the same effect).
bool omp_threads_sleep() {
  const char* p = std::getenv("OMP_WAIT_POLICY");
  const char* c = std::getenv("GOMP_SPINCOUNT");
  return (p && strcasecmp(p, "passive") == 0) || (c && std::string(c) == "0");
}

int ConvKernel::layer_threads(int threads) const {
  static const double serial = [] {
    const char* e = std::getenv("TANDEM_CNN_SERIAL_FLOPS");
    if (e) return std::atof(e);
    return omp_threads_sleep() ? kSerialFlops : 0.0;
  }();
  return threads > 1 && static_cast<double>(flops_) < serial && bytes_ < kSerialBytes
             ? 1
             : std::max(threads, 1);
}

int ConvKernel::output_grid(int threads) {
  if (impl_->direct_dw || !impl_->onednn) return 1;
  threads = layer_threads(threads);
  try {
    return impl_->output_grid(threads);
#if defined(TANDEM_HAVE_DNNL)
  } catch (const dnnl::error& e) {
    throw DeviceError(cat("cnn conv '", impl_->node.name, "': oneDNN failed: ", e.what()));
#endif
  } catch (...) {
    throw;
  }
}

int ConvKernel::full_dst_block(int src_block, int threads) {
  threads = layer_threads(threads);
  try {
    return impl_->full_dst_block(src_block, threads);
#if defined(TANDEM_HAVE_DNNL)
  } catch (const dnnl::error& e) {
    throw DeviceError(cat("cnn conv '", impl_->node.name, "': oneDNN failed: ", e.what()));
#endif
  } catch (...) {
    throw;
  }
}

void ConvKernel::run_full(const float* src, int src_block, float* dst, int threads) {
  threads = layer_threads(threads);
  try {
    impl_->run_full(src, src_block, dst, threads);
#if defined(TANDEM_HAVE_DNNL)
  } catch (const dnnl::error& e) {
    throw DeviceError(
        cat("cnn conv '", impl_->node.name, "' on the whole input: oneDNN failed: ", e.what()));
#endif
  } catch (...) {
    throw;
  }
}

int block_size() {
  static const int b = __builtin_cpu_supports("avx512f") ? 16 : 8;
  return b;
}

void ConvKernel::run(const View& x, const View* residual, const Region& out, Tensor& y,
                     int threads) {
  threads = layer_threads(threads);
  const Node& n = impl_->node;
  if (impl_->direct_dw) {
    depthwise_conv(n, x, out, y, threads);
    return;
  }
  // A residual is first placed in y (unless it already lives there), then accumulated onto.
  if (residual && residual->t.raw_data() != y.raw_data()) y.copy_from(residual->t);
  const EdgePads p = edge_pads(n.window, x.full, out);
  if (impl_->onednn) {
#if defined(TANDEM_HAVE_DNNL)
    try {
      impl_->run(x.t, p, y, threads);
      return;
    } catch (const dnnl::error& e) {
      throw DeviceError(cat("cnn conv '", n.name, "' on ", x.t.shape().to_string(),
                            ": oneDNN failed: ", e.what()));
    }
#endif
  }
  ops::Conv2dParams cp;
  cp.stride_h = n.window.sh;
  cp.stride_w = n.window.sw;
  cp.dilation_h = n.window.dh;
  cp.dilation_w = n.window.dw;
  cp.pad_top = p.top;
  cp.pad_left = p.left;
  cp.pad_bottom = p.bottom;
  cp.pad_right = p.right;
  cp.groups = n.groups;
  Tensor conv = residual ? Tensor::empty(y.shape(), DType::kF32) : y;
  ops::conv2d(x.t.contiguous(), n.weight, n.bias, conv, cp);
  if (n.act.kind != ActKind::kNone || residual) {
    float* v = y.data<float>();
    const float* c = conv.data<float>();
    const int64_t e = y.numel();
#pragma omp parallel for num_threads(std::max(threads, 1)) schedule(static)
    for (int64_t i = 0; i < e; ++i) v[i] = apply_act(residual ? c[i] + v[i] : c[i], n.act);
  }
}

}  // namespace tandem::cnn::kernels
