// SPDX-License-Identifier: Apache-2.0
// "sched.mlp": a real, cheap stage kind for testing and benchmarking the pipeline runtime without
// an LLM.
//
// Layers [first_layer, last_layer) of a seeded MLP over F32 activations [T, d]: for each layer l,
// x = gelu(x W_l + b_l) through tandem ops (ops::gemm, ops::add, ops::gelu), where W_l [d, d] and
// b_l [d] are drawn from a generator seeded with (seed, l) only. Splitting the layers over any
// number of stages therefore computes exactly what one stage holding all of them computes (without
// carry). With "carry": true each stage is stateful like an LLM stage's KV cache: before its
// layers, every row of micro-batch i gets the running sum of the row-means of the outputs of
// micro-batches 0..i-1 of the same request added, micro-batches must arrive in order (an
// out-of-order or repeated one is an error, which is how the tests see duplicates), and
// reset(request_id) frees that state.
//
//   auto st = sched::make_stage({{"kind", "sched.mlp"}, {"d", 64}, {"first_layer", 0},
//                                {"last_layer", 4}, {"seed", 7}, {"carry", true}});
//
// Config keys: d (1..8192), first_layer >= 0, last_layer > first_layer (<= 4096), seed (unsigned,
// default 1), carry (bool, default false). Unknown keys or bad values: InvalidArgument.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "tandem/core/tensor.h"
#include "tandem/export.h"

namespace tandem::sched {

// Input activations for tests and `tandem pipeline run`: F32 [tokens, d] seeded by (seed, request
// id, micro) in [-1, 1].
TANDEM_API Tensor mlp_stage_input(int64_t tokens, int64_t d, uint64_t seed, uint64_t request_id,
                                  int32_t micro);

}  // namespace tandem::sched
