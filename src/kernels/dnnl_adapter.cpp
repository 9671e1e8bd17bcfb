// SPDX-License-Identifier: Apache-2.0
#include "dnnl_adapter.h"

#include "tandem/core/error.h"

#if defined(TANDEM_HAVE_DNNL)
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tandem/core/log.h"
#endif

namespace tandem::cpu::onednn {

#if defined(TANDEM_HAVE_DNNL)

namespace {

// Runs oneDNN with `threads` OpenMP threads on this thread (1 inside a parallel region, where
// oneDNN runs sequentially), restoring the previous setting. oneDNN 2.x with OpenMP reads
// omp_get_max_threads() both when it creates a primitive (its work split) and when it runs one, so
// this scope covers both, and it is what makes tandem's thread count the one oneDNN uses.
class OmpThreads {
 public:
  explicit OmpThreads(int threads)
      : saved_(omp_get_max_threads()), want_(omp_in_parallel() ? 1 : std::max(threads, 1)) {
    if (want_ != saved_) omp_set_num_threads(want_);
  }
  ~OmpThreads() {
    if (want_ != saved_) omp_set_num_threads(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;
  int threads() const { return want_; }

 private:
  int saved_;
  int want_;
};

using Dims = dnnl::memory::dims;
using Tag = dnnl::memory::format_tag;
constexpr auto kF32 = dnnl::memory::data_type::f32;

// What a convolution primitive depends on: N, C, H, W, O, KH, KW, strides, pads, dilations,
// groups, bias, and the OpenMP thread count it is created and run with (oneDNN sizes its work
// split and scratchpad for the threads current at creation, and runs that split at execution).
using ConvKey = std::array<int64_t, 18>;

struct ConvKeyHash {
  size_t operator()(const ConvKey& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};

// Buffers for the operands in the primitive's layouts, reused across calls (allocating them per
// call costs page faults on every call: 9 MiB for the weights of a 512-channel 3x3 layer).
struct ConvScratch {
  dnnl::memory src, wts, dst;
  // Scratchpads of the primitive and of the reorders (user-managed: with the library-managed mode
  // of a oneDNN build without DNNL_ENABLE_CONCURRENT_EXEC, Debian's, all primitives share one
  // global scratchpad and concurrent calls corrupt each other's results).
  dnnl::memory conv_pad, src_pad, wts_pad, dst_pad;
};

// A user scratchpad for a primitive descriptor, or an empty memory when it needs none.
template <class Pd>
dnnl::memory make_scratchpad(const Pd& pd, const dnnl::engine& eng) {
  const dnnl::memory::desc md = pd.scratchpad_desc();
  return md.get_size() > 0 ? dnnl::memory(md, eng) : dnnl::memory();
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

struct ConvEntry {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  dnnl::memory::desc src_user, weights_user, dst_user, bias_md;
  // Reorders between the user (NCHW / OIHW) layouts and the primitive's; empty when they agree.
  dnnl::reorder::primitive_desc src_rpd, weights_rpd, dst_rpd;
  dnnl::reorder src_reorder, weights_reorder, dst_reorder;
  std::mutex mu;
  std::vector<std::unique_ptr<ConvScratch>> free_scratch;  // guarded by mu

  // A scratch set for one call (a free one, or a new one); give it back with release().
  std::unique_ptr<ConvScratch> acquire(const dnnl::engine& eng) {
    {
      std::lock_guard lk(mu);
      if (!free_scratch.empty()) {
        auto sc = std::move(free_scratch.back());
        free_scratch.pop_back();
        return sc;
      }
    }
    auto sc = std::make_unique<ConvScratch>();
    sc->conv_pad = make_scratchpad(pd, eng);
    if (src_reorder) {
      sc->src = dnnl::memory(pd.src_desc(), eng);
      sc->src_pad = make_scratchpad(src_rpd, eng);
    }
    if (weights_reorder) {
      sc->wts = dnnl::memory(pd.weights_desc(), eng);
      sc->wts_pad = make_scratchpad(weights_rpd, eng);
    }
    if (dst_reorder) {
      sc->dst = dnnl::memory(pd.dst_desc(), eng);
      sc->dst_pad = make_scratchpad(dst_rpd, eng);
    }
    return sc;
  }
  void release(std::unique_ptr<ConvScratch> sc) {
    std::lock_guard lk(mu);
    free_scratch.push_back(std::move(sc));
  }
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// Builds the primitive (inside the caller's OmpThreads scope, so for the threads it will run on).
std::shared_ptr<ConvEntry> build(const Tensor& x, const Tensor& w, bool has_bias,
                                 const ops::Conv2dParams& p, const Tensor& y) {
  auto e = std::make_shared<ConvEntry>();
  const int64_t g = p.groups;
  e->src_user =
      dnnl::memory::desc(Dims{x.size(0), x.size(1), x.size(2), x.size(3)}, kF32, Tag::nchw);
  e->dst_user =
      dnnl::memory::desc(Dims{y.size(0), y.size(1), y.size(2), y.size(3)}, kF32, Tag::nchw);
  const Dims wdims = g > 1 ? Dims{g, w.size(0) / g, w.size(1), w.size(2), w.size(3)}
                           : Dims{w.size(0), w.size(1), w.size(2), w.size(3)};
  e->weights_user = dnnl::memory::desc(wdims, kF32, g > 1 ? Tag::goihw : Tag::oihw);
  e->bias_md = dnnl::memory::desc(Dims{w.size(0)}, kF32, Tag::x);
  const dnnl::memory::desc src_any(e->src_user.dims(), kF32, Tag::any);
  const dnnl::memory::desc dst_any(e->dst_user.dims(), kF32, Tag::any);
  const dnnl::memory::desc w_any(wdims, kF32, Tag::any);
  const Dims strides{p.stride_h, p.stride_w}, dil{p.dilation_h - 1, p.dilation_w - 1};
  const Dims pad_l{p.pad_top, p.pad_left}, pad_r{p.pad_bottom, p.pad_right};
  const auto prop = dnnl::prop_kind::forward_inference;
  const auto alg = dnnl::algorithm::convolution_direct;
  auto desc = has_bias ? dnnl::convolution_forward::desc(prop, alg, src_any, w_any, e->bias_md,
                                                         dst_any, strides, dil, pad_l, pad_r)
                       : dnnl::convolution_forward::desc(prop, alg, src_any, w_any, dst_any,
                                                         strides, dil, pad_l, pad_r);
  dnnl::engine& eng = engine();
  const dnnl::primitive_attr attr = user_scratchpad();
  e->pd = dnnl::convolution_forward::primitive_desc(desc, attr, eng);
  e->prim = dnnl::convolution_forward(e->pd);
  // Layouts equal to the user's need no reorder (the weights keep OIHW when oneDNN picks it).
  if (e->pd.src_desc() != e->src_user) {
    e->src_rpd = dnnl::reorder::primitive_desc(eng, e->src_user, eng, e->pd.src_desc(), attr);
    e->src_reorder = dnnl::reorder(e->src_rpd);
  }
  if (e->pd.weights_desc() != e->weights_user) {
    e->weights_rpd =
        dnnl::reorder::primitive_desc(eng, e->weights_user, eng, e->pd.weights_desc(), attr);
    e->weights_reorder = dnnl::reorder(e->weights_rpd);
  }
  if (e->pd.dst_desc() != e->dst_user) {
    e->dst_rpd = dnnl::reorder::primitive_desc(eng, e->pd.dst_desc(), eng, e->dst_user, attr);
    e->dst_reorder = dnnl::reorder(e->dst_rpd);
  }
  log().debug("oneDNN conv2d x {} w {}: {} ({} threads), weights {}", x.shape().to_string(),
              w.shape().to_string(), e->pd.impl_info_str(), omp_get_max_threads(),
              e->weights_reorder ? "reordered per call" : "used in place");
  return e;
}

std::shared_ptr<ConvEntry> lookup(const Tensor& x, const Tensor& w, bool has_bias,
                                  const ops::Conv2dParams& p, const Tensor& y, int threads) {
  static std::mutex mu;
  static std::unordered_map<ConvKey, std::shared_ptr<ConvEntry>, ConvKeyHash> cache;
  const ConvKey key{x.size(0),  x.size(1),        x.size(2),   x.size(3),    w.size(0),
                    w.size(2),  w.size(3),        p.stride_h,  p.stride_w,   p.pad_top,
                    p.pad_left, p.pad_bottom,     p.pad_right, p.dilation_h, p.dilation_w,
                    p.groups,   has_bias ? 1 : 0, threads};
  std::lock_guard lk(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto e = build(x, w, has_bias, p, y);
  cache.emplace(key, e);
  return e;
}

void execute(ConvEntry& e, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  dnnl::engine& eng = engine();
  dnnl::stream st(eng);
  std::unique_ptr<ConvScratch> sc = e.acquire(eng);
  // User memories wrap the tensors; reorder to the layouts the primitive chose where they differ.
  dnnl::memory src(e.src_user, eng, x.raw_data());
  dnnl::memory wts(e.weights_user, eng, w.raw_data());
  dnnl::memory dst(e.dst_user, eng, y.raw_data());
  // Runs a reorder with its scratchpad, if it has one.
  auto reorder = [&](const dnnl::reorder& r, const dnnl::memory& from, const dnnl::memory& to,
                     const dnnl::memory& pad) {
    std::unordered_map<int, dnnl::memory> a{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    if (pad) a.emplace(DNNL_ARG_SCRATCHPAD, pad);
    r.execute(st, a);
  };
  if (e.src_reorder) {
    reorder(e.src_reorder, src, sc->src, sc->src_pad);
    src = sc->src;
  }
  if (e.weights_reorder) {
    reorder(e.weights_reorder, wts, sc->wts, sc->wts_pad);
    wts = sc->wts;
  }
  dnnl::memory out = e.dst_reorder ? sc->dst : dst;
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, out}};
  if (bias.defined()) args.emplace(DNNL_ARG_BIAS, dnnl::memory(e.bias_md, eng, bias.raw_data()));
  if (sc->conv_pad) args.emplace(DNNL_ARG_SCRATCHPAD, sc->conv_pad);
  e.prim.execute(st, args);
  if (e.dst_reorder) reorder(e.dst_reorder, out, dst, sc->dst_pad);
  st.wait();
  e.release(std::move(sc));
}

}  // namespace

bool available() { return true; }

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           int threads) {
  OmpThreads scope(threads);
  const dnnl_status_t st =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (st != dnnl_success)
    throw DeviceError(cat("oneDNN dnnl_sgemm(", m, "x", n, "x", k, ") failed with status ",
                          static_cast<int>(st)));
}

bool conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
            const ops::Conv2dParams& p, int threads) {
  // The primitive is created and run with the same OpenMP thread count, which is part of its key.
  OmpThreads scope(threads);
  std::shared_ptr<ConvEntry> e;
  try {
    e = lookup(x, w, bias.defined(), p, y, scope.threads());
  } catch (const dnnl::error& err) {
    log().debug("oneDNN conv2d unavailable for x {} w {}: {}", x.shape().to_string(),
                w.shape().to_string(), err.what());
    return false;
  }
  try {
    execute(*e, x, w, bias, y);
  } catch (const dnnl::error& err) {
    throw DeviceError(cat("oneDNN conv2d x ", x.shape().to_string(), " w ", w.shape().to_string(),
                          " failed: ", err.what()));
  }
  return true;
}

#else

bool available() { return false; }

void sgemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
           int64_t, float, float*, int64_t, int) {
  throw Unsupported("oneDNN sgemm: tandem was built without oneDNN (libdnnl-dev)");
}

bool conv2d(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const ops::Conv2dParams&,
            int) {
  return false;
}

#endif

}  // namespace tandem::cpu::onednn
