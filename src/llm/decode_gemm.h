// SPDX-License-Identifier: Apache-2.0
// The weight-GEMM parameters of the decoder stack (model_forward.cpp, model_batch.cpp,
// model_layers.cpp): W stored [N, K], C = A W^T + beta C, with int8 activations when `decode`
// asks for them and the forward runs `tokens` = 1 token in all (see DecodeArithmetic). A prefill
// stays f32 throughout, its one-row head of last_only included.
#pragma once

#include "tandem/llm/model.h"
#include "tandem/ops/params.h"

namespace tandem::llm {

ops::GemmParams decode_gemm_params(DecodeArithmetic decode, int64_t tokens, float beta = 0.0f);

}  // namespace tandem::llm
