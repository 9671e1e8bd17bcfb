// SPDX-License-Identifier: Apache-2.0
// The CPU backend's two kernel tables: plain reference kernels (ground truth) and the fast paths
// (vectorised, multi-threaded, oneDNN/OpenBLAS behind GEMM and conv) used by default.
#pragma once

#include <memory>
#include <utility>

#include "tandem/core/stream.h"
#include "tandem/ops/ops.h"

namespace tandem::cpu {

ops::OpKernels& reference_kernels();
std::unique_ptr<ops::OpKernels> make_fast_kernels();

// Runs fn now (s == nullptr) or enqueues it on the CPU stream s. fn captures tensors by value.
template <class F>
void run_on(Stream* s, F&& fn) {
  if (s == nullptr) {
    fn();
  } else {
    s->launch(std::forward<F>(fn));
  }
}

}  // namespace tandem::cpu
