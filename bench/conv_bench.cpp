// SPDX-License-Identifier: Apache-2.0
// 3x3 convolution (stride 1, pad 1, batch 1, with bias) on the ResNet-18/50 stage shapes, NCHW f32:
//   tandem          ops::conv2d, NCHW in and out (the op's contract)
//   onednn          oneDNN primitive created with format_tag::any; per call the NCHW input is
//   reordered
//                   to the layout oneDNN chose, convolved, and the output reordered back to NCHW
//                   (weights are reordered once, outside the timed loop): the same contract as
//                   tandem
//   onednn_blocked  the bare oneDNN primitive, activations already in its layout: oneDNN's ceiling
//   openblas        im2col + cblas_sgemm (bias preloaded into the output, beta = 1)
#include <cstring>
#include <map>
#include <memory>
#include <tuple>

#include "bench_common.h"
#include "tandem/ops/ops.h"

#if TANDEM_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif
#if TANDEM_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace tandem::bench {
namespace {

struct ConvCase {
  std::string net;  // "resnet"
  int64_t c, co, h, w;
  int64_t kh = 3, kw = 3, stride = 1, pad = 1;
  int64_t oh() const { return (h + 2 * pad - kh) / stride + 1; }
  int64_t ow() const { return (w + 2 * pad - kw) / stride + 1; }
  std::string name() const {
    return net + ".c" + std::to_string(c) + "_co" + std::to_string(co) + "_" + std::to_string(h) +
           "x" + std::to_string(w) + "_k" + std::to_string(kh) + "s" + std::to_string(stride);
  }
  double flops() const {
    return 2.0 * static_cast<double>(co) * static_cast<double>(oh() * ow()) *
           static_cast<double>(c * kh * kw);
  }
  double bytes() const {
    return 4.0 * static_cast<double>(c * h * w + co * c * kh * kw + co + co * oh() * ow());
  }
  ops::Conv2dParams params() const {
    ops::Conv2dParams p;
    p.stride_h = p.stride_w = static_cast<int>(stride);
    p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = static_cast<int>(pad);
    return p;
  }
};

struct ConvData {
  Tensor x, w, bias, y, y_check;
};

ConvData& conv_data(const ConvCase& cc) {
  static std::map<std::string, std::unique_ptr<ConvData>> cache;
  auto& slot = cache[cc.name()];
  if (!slot) {
    slot = std::make_unique<ConvData>();
    slot->x = random_tensor({1, cc.c, cc.h, cc.w}, 3000 + static_cast<uint64_t>(cc.c));
    slot->w = random_tensor({cc.co, cc.c, cc.kh, cc.kw}, 4000 + static_cast<uint64_t>(cc.co));
    slot->bias = random_tensor({cc.co}, 5000 + static_cast<uint64_t>(cc.co));
    slot->y = Tensor::zeros({1, cc.co, cc.oh(), cc.ow()}, DType::kF32);
    slot->y_check = Tensor::zeros({1, cc.co, cc.oh(), cc.ow()}, DType::kF32);
  }
  return *slot;
}

#if TANDEM_HAVE_DNNL
// A oneDNN convolution with its user (NCHW/OIHW) and primitive-layout memories.
class OnednnConv {
 public:
  OnednnConv(const ConvCase& cc, ConvData& d) : eng_(dnnl::engine::kind::cpu, 0), strm_(eng_) {
    using dnnl::memory;
    using tag = memory::format_tag;
    const memory::dims src_dims{1, cc.c, cc.h, cc.w}, wei_dims{cc.co, cc.c, cc.kh, cc.kw},
        bias_dims{cc.co}, dst_dims{1, cc.co, cc.oh(), cc.ow()};
    const memory::dims strides{cc.stride, cc.stride}, pad{cc.pad, cc.pad};
    const auto f32 = memory::data_type::f32;
    dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
        memory::desc(src_dims, f32, tag::any), memory::desc(wei_dims, f32, tag::any),
        memory::desc(bias_dims, f32, tag::x), memory::desc(dst_dims, f32, tag::any), strides, pad,
        pad);
    pd_ = dnnl::convolution_forward::primitive_desc(desc, eng_);
    conv_ = dnnl::convolution_forward(pd_);
    user_src_ = memory({src_dims, f32, tag::nchw}, eng_, d.x.raw_data());
    user_dst_ = memory({dst_dims, f32, tag::nchw}, eng_, d.y.raw_data());
    memory user_wei({wei_dims, f32, tag::oihw}, eng_, d.w.raw_data());
    bias_ = memory({bias_dims, f32, tag::x}, eng_, d.bias.raw_data());
    src_ = pd_.src_desc() == user_src_.get_desc() ? user_src_ : memory(pd_.src_desc(), eng_);
    dst_ = pd_.dst_desc() == user_dst_.get_desc() ? user_dst_ : memory(pd_.dst_desc(), eng_);
    wei_ = pd_.weights_desc() == user_wei.get_desc() ? user_wei : memory(pd_.weights_desc(), eng_);
    if (wei_ != user_wei) dnnl::reorder(user_wei, wei_).execute(strm_, user_wei, wei_);
    if (src_ != user_src_) src_reorder_ = dnnl::reorder(user_src_, src_);
    if (dst_ != user_dst_) dst_reorder_ = dnnl::reorder(dst_, user_dst_);
    // The blocked input holds the real data, so the bare primitive convolves the same values.
    if (src_reorder_) src_reorder_.execute(strm_, user_src_, src_);
    strm_.wait();
  }

  // NCHW in, NCHW out.
  void run_nchw() {
    if (src_reorder_) src_reorder_.execute(strm_, user_src_, src_);
    run_blocked();
    if (dst_reorder_) dst_reorder_.execute(strm_, dst_, user_dst_);
    strm_.wait();
  }
  // The primitive alone, in oneDNN's layouts.
  void run_blocked() {
    conv_.execute(strm_, {{DNNL_ARG_SRC, src_},
                          {DNNL_ARG_WEIGHTS, wei_},
                          {DNNL_ARG_BIAS, bias_},
                          {DNNL_ARG_DST, dst_}});
    strm_.wait();
  }
  std::string impl_name() const { return pd_.impl_info_str(); }

 private:
  dnnl::engine eng_;
  dnnl::stream strm_;
  dnnl::convolution_forward::primitive_desc pd_;
  dnnl::convolution_forward conv_;
  dnnl::memory user_src_, user_dst_, src_, dst_, wei_, bias_;
  dnnl::reorder src_reorder_, dst_reorder_;
};
#endif

#if TANDEM_HAVE_OPENBLAS
// y = W [co, c*kh*kw] x col [c*kh*kw, oh*ow] + bias.
class OpenblasConv {
 public:
  explicit OpenblasConv(const ConvCase& cc)
      : cc_(cc), col_(Tensor::empty({cc.c * cc.kh * cc.kw, cc.oh() * cc.ow()}, DType::kF32)) {}

  void run(const ConvData& d, float* y) {
    im2col(d.x.data<float>(), col_.data<float>());
    const int64_t plane = cc_.oh() * cc_.ow();
    const float* bias = d.bias.data<float>();
    for (int64_t o = 0; o < cc_.co; ++o) {
      float* row = y + o * plane;
      for (int64_t i = 0; i < plane; ++i) row[i] = bias[o];
    }
    const int kdim = static_cast<int>(cc_.c * cc_.kh * cc_.kw);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(cc_.co),
                static_cast<int>(plane), kdim, 1.0f, d.w.data<float>(), kdim, col_.data<float>(),
                static_cast<int>(plane), 1.0f, y, static_cast<int>(plane));
  }

 private:
  void im2col(const float* x, float* col) const {
    const int64_t oh = cc_.oh(), ow = cc_.ow();
    for (int64_t c = 0; c < cc_.c; ++c) {
      for (int64_t kh = 0; kh < cc_.kh; ++kh) {
        for (int64_t kw = 0; kw < cc_.kw; ++kw) {
          float* out = col + ((c * cc_.kh + kh) * cc_.kw + kw) * oh * ow;
          for (int64_t y = 0; y < oh; ++y) {
            const int64_t iy = y * cc_.stride - cc_.pad + kh;
            float* out_row = out + y * ow;
            if (iy < 0 || iy >= cc_.h) {
              std::memset(out_row, 0, static_cast<size_t>(ow) * sizeof(float));
              continue;
            }
            const float* in_row = x + (c * cc_.h + iy) * cc_.w;
            for (int64_t xo = 0; xo < ow; ++xo) {
              const int64_t ix = xo * cc_.stride - cc_.pad + kw;
              out_row[xo] = (ix >= 0 && ix < cc_.w) ? in_row[ix] : 0.0f;
            }
          }
        }
      }
    }
  }
  ConvCase cc_;
  Tensor col_;
};
#endif

std::string check_tandem(const ConvCase& cc, ConvData& d) {
  const ops::Conv2dParams p = cc.params();
  ops::conv2d(d.x, d.w, d.bias, d.y, p);
  Tensor y = d.y.clone();
#if TANDEM_HAVE_DNNL
  OnednnConv ref(cc, d);  // writes into d.y
  ref.run_nchw();
  const char* against = "oneDNN";
  const float* r = d.y.data<float>();
#elif TANDEM_HAVE_OPENBLAS
  OpenblasConv ref(cc);
  ref.run(d, d.y_check.data<float>());
  const char* against = "OpenBLAS im2col";
  const float* r = d.y_check.data<float>();
#else
  ops::cpu_reference_kernels().conv2d(d.x, d.w, d.bias, d.y_check, p, nullptr);
  const char* against = "the reference kernel";
  const float* r = d.y_check.data<float>();
#endif
  const Diff diff = max_diff(y.data<float>(), r, y.numel());
  return diff_message(diff, 1e-4, cat("tandem conv2d ", cc.name(), " vs ", against));
}

void run_conv(benchmark::State& state, const ConvCase& cc, const std::string& impl, int threads) {
  begin_run(threads, impl == "openblas");
  try {
    ConvData& d = conv_data(cc);
    if (impl == "tandem") {
      if (!verify_once(state, bench_name("conv3x3", cc.name(), threads, impl),
                       [&] { return check_tandem(cc, d); }))
        return;
      const ops::Conv2dParams p = cc.params();
      for (auto _ : state) {
        ops::conv2d(d.x, d.w, d.bias, d.y, p);
        benchmark::ClobberMemory();
      }
#if TANDEM_HAVE_DNNL
    } else if (impl == "onednn" || impl == "onednn_blocked") {
      OnednnConv conv(cc, d);  // created after begin_run: oneDNN sizes its kernels to the threads
      state.SetLabel(conv.impl_name());
      if (impl == "onednn") {
        for (auto _ : state) conv.run_nchw();
      } else {
        for (auto _ : state) conv.run_blocked();
      }
#endif
#if TANDEM_HAVE_OPENBLAS
    } else if (impl == "openblas") {
      OpenblasConv conv(cc);
      float* y = d.y.data<float>();
      for (auto _ : state) {
        conv.run(d, y);
        benchmark::ClobberMemory();
      }
#endif
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  set_counters(state, cc.flops(), cc.bytes(), threads);
}

}  // namespace

void register_conv_benchmarks() {
  // The 3x3 convolutions of the four ResNet stages (ResNet-18 basic blocks; the same shapes are the
  // 3x3 layers of ResNet-50's bottlenecks), batch 1.
  const std::vector<ConvCase> cases{{"resnet", 64, 64, 56, 56},
                                    {"resnet", 128, 128, 28, 28},
                                    {"resnet", 256, 256, 14, 14},
                                    {"resnet", 512, 512, 7, 7}};
  std::vector<std::string> impls{"tandem"};
#if TANDEM_HAVE_DNNL
  impls.push_back("onednn");
  impls.push_back("onednn_blocked");
#endif
#if TANDEM_HAVE_OPENBLAS
  impls.push_back("openblas");
#endif
  for (const ConvCase& cc : cases) {
    for (int t : thread_counts()) {
      for (const std::string& impl : impls) {
        benchmark::RegisterBenchmark(
            bench_name("conv3x3", cc.name(), t, impl).c_str(),
            [cc, impl, t](benchmark::State& s) { run_conv(s, cc, impl, t); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

}  // namespace tandem::bench
