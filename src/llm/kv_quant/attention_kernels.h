// SPDX-License-Identifier: Apache-2.0
// Internal: the per-ISA inner loops of the ragged KV attention driver (ragged_attention.h), as a
// table of function pointers. One generic source (attention_kernels.inc, written against the
// vector type V of backends/cpu/fast/simd_*.h plus a few code-unpacking helpers) is compiled for
// AVX-512 F/BW, AVX2+FMA+F16C and baseline x86-64 (attention_kernels_{avx512,avx2,scalar}.cpp,
// each under its own `#pragma GCC target`); attention_kernels() picks the best the host supports
// once (cpu_info()), and TANDEM_CPU_ISA=avx2|scalar forces a lower one as for the other kernels.
//
// The row readers decode a whole block of KV rows (any codec of kv_quant.h) into an f32 scratch
// of block_tokens x d floats that stays in L1, so every code is decoded once per KV head and read
// by all query heads of its GQA group; the score, exp and accumulate loops then run on f32.
//
//   const AttentionKernels& k = attention_kernels();
//   k.decode(rows, scratch);                                       // [n, d] f32
//   k.score(q, group, d, scratch, n, nullptr, scale, pos, qpos, scores, stride, bmax);
#pragma once

#include <cstdint>
#include <vector>

#include "tandem/export.h"

namespace tandem::llm::kvattn {

// How the rows of one block are stored (kv_quant.h's codecs, plus plain f16 rows).
enum class RowCodec : uint8_t {
  kF16,             // plain f16 rows
  kAffine,          // [scale, min] per group of `group` channels, then the codes
  kBlock32,         // llama.cpp q8_0 / q4_0 blocks
  kSymmetric,       // [absmax scale] + signed codes
  kSymmetricMixed,  // bitmap of wide rows, then 8-bit or 4-bit symmetric rows
  kChannel,         // per-channel [scale, min] of the block, then rows of codes: x = min + scale*c
  kChannelCodes,    // the same bytes, decoded to the raw codes c (scales and mins go to `aux`)
};

struct RowBlock {
  RowCodec codec = RowCodec::kF16;
  int bits = 0;
  int64_t group = 0;  // kAffine: channels per (scale, min); already clipped to [1, d]
  const uint8_t* data = nullptr;
  int n = 0;             // rows
  int64_t d = 0;         // row length (head_dim)
  float* aux = nullptr;  // kChannel*: 2 * d floats, filled with the scales then the mins
};

struct AttentionKernels {
  const char* name;  // "avx512", "avx2", "scalar"
  // x [n, d] = the block's rows as f32.
  void (*decode)(const RowBlock& b, float* x);
  // sc[g * stride + s] = scale * (q_g . k_s + bias[g]) for rows with pos[s] <= qpos, -inf for the
  // others (g < group, s < n; q [group, d], k [n, d], bias may be null); bmax[g] = max over s.
  void (*score)(const float* q, int group, int64_t d, const float* k, int n, const float* bias,
                float scale, const int32_t* pos, int32_t qpos, float* sc, int stride, float* bmax);
  // p[s] = exp(sc[s] - m) (0 where sc is -inf), s < n; returns the sum of p.
  float (*exp_sub)(const float* sc, int n, float m, float* p);
  // acc[g, :] += sum_s p[g * stride + s] * v[s, :] for g < group (acc [group, d], v [n, d]).
  void (*accumulate)(const float* p, int group, int stride, int n, const float* v, int64_t d,
                     float* acc);
};

// The table for this host (TANDEM_CPU_ISA may force a lower one).
const AttentionKernels& attention_kernels();
// Every table this host can run, best first (tests compare them).
TANDEM_API std::vector<const AttentionKernels*> attention_kernel_variants();

namespace avx512 {
const AttentionKernels* table();  // nullptr when not compiled for this architecture
}
namespace avx2 {
const AttentionKernels* table();
}
namespace scalar {
const AttentionKernels* table();
}

}  // namespace tandem::llm::kvattn
