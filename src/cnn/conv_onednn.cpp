// SPDX-License-Identifier: Apache-2.0
// ConvKernel::Impl with oneDNN (conv_impl.h): primitive descriptors with the bias and the fused
// activation as post-ops, the primitives per tile shape with their reorders between the user's
// layout and the primitive's, weights packed once per layout, one scratch buffer per calling
// thread, and execution.
#include <cstdint>
#include <cstring>

#include "cnn/conv_impl.h"
#include "cnn/vector_exp.h"
#include "tandem/core/log.h"

#if defined(TANDEM_HAVE_DNNL)

namespace tandem::cnn::kernels {

namespace {

Tag block_tag(int block) { return block == 16 ? Tag::nChw16c : Tag::nChw8c; }

// A scratchpad memory without storage of its own: execute() points it at the calling thread's
// shared scratch buffer before every use.
dnnl::memory make_scratch(const dnnl::memory::desc& md) {
  return md.get_size() > 0 ? dnnl::memory(md, engine(), nullptr) : dnnl::memory();
}

// One scratch buffer per calling thread, shared by every conv and reorder it runs (they run one
// at a time). The Winograd kernels need 2-17 MB each; a buffer per primitive was cold in cache at
// every call (ResNet-50's 3x3 Winograd convs took 1.4-2.2x the time they take on a warm buffer).
// A Tensor, so 64-byte aligned and counted by the allocator.
void bind_scratch(const dnnl::memory& m) {
  if (!m) return;
  thread_local Tensor buf;
  const int64_t floats = static_cast<int64_t>(m.get_desc().get_size() + 3) / 4;
  if (!buf.defined() || buf.numel() < floats) buf = Tensor::empty({floats}, DType::kF32);
  m.set_data_handle(buf.raw_data());
}

}  // namespace

dnnl::memory ConvKernel::Impl::packed_weights(const dnnl::memory::desc& want) {
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

dnnl::convolution_forward::primitive_desc ConvKernel::Impl::make_pd(const Dims& xd, const Dims& yd,
                                                                    const EdgePads& p,
                                                                    const std::string& match) {
  return make_pd_alg(xd, yd, p, match, winograd);
}

dnnl::convolution_forward::primitive_desc ConvKernel::Impl::make_pd_alg(const Dims& xd,
                                                                        const Dims& yd,
                                                                        const EdgePads& p,
                                                                        const std::string& match,
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
    src_tag = fits && (xd[1] >= block || slice_blocked_src) ? block_tag(block) : Tag::any;
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
  log().debug("cnn conv '{}': implementation {} unavailable for a tile, using {}", node.name, match,
              first.impl_info_str());
  return first;
}

Prim& ConvKernel::Impl::get(const Tensor& x, const EdgePads& p, const Tensor& y, int threads) {
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

void ConvKernel::Impl::finish(Prim& pr) {
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

void ConvKernel::Impl::run(const Tensor& x, const EdgePads& p, Tensor& y, int threads) {
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

Prim& ConvKernel::Impl::get_full(int src_block, int threads) {
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

int ConvKernel::Impl::full_dst_block(int src_block, int threads) {
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

void ConvKernel::Impl::run_full(const float* src, int src_block, float* dst, int threads) {
  OmpThreads scope(threads);
  std::lock_guard lk(mu);
  if (own_1x1) {
    conv1x1_whole(own_packed(), node, in_full, src, src_block, dst, threads);
    return;
  }
  execute(get_full(src_block, threads), const_cast<float*>(src), dst);
}

void ConvKernel::Impl::execute(Prim& e, void* x, void* y) {
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

}  // namespace tandem::cnn::kernels

#endif  // TANDEM_HAVE_DNNL
