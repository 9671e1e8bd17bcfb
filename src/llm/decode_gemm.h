// SPDX-License-Identifier: Apache-2.0
// The weight-GEMM parameters of the decoder stack (model_forward.cpp, model_batch.cpp,
// model_layers.cpp): W stored [N, K], C = A W^T + beta C, with int8 activations when `decode`
// asks for them and the forward is a decode step, one token per sequence (see DecodeArithmetic):
// a single sequence's one-token forward, or a batch of sequences one token each (up to 16 on the
// CPU), whose rows are then each computed as they would be alone. A prefill (and a batch step
// holding a prefill chunk) stays f32 throughout, its one-row head of last_only included.
#pragma once

#include "tandem/llm/model.h"
#include "tandem/ops/params.h"

namespace tandem::llm {

ops::GemmParams decode_gemm_params(DecodeArithmetic decode, bool decode_step, float beta = 0.0f);

}  // namespace tandem::llm
