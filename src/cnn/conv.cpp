// SPDX-License-Identifier: Apache-2.0
// ConvKernel (kernels.h): the convolution of one node. With oneDNN the state lives in
// ConvKernel::Impl (conv_impl.h; primitives in conv_onednn.cpp, the kernel choice in
// conv_choice.cpp; 1x1 convs that oneDNN's jit_1x1 cannot run band-exactly go to the engine's own
// AVX-512 kernel, conv1x1.h). Here: construction, the threads a layer runs on, and the fallback
// without oneDNN (the core ops::conv2d, then the activation).
#include <strings.h>

#include <cstdlib>
#include <string>

#include "cnn/conv_impl.h"
#include "kernels/parallel.h"
#include "tandem/ops/ops.h"

namespace tandem::cnn::kernels {

ConvKernel::ConvKernel(const Node& node, const Shape& in_full, bool use_onednn, bool winograd)
    : impl_(std::make_unique<Impl>()) {
  impl_->node = node;
  impl_->in_full = in_full;
  const Window& win = node.window;
  const int64_t ho = window_output_size(in_full[2], win.kh, win.sh, win.dh, win.pt, win.pb, false);
  const int64_t wo = window_output_size(in_full[3], win.kw, win.sw, win.dw, win.pl, win.pr, false);
  flops_ = 2 * in_full[0] * node.weight.size(0) * node.weight.size(1) * win.kh * win.kw * ho * wo;
  bytes_ = 4 * (in_full.numel() + in_full[0] * node.weight.size(0) * ho * wo);
  // Depthwise: oneDNN's jit depthwise kernel on blocked activations (activation fused); the
  // engine's direct NCHW kernel without oneDNN or with TANDEM_CNN_DEPTHWISE=direct.
  const char* dw = std::getenv("TANDEM_CNN_DEPTHWISE");
  impl_->direct_dw = is_depthwise(node) && (!use_onednn || (dw && std::string(dw) == "direct"));
#if defined(TANDEM_HAVE_DNNL)
  impl_->onednn = use_onednn;
  impl_->block = block_size();
  static const int64_t min_pixels = [] {
    const char* e = std::getenv("TANDEM_CNN_WINOGRAD_MIN_PIXELS");
    return e ? std::atoll(e) : kWinogradMinPixels;
  }();
  impl_->winograd = winograd && ho * wo >= min_pixels;
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

namespace {

// f(), with a oneDNN error turned into a DeviceError naming the conv and `where`.
template <class F>
decltype(auto) onednn_errors_named(const std::string& node, const std::string& where, F&& f) {
#if defined(TANDEM_HAVE_DNNL)
  try {
    return f();
  } catch (const dnnl::error& e) {
    throw DeviceError(cat("cnn conv '", node, "'", where, ": oneDNN failed: ", e.what()));
  }
#else
  (void)node;
  (void)where;
  return f();
#endif
}

}  // namespace

int ConvKernel::output_grid(int threads) {
  if (impl_->direct_dw || !impl_->onednn) return 1;
  threads = layer_threads(threads);
  return onednn_errors_named(impl_->node.name, "", [&] { return impl_->output_grid(threads); });
}

int ConvKernel::full_dst_block(int src_block, int threads) {
  threads = layer_threads(threads);
  return onednn_errors_named(impl_->node.name, "",
                             [&] { return impl_->full_dst_block(src_block, threads); });
}

void ConvKernel::run_full(const float* src, int src_block, float* dst, int threads) {
  threads = layer_threads(threads);
  onednn_errors_named(impl_->node.name, " on the whole input",
                      [&] { impl_->run_full(src, src_block, dst, threads); });
}

std::unique_ptr<ConvKernel> ConvKernel::for_channels(const Node& sliced, const Shape& in_sliced,
                                                     int threads) {
  auto k = std::make_unique<ConvKernel>(sliced, in_sliced, impl_->onednn, false);
  k->flops_ = flops_;  // the whole layer's, so layer_threads() gives the whole conv's count
  k->bytes_ = bytes_;
  k->impl_->direct_dw = impl_->direct_dw;
#if defined(TANDEM_HAVE_DNNL)
  if (impl_->onednn && !impl_->direct_dw) {
    threads = layer_threads(threads);
    onednn_errors_named(impl_->node.name, "", [&] {
      OmpThreads scope(threads);
      std::lock_guard lk(impl_->mu);
      impl_->choose_layout(threads);
      impl_->full_impl(threads);
    });
    Impl& to = *k->impl_;
    to.layout = impl_->layout;
    to.block = impl_->block;
    to.winograd = impl_->winograd;
    to.avoid_jit_1x1 = impl_->avoid_jit_1x1;
    to.own_1x1 = impl_->own_1x1;
    to.full_impl_name = impl_->full_impl_name;  // make_pd matches it for every tile
    to.slice_blocked_src = impl_->in_full[1] >= impl_->block;
    if (impl_->node.groups > 1) {  // a grouped conv stays one even when the slice is one group
      const Tensor& w = sliced.weight;
      const int64_t g = sliced.groups;
      to.weights_user = dnnl::memory::desc(Dims{g, w.size(0) / g, w.size(1), w.size(2), w.size(3)},
                                           kF32, Tag::goihw);
    }
  }
#else
  (void)threads;
#endif
  return k;
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
    onednn_errors_named(n.name, " on " + x.t.shape().to_string(),
                        [&] { impl_->run(x.t, p, y, threads); });
    return;
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
    const int64_t chunk = 16384;
    cpu::parallel_for_static((e + chunk - 1) / chunk, std::max(threads, 1), [&](int64_t k, int) {
      for (int64_t i = k * chunk, end = std::min(e, i + chunk); i < end; ++i)
        v[i] = apply_act(residual ? c[i] + v[i] : c[i], n.act);
    });
  }
}

}  // namespace tandem::cnn::kernels
