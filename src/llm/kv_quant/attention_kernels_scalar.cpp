// SPDX-License-Identifier: Apache-2.0
// The baseline instance of the ragged KV attention loops in attention_kernels.inc (one float per
// "vector"), compiled for the default target so that it runs on every CPU; and the run-time choice
// among the instances.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "attention_kernels.h"
#include "kernels/dequant.h"
#include "kernels/isa_dispatch.h"
#include "tandem/core/dtype.h"
#include "tandem/core/log.h"

namespace tandem::llm::kvattn {
namespace scalar {
using cpu::BlockQ4_0;
using cpu::BlockQ4_1;
using cpu::BlockQ8_0;
using cpu::dequant_block;
constexpr const char* kIsaName = "scalar";
#include "kernels/simd_scalar.h"

// One code per "vector" (the generic code never takes a vector path for 2- and 4-bit codes here).
struct C {
  static float u8(const uint8_t* p) { return static_cast<float>(p[0]); }
  static float s8(const uint8_t* p) { return static_cast<float>(static_cast<int8_t>(p[0])); }
  static float u4(const uint8_t* p) { return static_cast<float>(p[0] & 15); }
  static float u2(const uint8_t* p) { return static_cast<float>(p[0] & 3); }
  static float lo4(const uint8_t* p) { return static_cast<float>(p[0] & 15); }
  static float hi4(const uint8_t* p) { return static_cast<float>(p[0] >> 4); }
  static float reduce(const float* v) { return v[0]; }
  static float half(uint16_t h) { return f16_to_f32(h); }
  static void pairs(const uint8_t* p, float* a, float* b) {
    uint16_t h[2];
    std::memcpy(h, p, 4);
    *a = f16_to_f32(h[0]);
    *b = f16_to_f32(h[1]);
  }
  static float mask_after(float x, const int32_t* pos, int32_t qpos, int n) {
    return n > 0 && pos[0] <= qpos ? x : -std::numeric_limits<float>::infinity();
  }
};
// The generic loops below use the V and C just defined.
#include "attention_kernels.inc"
}  // namespace scalar

namespace {

const AttentionKernels* pick() {
  const AttentionKernels* t =
      cpu::variant(cpu::usable_isas(), avx512::table(), avx2::table(), scalar::table());
  log().debug("kv attention kernels: {} variant", t->name);
  return t;
}

}  // namespace

const AttentionKernels& attention_kernels() {
  static const AttentionKernels* t = pick();
  return *t;
}

std::vector<const AttentionKernels*> attention_kernel_variants() {
  return cpu::variants(cpu::supported_isas(), avx512::table(), avx2::table(), scalar::table());
}

}  // namespace tandem::llm::kvattn
