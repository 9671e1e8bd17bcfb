// SPDX-License-Identifier: Apache-2.0
// conv2d across calls that share cached state in a backend (the CPU backend keeps one oneDNN
// primitive per shape and thread count, with reusable reorder buffers): changing the thread count
// between calls, writing new values into the same weight tensor, and concurrent calls of one shape
// from several threads must all give the reference result.
#include <thread>
#include <vector>

#include "consistency_common.h"

namespace tandem::testing {
namespace {

ops::Conv2dParams pad1() {
  ops::Conv2dParams p;
  p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
  return p;
}

Tensor reference_conv(const Tensor& x, const Tensor& w, const Tensor& bias,
                      const ops::Conv2dParams& p) {
  Tensor want = Tensor::empty(ops::conv2d_output_shape(x.shape(), w.shape(), p), DType::kF32);
  reference().conv2d(x, w, bias, want, p, nullptr);
  return want;
}

TEST(Conv2d, ThreadCountChangesAndWeightUpdates) {
  TANDEM_OPS_PROLOGUE();
  const ops::Conv2dParams p = pad1();
  const Tensor x = random_tensor({1, 32, 12, 12}, 900);
  Tensor w = random_tensor({32, 32, 3, 3}, 901);
  const Tensor bias = random_tensor({32}, 902);
  const Tensor xd = on_device(x), bd = on_device(bias);
  const Tol tol = tol::reduction(32 * 9);
  const int saved = cpu_num_threads();
  for (int threads : {1, 2, 1, 2}) {
    const std::string what = cat("conv2d with ", threads, " CPU threads");
    set_cpu_num_threads(threads);
    Guarded out(ops::conv2d_output_shape(x.shape(), w.shape(), p), DType::kF32);
    ops::conv2d(xd, on_device(w), bd, out.view(), p);
    expect_close(out.result(what), reference_conv(x, w, bias, p), tol, what);
  }
  set_cpu_num_threads(saved);
  // New values in the same weight buffer: nothing may be cached by address.
  Tensor wd = on_device(w);
  for (int round = 0; round < 2; ++round) {
    const std::string what = cat("conv2d after weight update ", round);
    const Tensor w_new = random_tensor(w.shape(), 910 + round);
    wd.copy_from(on_device(w_new));
    Guarded out(ops::conv2d_output_shape(x.shape(), w.shape(), p), DType::kF32);
    ops::conv2d(xd, wd, bd, out.view(), p);
    expect_close(out.result(what), reference_conv(x, w_new, bias, p), tol, what);
  }
}

// CPU only: oneDNN primitives cached per shape and called from several threads at once.
TEST(Conv2dCpuOnly, ConcurrentCallsOfOneShape) {
  const ops::Conv2dParams p = pad1();
  const Shape xs{1, 16, 10, 10}, ws{24, 16, 3, 3};
  constexpr int kThreads = 4, kCalls = 3;
  std::vector<Tensor> xs_in, ws_in, outs, wants;
  for (int i = 0; i < kThreads * kCalls; ++i) {
    xs_in.push_back(random_tensor(xs, 1000 + i));
    ws_in.push_back(random_tensor(ws, 2000 + i));
    wants.push_back(reference_conv(xs_in.back(), ws_in.back(), Tensor(), p));
    outs.push_back(Tensor::empty(wants.back().shape(), DType::kF32));
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) {
        const int i = t * kCalls + c;
        ops::conv2d(xs_in[i], ws_in[i], Tensor(), outs[i], p);
      }
    });
  }
  for (auto& th : pool) th.join();
  for (int i = 0; i < kThreads * kCalls; ++i)
    expect_close(outs[i], wants[i], tol::reduction(16 * 9), cat("concurrent conv2d call ", i));
}

}  // namespace
}  // namespace tandem::testing
