// SPDX-License-Identifier: Apache-2.0
// The weight-GEMM parameters of the decoder stack (model_forward.cpp, model_batch.cpp,
// model_layers.cpp): W stored [N, K], C = A W^T + beta C, with int8 activations when `decode`
// asks for them (the backend uses them only for a product of one row; see DecodeArithmetic).
#pragma once

#include "tandem/llm/model.h"
#include "tandem/ops/params.h"

namespace tandem::llm {

ops::GemmParams decode_gemm_params(DecodeArithmetic decode, float beta = 0.0f);

}  // namespace tandem::llm
