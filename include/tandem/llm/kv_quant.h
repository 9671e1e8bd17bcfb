// SPDX-License-Identifier: Apache-2.0
// Quantized KV cache: packed K/V codes in the blocks of a KvCache, the policies that produce them
// (uniform int8/int4, llama.cpp q8_0/q4_0, KIVI, QoKV) and QoKV's offline calibration.
//
// Why: the KV cache dominates memory at long context; storing 4-bit codes instead of f16 cuts it
// ~3.5x. The codes live in the allocator (memory_stats falls), and cache_attention reads them
// directly (fused dequantizing dot products), never through a dequantized copy of the cache.
//
// Formats (d = head_dim, all scales f16, codes packed little-endian: element i at bit i*bits):
//   kAffine  bits b, group g: per slot, per g channels [scale, min], then ceil(d*b/8) code bytes;
//            x = min + scale * code (uniform int8/int4 per token: g = d; KIVI values: g = 32).
//   kBlock32 llama.cpp q8_0 (per 32 values: scale + 32 int8) and q4_0 (scale + 16 bytes, value j
//            in the low nibble of byte j and value j+16 in the high one, x = scale * (q - 8)).
//   kSymmetric per slot [absmax scale] + signed codes (8-bit: int8, x = scale*q, |q| <= 127;
//            4-bit: q+8 in a nibble, |q| <= 7); `mixed`: the block starts with a bitmap of
//            ceil(n/8) bytes, bit s set = slot s is 8-bit (QoKV keys).
//   kChannel bits b: per channel over the block's n slots [scale, min] (d pairs), then n rows of
//            ceil(d*b/8) code bytes (KIVI keys; a block is one quantization group of tokens).
//
//   llm::KvPolicyOptions opt;
//   auto cache = model.make_cache(llm::make_kv_policy("qokv", opt, model.cache_shape()));
//   // ... forward the prompt, then cache.policy().on_prefill_done(cache): K/V are codes now
//
// Policies (registered in kv_policy_registry.h): int8, int4 (per-token affine), q8_0, q4_0,
// kivi2, kivi4 (keys per channel, values per token in groups of 32 channels, residual of the R
// most recent tokens in full precision, R = extra["residual"], default 32), qokv (see below).
// Full-precision tokens are quantized in whole blocks of block_tokens once they are older than the
// R most recent (R = 0 for the uniform and llama.cpp formats: a block is quantized when it fills);
// a partial block stays full precision until it fills (so a few tokens per head stay f32).
//
// QoKV (spec llm.md 2.3). Prefill, as the spec: the policy scores every prefill query it is
// handed (all rows of every prefill batch by default, so ā_j is the spec's average over every
// (query, head) pair of the GQA group that sees key j; `--kv-set window=N` scores only the last N
// rows of each batch, cheaper: the scoring pass is O(H n^2 d)); [0, n) is split into the
// calibrated contiguous groups of the layer (fractions f_g, 10 by default, equal without
// calibration); in each group the top round(n * ratio / groups) tokens by ā keep 8-bit keys, the
// rest 4-bit (per-token symmetric absmax; ratio 0.1). With a calibration file, the layer's
// per-channel scales are applied after RoPE (K/s_k stored, q*s_k at attention; V/s_v stored, the
// output rescaled by s_v), which keeps QK^T exact in real arithmetic for any s (so RoPE pairs need
// no equal scales; the calibration still ties them).
// Reconstruction (the paper's decode text is unavailable; the released code is prefill-only):
//   - decode rule: new tokens stay in an f16 residual (spec: "fp16") of R tokens (residual, 32);
//     meanwhile every query that sees them (decode steps, and later prefill batches) adds the
//     attention it gives them (softmax over the full-precision tokens) to a per-token sum; when a
//     full block leaves the residual, its round(decode_ratio * block) most-attended slots (by the
//     average over the queries that saw them) keep 8-bit keys in the mixed format, the rest 4-bit;
//   - values: 4-bit affine (scale + min) per 64 channels, i.e. per token at head_dim 64, at
//     prefill and decode (vgroup; 0 = the spec's symmetric 4-bit, per token, since a per-tensor
//     scale cannot bound future tokens); the calibration's V scales are searched for this
//     quantizer (value_group, recorded in the file);
//   - the scale search runs the deployed quantizers with f16 scales.
// Settings (--kv-set): ratio, decode_ratio, groups, residual, window, vbits (4; 8 for the
// ablation), vgroup, scales (0: ignore the calibration's channel scales), f16_residual (0: keep the
// cache's f32). Bits: per row an f16 scale (K) or scale + min (V), so 10% 8-bit keys give
// (0.1 * 8.25 + 0.9 * 4.25 + 4.5) / 2 = 4.575 bits plus the residual, not the README's 4.2, which
// counts codes only (measured: docs/results/kv-quant-smollm2.md).
//
// Thread-safety: policies belong to one cache; the codec functions are pure.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/export.h"
#include "tandem/llm/kv_cache.h"
#include "tandem/llm/model.h"

namespace tandem::llm {

// Bytes of n encoded rows of head_dim d; `wide` (mixed kSymmetric only, n entries): 1 = 8-bit.
TANDEM_API int64_t kv_encoded_bytes(const KvQuantFormat& f, int64_t n, int64_t d,
                                    std::span<const uint8_t> wide = {});
// Encodes rows x f32 [n, d] into out (kv_encoded_bytes bytes). InvalidArgument for a format
// that does not exist (bits, group) or a missing bitmap.
TANDEM_API void kv_encode(const KvQuantFormat& f, const float* x, int64_t n, int64_t d,
                          std::span<const uint8_t> wide, uint8_t* out);
// Decodes n rows into x f32 [n, d].
TANDEM_API void kv_decode(const KvQuantFormat& f, const uint8_t* in, int64_t n, int64_t d,
                          float* x);
// Validates a format (InvalidArgument naming the field); plain formats are valid.
TANDEM_API void kv_check_format(const KvQuantFormat& f, const char* what);
// "f32", "affine8/g64", "q4_0", "sym8/4", "chan2", ...
TANDEM_API std::string kv_format_name(const KvQuantFormat& f);

// The K and V rows of one block as f32 [used, d] (channel scales applied when the block holds
// K/s, V/s and the cache has them). Blocks on a GPU are downloaded and decoded on the host.
TANDEM_API void kv_block_rows(const KvCache& cache, int layer, int head, const KvBlock& b,
                              std::vector<float>& k, std::vector<float>& v);
// A quantized block of n slots on the cache's device from f32 rows k, v [n, d] (already divided
// by channel scales when channel_scaled): encoded on the host, the codes uploaded to a GPU cache.
TANDEM_API KvBlock kv_make_block(const KvCache& cache, const KvQuantFormat& kq,
                                 const KvQuantFormat& vq, const float* k, const float* v,
                                 std::span<const int32_t> positions,
                                 std::span<const uint8_t> k_wide = {}, bool channel_scaled = false);

// A tap on cache_attention: while a ScopedAttentionTap lives on a thread, every cache_attention
// call on that thread first calls the tap with the layer's post-RoPE queries q f32 [T, n_heads,
// head_dim] and their positions (after the layer's K/V were appended). qokv-calibrate records
// queries with it; perplexity() uses it to hand a policy its prefill window when asked. Taps nest
// (the previous one is restored on destruction) and are not called for caches on a GPU.
using AttentionTap = std::function<void(const KvCache& cache, int layer, const Tensor& q,
                                        std::span<const int32_t> positions)>;
class TANDEM_API ScopedAttentionTap {
 public:
  explicit ScopedAttentionTap(AttentionTap tap);
  ~ScopedAttentionTap();
  ScopedAttentionTap(const ScopedAttentionTap&) = delete;
  ScopedAttentionTap& operator=(const ScopedAttentionTap&) = delete;

 private:
  AttentionTap previous_;
};

// Measured storage of a cache: bytes over elements (2 * tokens * head_dim over all heads).
struct KvStorageStats {
  int64_t bytes = 0;
  int64_t elements = 0;
  double bits_per_element = 0.0;
};
TANDEM_API KvStorageStats kv_storage_stats(const KvCache& cache);

// QoKV calibration (offline): per layer, contiguous group fractions (sum 1) and per KV head the
// per-channel scales for K and V (>= 1, equal within each RoPE pair for K).
struct QokvLayerCalibration {
  std::vector<double> group_fractions;
  std::vector<std::vector<float>> k_scale;  // [n_kv_heads][head_dim]
  std::vector<std::vector<float>> v_scale;  // [n_kv_heads][head_dim]
};
struct QokvCalibration {
  std::string model;  // free text: what it was calibrated on
  int n_layers = 0, n_kv_heads = 0, head_dim = 0;
  // The value quantizer the V scales were searched for (QokvCalibrationOptions::value_group; the
  // policy's default vgroup); -1: not recorded (files written before it existed).
  int value_group = -1;
  std::vector<QokvLayerCalibration> layers;
};

// JSON ("format": "tandem-qokv-calibration", "version": 1). load: IoError when unreadable,
// InvalidArgument naming the file and the field for malformed content or inconsistent sizes.
TANDEM_API void save_qokv_calibration(const QokvCalibration& c, const std::string& path);
TANDEM_API QokvCalibration load_qokv_calibration(const std::string& path);
TANDEM_API QokvCalibration parse_qokv_calibration(const std::string& json_text,
                                                  const std::string& where);

// The calibration statistics of one sample and layer: post-RoPE q f32 [n, n_heads, d], k and v
// f32 [n, n_kv_heads, d] of a prompt of n tokens at positions 0..n-1.
struct QokvSample {
  std::vector<float> q, k, v;
  int64_t n = 0;
};
struct QokvCalibrationOptions {
  int groups = 10;             // contiguous position groups (spec: 10)
  int top_tokens = 1000;       // important positions clustered per sample (capped at n / 2)
  int search_steps = 48;       // clipping thresholds tried in the channel-scale search
  int search_queries = 32;     // queries (last rows) in the QK^T error of the search
  bool channel_scales = true;  // false: all scales 1 (the ablation)
  int value_group = 64;        // value quantizer of the V search: 0 symmetric per token, else
                               // affine 4-bit per value_group channels (the policy's vgroup)
};
// Calibration A (groups) and B (scales) of spec 2.3 for one layer over samples; n_heads query
// heads, n_kv_heads KV heads of head_dim d. InvalidArgument for empty or inconsistent samples.
TANDEM_API QokvLayerCalibration calibrate_qokv_layer(std::span<const QokvSample> samples,
                                                     int n_heads, int n_kv_heads, int head_dim,
                                                     const QokvCalibrationOptions& options = {});

// Average attention each key j of one KV head receives from the window queries: q f32 [w,
// n_heads, d] at positions qpos, the `group` query heads [first_head, first_head + group) pooled;
// keys k f32 [n, d] at positions kpos. A key's average is over the (query, head) pairs that see
// it (position <= query position), as spec 2.3's ā; keys no query sees get 0.
TANDEM_API std::vector<float> qokv_importance(const float* q, std::span<const int32_t> qpos,
                                              int n_heads, int first_head, int group,
                                              const float* k, std::span<const int32_t> kpos,
                                              int head_dim);

// The sums behind qokv_importance: adds to total[j] the attention probability key j gets from
// every (query, head) pair that sees it and to count[j] the number of such pairs (total and count
// have one entry per key). With keys restricted to a subset of the cache (QoKV's decode rule
// scores the full-precision residual only), the softmax is over that subset, so the ranking of
// keys for each query is exact and only the per-query normalisation differs.
TANDEM_API void qokv_attention_totals(const float* q, std::span<const int32_t> qpos, int n_heads,
                                      int first_head, int group, const float* k,
                                      std::span<const int32_t> kpos, int head_dim,
                                      std::span<double> total, std::span<int64_t> count);

// The QoKV 8-bit selection of n tokens with importance ā: per contiguous group (fractions, empty:
// equal) the top round(n * ratio / groups) tokens. Returns n flags (1 = 8-bit key).
TANDEM_API std::vector<uint8_t> qokv_select(std::span<const float> importance,
                                            std::span<const double> fractions, double ratio,
                                            int groups = 10);

}  // namespace tandem::llm
