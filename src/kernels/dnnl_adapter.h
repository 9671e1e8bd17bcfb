// SPDX-License-Identifier: Apache-2.0
// Kernel toolkit (src/kernels). The only door to oneDNN (Debian libdnnl-dev 2.6): dnnl_sgemm for
// f32 GEMM and the convolution_forward primitive (2.x operation-descriptor API) for conv2d. Built
// only with TANDEM_HAVE_DNNL; otherwise available() is false and the calls throw Unsupported.
// oneDNN threads with OpenMP: each call runs with `threads` OpenMP threads (the caller's setting is
// restored afterwards).
#pragma once

#include <cstdint>

#include "tandem/core/tensor.h"
#include "tandem/ops/params.h"

namespace tandem::cpu::onednn {

bool available();

// Row-major: C = alpha * op(A) op(B) + beta * C.
void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           int threads);

// NCHW f32 convolution with optional bias. Primitives are cached per shape, parameters and thread
// count (thread-safe), together with their reorder primitives and reusable buffers; oneDNN picks
// the layouts (format_tag::any) and inputs, weights and outputs are reordered per call where its
// layout differs from NCHW / OIHW (weights in place when it keeps OIHW). Weights are not cached
// across calls: their contents may change (a prepacking API belongs to the CNN engine). Returns
// false when oneDNN cannot build a primitive for this case (the caller falls back to im2col).
bool conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
            const ops::Conv2dParams& p, int threads);

}  // namespace tandem::cpu::onednn
