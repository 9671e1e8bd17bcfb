// SPDX-License-Identifier: Apache-2.0
// The CNN engine on a CUDA device (tandem/cnn/device_runner.h): convolutions through cuDNN
// (bias + ReLU + residual fused into cudnnConvolutionBiasActivationForward, other activations in
// one epilogue kernel after cudnnConvolutionForward), Gemm through cuBLAS, the rest through the
// module's own kernels (cnn_kernels.cu) with the CPU engine's semantics (ceil-mode pools,
// count_include_pad, asymmetric padding). NCHW f32 with full FP32 math (no TF32), so results
// match the CPU executor to rounding. Planned once: descriptors, algorithms, one device buffer
// per tensor, uploaded weights, one workspace; run() only launches on the runner's stream.
// Registered with cnn::register_device_runner when the module loads.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cnn_kernels.h"
#include "cuda_backend.h"
#include "cuda_check.h"
#include "tandem/cnn/device_runner.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/core/log.h"

#define TANDEM_CUDNN_CHECK(call)                                                                \
  do {                                                                                          \
    const cudnnStatus_t tandem_st_ = (call);                                                    \
    if (tandem_st_ != CUDNN_STATUS_SUCCESS)                                                     \
      throw ::tandem::DeviceError(::tandem::cat(__FILE__, ":", __LINE__, ": ", #call,           \
                                                " failed: ", cudnnGetErrorString(tandem_st_))); \
  } while (0)

namespace tandem::cuda {

namespace {

using cnn::ActKind;
using cnn::Graph;
using cnn::Node;
using cnn::OpKind;

cnnk::Act act_of(const cnn::Activation& a) { return {static_cast<int>(a.kind), a.alpha, a.beta}; }

cudnnTensorDescriptor_t tensor_desc(int64_t n, int64_t c, int64_t h, int64_t w) {
  cudnnTensorDescriptor_t d;
  TANDEM_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
  TANDEM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                static_cast<int>(n), static_cast<int>(c),
                                                static_cast<int>(h), static_cast<int>(w)));
  return d;
}

// cuDNN state of one convolution node.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnActivationDescriptor_t relu = nullptr;  // set when bias + ReLU (+ residual) are fused
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace = 0;
  Tensor weight, bias_dev;
  Tensor padded;  // asymmetric pads: the input copied with its zero border
  int64_t in_h = 0, in_w = 0;
  int pt = 0, pl = 0;
  ~ConvPlan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (relu) cudnnDestroyActivationDescriptor(relu);
  }
};

class CudnnRunner final : public cnn::DeviceRunner {
 public:
  CudnnRunner(const Graph& g, Device device) : g_(g), device_(device) {
    auto* be = dynamic_cast<CudaBackend*>(&BackendRegistry::global().get(device));
    if (!be) throw DeviceError(cat("cnn cuda runner: ", device.to_string(), " is not CUDA"));
    ordinal_ = be->ordinal(device.index);
    DeviceGuard guard(ordinal_);
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    TANDEM_CUDNN_CHECK(cudnnCreate(&cudnn_));
    TANDEM_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
    TANDEM_CUBLAS_CHECK(cublasCreate(&cublas_));
    TANDEM_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    plan();
  }

  ~CudnnRunner() override {
    DeviceGuard guard(ordinal_);
    if (stream_) TANDEM_CUDA_WARN(cudaStreamSynchronize(stream_));
    convs_.clear();
    if (cublas_) cublasDestroy(cublas_);
    if (cudnn_) cudnnDestroy(cudnn_);
    if (stream_) TANDEM_CUDA_WARN(cudaStreamDestroy(stream_));
  }

  std::string describe() const override {
    const auto convs =
        std::count_if(convs_.begin(), convs_.end(),
                      [](const std::unique_ptr<ConvPlan>& c) { return c != nullptr; });
    return cat(device_.to_string(), " cuDNN ", cudnnGetVersion(), ", ", convs,
               " cuDNN convolutions, FP32 math");
  }

  std::vector<Tensor> run(const std::vector<Tensor>& inputs) override {
    DeviceGuard guard(ordinal_);
    TANDEM_CHECK(inputs.size() == g_.inputs().size()) << "cnn cuda runner: input count";
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor x = inputs[i].contiguous();
      Tensor& dst = buf_[g_.inputs()[i]];
      TANDEM_CHECK(x.nbytes() == dst.nbytes()) << "cnn cuda runner: input " << i << " size";
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(
          dst.raw_data(), x.raw_data(), static_cast<size_t>(x.nbytes()),
          x.device().is_cpu() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice, stream_));
      // A pageable host source may be reused by the caller right after return: wait for it.
      TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    for (size_t id = 0; id < g_.nodes().size(); ++id) run_node(static_cast<int>(id));
    std::vector<Tensor> out;
    for (int t : g_.outputs()) {
      Tensor h = Tensor::empty(g_.tensor(t).shape, DType::kF32);
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(h.raw_data(), buf_[t].raw_data(),
                                        static_cast<size_t>(h.nbytes()), cudaMemcpyDeviceToHost,
                                        stream_));
      out.push_back(h);
    }
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return out;
  }

 private:
  float* ptr(int t) { return static_cast<float*>(buf_[t].raw_data()); }
  const float* weight_ptr(const Tensor& t) { return static_cast<const float*>(t.raw_data()); }

  void plan() {
    buf_.resize(g_.tensors().size());
    for (size_t t = 0; t < g_.tensors().size(); ++t) {
      buf_[t] = Tensor::empty(g_.tensor(static_cast<int>(t)).shape, DType::kF32, device_);
      // Zeroed once: cuDNN's fused conv reads z (scaled by 0) before the first write.
      TANDEM_CUDA_CHECK(
          cudaMemsetAsync(buf_[t].raw_data(), 0, static_cast<size_t>(buf_[t].nbytes()), stream_));
    }
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    consts_.resize(g_.nodes().size());
    convs_.resize(g_.nodes().size());
    size_t workspace = 0;
    for (size_t id = 0; id < g_.nodes().size(); ++id) {
      const Node& n = g_.node(static_cast<int>(id));
      if (n.op == OpKind::kConv) {
        convs_[id] = plan_conv(n);
        workspace = std::max(workspace, convs_[id]->workspace);
      } else if (n.weight.defined()) {
        consts_[id].first = n.weight.contiguous().to(device_);
        if (n.bias.defined()) consts_[id].second = n.bias.contiguous().to(device_);
      } else if (n.bias.defined()) {
        consts_[id].second = n.bias.contiguous().to(device_);
      }
    }
    if (workspace > 0)
      workspace_ = Tensor::empty({static_cast<int64_t>((workspace + 3) / 4)}, DType::kF32, device_);
    workspace_bytes_ = workspace;
  }

  std::unique_ptr<ConvPlan> plan_conv(const Node& n) {
    auto p = std::make_unique<ConvPlan>();
    const Shape& xs = g_.tensor(n.inputs[0]).shape;
    const Shape& ys = g_.tensor(n.outputs[0]).shape;
    const cnn::Window& w = n.window;
    int pad_h = w.pt, pad_w = w.pl;
    int64_t h = xs[2], wd = xs[3];
    if (w.pt != w.pb || w.pl != w.pr) {  // cuDNN pads symmetrically: pad explicitly instead
      p->in_h = h;
      p->in_w = wd;
      p->pt = w.pt;
      p->pl = w.pl;
      h += w.pt + w.pb;
      wd += w.pl + w.pr;
      p->padded = Tensor::empty({xs[0], xs[1], h, wd}, DType::kF32, device_);
      pad_h = pad_w = 0;
    }
    p->x = tensor_desc(xs[0], xs[1], h, wd);
    p->y = tensor_desc(ys[0], ys[1], ys[2], ys[3]);
    const Tensor& wt = n.weight;
    TANDEM_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
    TANDEM_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
        p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(wt.size(0)),
        static_cast<int>(wt.size(1)), static_cast<int>(wt.size(2)), static_cast<int>(wt.size(3))));
    TANDEM_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
    TANDEM_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        p->conv, pad_h, pad_w, w.sh, w.sw, w.dh, w.dw, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    TANDEM_CUDNN_CHECK(cudnnSetConvolutionGroupCount(p->conv, n.groups));
    TANDEM_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));  // no TF32
    int oc = 0, on = 0, oh = 0, ow = 0;
    TANDEM_CUDNN_CHECK(
        cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &on, &oc, &oh, &ow));
    if (on != ys[0] || oc != ys[1] || oh != ys[2] || ow != ys[3])
      throw DeviceError(cat("cnn cuda conv '", n.name, "': cuDNN output [", on, ",", oc, ",", oh,
                            ",", ow, "] differs from the graph's ", ys.to_string()));
    int found = 0;
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    TANDEM_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        cudnn_, p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf));
    bool chosen = false;
    for (int i = 0; i < found && !chosen; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
          perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
        continue;
      p->algo = perf[i].algo;
      p->workspace = perf[i].memory;
      chosen = true;
    }
    if (!chosen)
      TANDEM_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(cudnn_, p->x, p->w, p->conv, p->y,
                                                                 p->algo, &p->workspace));
    p->weight = wt.contiguous().to(device_);
    if (n.bias.defined()) p->bias_dev = n.bias.contiguous().to(device_);
    if (n.act.kind == ActKind::kRelu && n.bias.defined()) {
      p->bias = tensor_desc(1, ys[1], 1, 1);
      TANDEM_CUDNN_CHECK(cudnnCreateActivationDescriptor(&p->relu));
      TANDEM_CUDNN_CHECK(
          cudnnSetActivationDescriptor(p->relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0));
    }
    log().debug("cnn cuda conv '{}': cuDNN algo {}, workspace {} B{}", n.name,
                static_cast<int>(p->algo), p->workspace, p->relu ? ", bias+ReLU fused" : "");
    return p;
  }

  void run_conv(const Node& n, ConvPlan& p) {
    const float* x = ptr(n.inputs[0]);
    if (p.padded.defined()) {
      const Shape& xs = g_.tensor(n.inputs[0]).shape;
      TANDEM_CUDA_CHECK(cnnk::pad(x, static_cast<float*>(p.padded.raw_data()), xs[0] * xs[1],
                                  p.in_h, p.in_w, p.pt, p.pl, p.padded.size(2), p.padded.size(3),
                                  stream_));
      x = static_cast<const float*>(p.padded.raw_data());
    }
    float* y = ptr(n.outputs[0]);
    const float* res = n.inputs.size() == 2 ? ptr(n.inputs[1]) : nullptr;
    const float one = 1.0f, zero = 0.0f;
    void* ws = workspace_bytes_ ? workspace_.raw_data() : nullptr;
    if (p.relu) {  // y = relu(conv(x) + alpha2 * z + bias), z the residual
      const float alpha2 = res ? 1.0f : 0.0f;
      TANDEM_CUDNN_CHECK(cudnnConvolutionBiasActivationForward(
          cudnn_, &one, p.x, x, p.w, weight_ptr(p.weight), p.conv, p.algo, ws, workspace_bytes_,
          &alpha2, p.y, res ? res : y, p.bias, weight_ptr(p.bias_dev), p.relu, p.y, y));
      return;
    }
    TANDEM_CUDNN_CHECK(cudnnConvolutionForward(cudnn_, &one, p.x, x, p.w, weight_ptr(p.weight),
                                               p.conv, p.algo, ws, workspace_bytes_, &zero, p.y,
                                               y));
    const Shape& ys = g_.tensor(n.outputs[0]).shape;
    if (p.bias_dev.defined() || res || n.act.kind != ActKind::kNone)
      TANDEM_CUDA_CHECK(cnnk::epilogue(y, p.bias_dev.defined() ? weight_ptr(p.bias_dev) : nullptr,
                                       res, ys[0], ys[1], ys[2] * ys[3], act_of(n.act), stream_));
  }

  void copy(float* dst, const float* src, int64_t elems) {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(elems) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream_));
  }

  void run_node(int id) {
    const Node& n = g_.node(id);
    const int y = n.outputs[0];
    const Shape& ys = g_.tensor(y).shape;
    const int x = n.inputs.empty() ? -1 : n.inputs[0];
    const Shape xs = x >= 0 ? g_.tensor(x).shape : Shape{};
    switch (n.op) {
      case OpKind::kConv:
        run_conv(n, *convs_[id]);
        break;
      case OpKind::kMaxPool:
      case OpKind::kAveragePool: {
        const cnn::Window& w = n.window;
        const cnnk::PoolGeom pg{xs[0] * xs[1],
                                xs[2],
                                xs[3],
                                ys[2],
                                ys[3],
                                w.kh,
                                w.kw,
                                w.sh,
                                w.sw,
                                w.dh,
                                w.dw,
                                w.pt,
                                w.pl,
                                w.pb,
                                w.pr,
                                n.op == OpKind::kMaxPool,
                                w.count_include_pad};
        TANDEM_CUDA_CHECK(cnnk::pool(ptr(x), ptr(y), pg, stream_));
        break;
      }
      case OpKind::kGlobalAveragePool:
        TANDEM_CUDA_CHECK(
            cnnk::global_average(ptr(x), ptr(y), xs[0] * xs[1], xs[2] * xs[3], stream_));
        break;
      case OpKind::kAdd:
      case OpKind::kMul: {
        const int64_t e = xs.numel(), ch = xs.rank() >= 2 ? xs[1] : 1;
        const int64_t inner = xs.rank() >= 2 ? e / (xs[0] * xs[1]) : 1;
        const bool add = n.op == OpKind::kAdd;
        if (n.inputs.size() == 2) {
          TANDEM_CUDA_CHECK(
              cnnk::binary(ptr(x), ptr(n.inputs[1]), ptr(y), e, 0, ch, inner, add, stream_));
        } else {
          const int64_t ce = n.weight.numel();
          const int mode = ce == e ? 0 : ce == 1 ? 1 : 2;
          TANDEM_CUDA_CHECK(cnnk::binary(ptr(x), weight_ptr(consts_[id].first), ptr(y), e, mode, ch,
                                         inner, add, stream_));
        }
        break;
      }
      case OpKind::kActivation:
        TANDEM_CUDA_CHECK(cnnk::activation(ptr(x), ptr(y), xs.numel(), act_of(n.act), stream_));
        break;
      case OpKind::kAffine: {
        const int64_t e = xs.numel(), ch = xs[1], inner = e / (xs[0] * xs[1]);
        TANDEM_CUDA_CHECK(
            cnnk::affine(ptr(x), ptr(y), weight_ptr(consts_[id].first),
                         consts_[id].second.defined() ? weight_ptr(consts_[id].second) : nullptr, e,
                         ch, inner, stream_));
        break;
      }
      case OpKind::kConcat: {
        const int64_t nb = ys[0], cy = ys[1], plane = ys.numel() / (nb * cy);
        int64_t c0 = 0;
        for (int t : n.inputs) {
          const int64_t ch = g_.tensor(t).shape[1];
          TANDEM_CUDA_CHECK(cudaMemcpy2DAsync(
              ptr(y) + c0 * plane, static_cast<size_t>(cy * plane) * sizeof(float), ptr(t),
              static_cast<size_t>(ch * plane) * sizeof(float),
              static_cast<size_t>(ch * plane) * sizeof(float), static_cast<size_t>(nb),
              cudaMemcpyDeviceToDevice, stream_));
          c0 += ch;
        }
        break;
      }
      case OpKind::kSplit: {
        const int64_t nb = xs[0], cx = xs[1], plane = xs.numel() / (nb * cx);
        int64_t c0 = 0;
        for (size_t i = 0; i < n.outputs.size(); ++i) {
          const int64_t ch = n.split[i];
          TANDEM_CUDA_CHECK(cudaMemcpy2DAsync(
              ptr(n.outputs[i]), static_cast<size_t>(ch * plane) * sizeof(float),
              ptr(x) + c0 * plane, static_cast<size_t>(cx * plane) * sizeof(float),
              static_cast<size_t>(ch * plane) * sizeof(float), static_cast<size_t>(nb),
              cudaMemcpyDeviceToDevice, stream_));
          c0 += ch;
        }
        break;
      }
      case OpKind::kResize:
        TANDEM_CUDA_CHECK(cnnk::resize_nearest(ptr(x), ptr(y), xs[0] * xs[1], xs[2], xs[3], ys[2],
                                               ys[3], n.scale_h, n.scale_w, stream_));
        break;
      case OpKind::kFlatten:
      case OpKind::kReshape:
        copy(ptr(y), ptr(x), xs.numel());
        break;
      case OpKind::kGemm: {
        // Row-major y[m, f] = x[m, k] W[f, k]^T is column-major y^T = W x^T.
        const int64_t m = xs[0], k = xs.numel() / xs[0], f = n.weight.size(0);
        const float one = 1.0f, zero = 0.0f;
        TANDEM_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(f),
                                        static_cast<int>(m), static_cast<int>(k), &one,
                                        weight_ptr(consts_[id].first), static_cast<int>(k), ptr(x),
                                        static_cast<int>(k), &zero, ptr(y), static_cast<int>(f)));
        const float* bias = consts_[id].second.defined() ? weight_ptr(consts_[id].second) : nullptr;
        if (bias || n.act.kind != ActKind::kNone)
          TANDEM_CUDA_CHECK(cnnk::epilogue(ptr(y), bias, nullptr, m, f, 1, act_of(n.act), stream_));
        break;
      }
      case OpKind::kSoftmax: {
        const int64_t last = xs[xs.rank() - 1] == 1 && xs.rank() == 4 ? xs[1] : xs[xs.rank() - 1];
        TANDEM_CUDA_CHECK(cnnk::softmax_rows(ptr(x), ptr(y), xs.numel() / last, last, stream_));
        break;
      }
    }
  }

  Graph g_;
  Device device_;
  int ordinal_ = 0;
  cudaStream_t stream_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::vector<Tensor> buf_;                        // by tensor id, on the device
  std::vector<std::pair<Tensor, Tensor>> consts_;  // by node id: weight, bias on device
  std::vector<std::unique_ptr<ConvPlan>> convs_;   // by node id
  Tensor workspace_;
  size_t workspace_bytes_ = 0;
};

std::unique_ptr<cnn::DeviceRunner> make_runner(const Graph& g, Device device) {
  return std::make_unique<CudnnRunner>(g, device);
}

// Registers the runner when the module is loaded.
const bool registered = [] {
  cnn::register_device_runner(DeviceType::kCuda, &make_runner);
  return true;
}();

}  // namespace

}  // namespace tandem::cuda
