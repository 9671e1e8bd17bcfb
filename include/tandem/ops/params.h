// SPDX-License-Identifier: Apache-2.0
// Parameter structs of the backend-neutral ops (see ops.h for shapes and semantics).
#pragma once

#include <cstdint>
#include <vector>

namespace tandem::ops {

struct GemmParams {
  bool trans_a = false;  // A is stored [K, M] instead of [M, K]
  bool trans_b =
      false;  // B is stored [N, K] instead of [K, N] (the weight layout of GGUF and nn.Linear)
  float alpha = 1.0f;
  float beta = 0.0f;  // C = alpha * op(A) op(B) + beta * C
  // Quantized weights [N, K] (trans_b), A [M, K]: the CPU backend may round each row of A to int8
  // blocks of 32 and use integer dot products (llama.cpp's decode arithmetic; ~1/254 relative
  // error per element of A) for q8_0/q4_0/q4_1/Q4_K/Q6_K at M <= 16, each row computed as it
  // would be alone; the CUDA backend does so for M <= 8 (__dp4a). Backends without such a path
  // ignore it.
  bool int8_activations = false;
};

enum class UnaryOp : uint8_t { kSilu, kGelu /* tanh approximation */, kGeluErf, kRelu, kExp };
enum class BinaryOp : uint8_t { kAdd, kMul, kSub };

struct NormParams {
  float eps = 1e-5f;
};

struct RopeParams {
  float theta = 10000.0f;  // base of the rotary frequencies
  int rotary_dim = -1;     // leading dims of each head that rotate; -1 = the whole head
  bool neox = false;  // false: rotate interleaved pairs (2i, 2i+1), GGUF/LLaMA layout as stored in
                      // GGUF; true: rotate halves (i, i + d/2), the GPT-NeoX / HF layout
};

struct AttentionParams {
  float scale = 0.0f;  // 0 = 1/sqrt(head_dim)
  bool causal = true;
  int64_t q_offset =
      -1;  // absolute position of query row 0; -1 = Tk - Tq (queries are the last rows)
  // Query rows (indices into Tq) whose softmax probabilities are also returned in `probs`
  // (shape [Hq, rows.size(), Tk], f32). Empty = none.
  std::vector<int64_t> prob_rows;
};

// Pooling of embedding_bag: the sum of a bag's rows, or their mean (an empty bag gives zeros).
enum class BagMode : uint8_t { kSum, kMean };

struct Conv2dParams {
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;
};

}  // namespace tandem::ops
