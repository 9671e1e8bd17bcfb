// SPDX-License-Identifier: Apache-2.0
#include "dnnl_adapter.h"

#include "tandem/core/error.h"

#if defined(TANDEM_HAVE_DNNL)
#include <dnnl.h>
#include <omp.h>

#include <array>
#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "tandem/core/log.h"
#endif

namespace tandem::cpu::onednn {

#if defined(TANDEM_HAVE_DNNL)

namespace {

// Runs oneDNN with `threads` OpenMP threads on this thread, restoring the previous setting.
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : saved_(omp_get_max_threads()) {
    if (!omp_in_parallel() && threads != saved_) omp_set_num_threads(threads);
  }
  ~OmpThreads() {
    if (!omp_in_parallel() && omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_;
};

using Dims = dnnl::memory::dims;
using Tag = dnnl::memory::format_tag;
constexpr auto kF32 = dnnl::memory::data_type::f32;

// Shape and parameters of one convolution: N, C, H, W, O, KH, KW, strides, pads, dilations, groups,
// bias.
using ConvKey = std::array<int64_t, 17>;

struct ConvKeyHash {
  size_t operator()(const ConvKey& k) const {
    size_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
    return h;
  }
};

struct ConvEntry {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  dnnl::memory::desc src_user, weights_user, dst_user, bias_md;
};

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

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
  e->pd = dnnl::convolution_forward::primitive_desc(desc, engine());
  e->prim = dnnl::convolution_forward(e->pd);
  return e;
}

std::shared_ptr<ConvEntry> lookup(const Tensor& x, const Tensor& w, bool has_bias,
                                  const ops::Conv2dParams& p, const Tensor& y) {
  static std::mutex mu;
  static std::unordered_map<ConvKey, std::shared_ptr<ConvEntry>, ConvKeyHash> cache;
  const ConvKey key{x.size(0),  x.size(1),       x.size(2),   x.size(3),    w.size(0),
                    w.size(2),  w.size(3),       p.stride_h,  p.stride_w,   p.pad_top,
                    p.pad_left, p.pad_bottom,    p.pad_right, p.dilation_h, p.dilation_w,
                    p.groups,   has_bias ? 1 : 0};
  std::lock_guard lk(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto e = build(x, w, has_bias, p, y);
  cache.emplace(key, e);
  return e;
}

void execute(const ConvEntry& ce, const Tensor& x, const Tensor& w, const Tensor& bias,
             const Tensor& y, int threads) {
  const ConvEntry* e = &ce;
  OmpThreads scope(threads);
  dnnl::engine& eng = engine();
  dnnl::stream st(eng);
  // User memories wrap the tensors; reorder to the layouts the primitive chose where they differ.
  dnnl::memory src(e->src_user, eng, x.raw_data());
  dnnl::memory wts(e->weights_user, eng, w.raw_data());
  dnnl::memory dst(e->dst_user, eng, y.raw_data());
  if (e->pd.src_desc() != e->src_user) {
    dnnl::memory r(e->pd.src_desc(), eng);
    dnnl::reorder(src, r).execute(st, src, r);
    src = r;
  }
  if (e->pd.weights_desc() != e->weights_user) {
    dnnl::memory r(e->pd.weights_desc(), eng);
    dnnl::reorder(wts, r).execute(st, wts, r);
    wts = r;
  }
  const bool dst_direct = e->pd.dst_desc() == e->dst_user;
  dnnl::memory out = dst_direct ? dst : dnnl::memory(e->pd.dst_desc(), eng);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, out}};
  if (bias.defined()) args.emplace(DNNL_ARG_BIAS, dnnl::memory(e->bias_md, eng, bias.raw_data()));
  e->prim.execute(st, args);
  if (!dst_direct) dnnl::reorder(out, dst).execute(st, out, dst);
  st.wait();
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
  std::shared_ptr<ConvEntry> e;
  try {
    e = lookup(x, w, bias.defined(), p, y);
  } catch (const dnnl::error& err) {
    log().debug("oneDNN conv2d unavailable for x {} w {}: {}", x.shape().to_string(),
                w.shape().to_string(), err.what());
    return false;
  }
  try {
    execute(*e, x, w, bias, y, threads);
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
