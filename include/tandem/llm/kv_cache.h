// SPDX-License-Identifier: Apache-2.0
// KvCache: the keys and values of one sequence, per layer and per KV head, as a ragged list of
// fixed-size blocks, so that KV-cache policies (eviction such as ClusterAttn, mixed precision such
// as QoKV) work on real memory.
//
// Layout: cache[layer][kv_head] is a list of KvBlocks. A block holds up to block_tokens token
// slots: K rows [block_tokens, head_dim] and V rows [block_tokens, head_dim] in the block's dtype
// (f32, or f16 when KvCacheShape::dtype asks for it: half the bytes, rows rounded to nearest even
// on append and widened to f32 by the attention; the per-block dtype lets quantized blocks sit
// beside them later), plus the
// token position of every slot (keys are stored after RoPE, so a slot keeps the position it was
// rotated with and causal masking compares positions, not slot indices). Blocks are Tensors from
// the device allocator: memory_stats(device) counts the cache's bytes, and a block that is
// dropped (retain(), clear()) is freed at once. Heads may hold different token sets after eviction.
//
//   KvCache cache(KvCacheShape{.n_layers = 30, .n_kv_heads = 3, .head_dim = 64});
//   cache.append(layer, k_rows, v_rows, positions);     // k_rows, v_rows: f32 [T, Hkv, D]
//   for (const KvBlock& b : cache.blocks(layer, head)) { ... b.k, b.v, b.positions, b.used ... }
//   cache.retain(layer, head, {0, 1, 7});               // keep 3 slots, free the rest
//
// Quantized blocks (kv_quant.h): a policy may replace a head's f32/f16 blocks by blocks whose K
// and V are packed codes (dtype kU8, KvBlock::kq / vq say how they are encoded: per-token affine
// int8/int4/int2, llama.cpp q8_0/q4_0, per-token symmetric with mixed 8/4-bit rows, per-channel
// KIVI keys). Such blocks are immutable: append() starts a new f32/f16 block after them, and
// retain() re-encodes the kept slots of a quantized block in its own format. cache_attention
// reads the codes directly. A head may also carry per-channel scales (QoKV): blocks flagged
// channel_scaled hold K / s_k and V / s_v.
//
// Policies: a KvPolicy is told when a prefill ends and may edit the cache (evict, requantize);
// FullCachePolicy, which keeps everything, is the first one. Thread-safety: a KvCache belongs to
// one sequence and is not shared; blocks of different heads may be read concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/dtype.h"
#include "tandem/core/tensor.h"
#include "tandem/export.h"

namespace tandem::llm {

// How the rows of a quantized block's K or V are encoded (byte layouts in kv_quant.h).
enum class KvCodec : uint8_t {
  kPlain,      // f32 / f16 rows (the block's dtype)
  kAffine,     // per token, per group of `group` channels: f16 scale + f16 min, `bits`-bit codes
  kBlock32,    // llama.cpp q8_0 (bits 8) / q4_0 (bits 4): 32-element blocks with an f16 scale
  kSymmetric,  // per token: f16 absmax scale + `bits`-bit signed codes; `mixed`: 8 or 4 per slot
  kChannel,    // per channel over the block's slots (KIVI keys): f16 scale + f16 min, codes
};

struct KvQuantFormat {
  KvCodec codec = KvCodec::kPlain;
  uint8_t bits = 0;    // code width: 2, 4 or 8
  uint16_t group = 0;  // kAffine: channels per scale group (0: the whole row)
  bool mixed = false;  // kSymmetric: a per-slot bitmap picks 8-bit (set) or 4-bit rows
  bool operator==(const KvQuantFormat&) const = default;
};

// One block of token slots of one (layer, KV head).
struct KvBlock {
  DType dtype = DType::kF32;       // storage type of k and v (kU8 for quantized blocks)
  Tensor k;                        // [block_tokens, head_dim]; quantized: [bytes] packed codes
  Tensor v;                        // [block_tokens, head_dim]; quantized: [bytes] packed codes
  std::vector<int32_t> positions;  // token position of slots [0, used)
  int32_t used = 0;                // slots filled
  KvQuantFormat kq, vq;            // encodings of k and v (kPlain for f32/f16 blocks)
  bool channel_scaled = false;     // holds K / s_k and V / s_v (KvCache::channel_scales)
  bool quantized() const { return kq.codec != KvCodec::kPlain || vq.codec != KvCodec::kPlain; }
};

struct KvCacheShape {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_tokens = 32;  // token slots per block
  Device device = Device::cpu();
  DType dtype = DType::kF32;  // storage of new blocks: kF32 or kF16
};

class KvCache;

// A policy over the cache. Hooks run on the caller's thread.
class TANDEM_API KvPolicy {
 public:
  virtual ~KvPolicy() = default;
  virtual std::string name() const = 0;
  // Called once a prompt has been prefilled (before the first decode step).
  virtual void on_prefill_done(KvCache& cache) { (void)cache; }
  // Called after every decode step's tokens were appended to all layers.
  virtual void on_decode_step(KvCache& cache) { (void)cache; }

  // Queries, for policies that score tokens by attention (SnapKV, ClusterAttn, H2O, QoKV).
  // query_window(): how many of the last prompt tokens' queries the policy wants to see at the end
  // of a prefill (0: none, the default). observes_decode_queries(): whether it also wants every
  // decode step's query. The model then calls observe_queries() per layer, after that layer's K/V
  // were appended to the cache, with the post-RoPE queries f32 [W, n_heads, head_dim] on the host
  // and their positions (W <= query_window() at prefill: the last rows of the prompt; the step's
  // rows in decode), and whether they come from the prefill or a decode step. Query head h reads
  // KV head h / (n_heads / n_kv_heads).
  virtual int query_window() const { return 0; }
  virtual bool observes_decode_queries() const { return false; }
  virtual void observe_queries(const KvCache& cache, int layer, const Tensor& q,
                               std::span<const int32_t> positions, bool prefill) {
    (void)cache, (void)layer, (void)q, (void)positions, (void)prefill;
  }
};

// Keeps every token: the baseline every eviction policy is compared with.
class TANDEM_API FullCachePolicy : public KvPolicy {
 public:
  std::string name() const override { return "full"; }
};

class TANDEM_API KvCache {
 public:
  // InvalidArgument for non-positive sizes, Unsupported for a dtype other than f32/f16. The
  // policy defaults to FullCachePolicy.
  explicit KvCache(const KvCacheShape& shape, std::shared_ptr<KvPolicy> policy = nullptr);
  KvCache(KvCache&&) noexcept = default;
  KvCache& operator=(KvCache&&) noexcept = default;

  const KvCacheShape& shape() const { return shape_; }
  KvPolicy& policy() const { return *policy_; }

  // Appends T tokens to `layer`: k_rows and v_rows f32 [T, n_kv_heads, head_dim] (contiguous, on
  // the cache's device), positions of length T. Every head of the layer gets the T slots
  // (converted to the cache's dtype).
  void append(int layer, const Tensor& k_rows, const Tensor& v_rows,
              std::span<const int32_t> positions);

  // The blocks of one (layer, KV head), in insertion order; slots [0, used) of each are valid.
  const std::vector<KvBlock>& blocks(int layer, int head) const;
  // Tokens held by one (layer, KV head).
  int64_t tokens(int layer, int head) const;
  // Tokens of the largest head over all layers (the sequence length for the full cache).
  int64_t max_tokens() const;
  // Position the next token of the sequence gets: one past the largest position ever appended
  // (eviction does not change it).
  int32_t next_position() const { return next_position_; }

  // Keeps only the given slots (indices into the head's token list, in the order blocks() lists
  // them; ascending, no duplicates) of one (layer, head), packed into full blocks (plain CPU rows
  // move in place), the emptied blocks freed. InvalidArgument for bad indices.
  void retain(int layer, int head, std::span<const int64_t> slots);
  // Replaces the blocks of one (layer, head) (e.g. by quantized ones, kv_quant.h); the old
  // blocks are freed. InvalidArgument for blocks of another shape or device.
  void replace_blocks(int layer, int head, std::vector<KvBlock> blocks);
  // Per-channel scales of one (layer, head): f32 [2, head_dim] (row 0 s_k, row 1 s_v), or
  // nullptr when none were set. set_channel_scales copies them into an allocator tensor.
  const Tensor* channel_scales(int layer, int head) const;
  void set_channel_scales(int layer, int head, std::span<const float> k_scale,
                          std::span<const float> v_scale);
  // Whether any block of the layer is quantized (cache_attention then reads codes).
  bool has_quantized(int layer) const;
  // Drops every token (memory is freed) and resets next_position().
  void clear();
  // A deep copy (every block copied, same device) driven by `policy` (FullCachePolicy when null),
  // so that one prefilled prompt can be compressed by several policies (tandem kv-eval).
  KvCache clone(std::shared_ptr<KvPolicy> policy = nullptr) const;

  // Bytes of all allocated blocks (K, V, codes and scales; what the allocator charged for them)
  // and of the channel scales.
  int64_t bytes() const;
  // Bytes of one block of the given dtype (the cache's dtype when omitted).
  int64_t block_bytes() const { return block_bytes(shape_.dtype); }
  int64_t block_bytes(DType dtype) const;

 private:
  std::vector<KvBlock>& head_blocks(int layer, int head);
  KvBlock new_block(DType dtype) const;
  // Caches on a GPU: rows move with device copies (ops::convert of strided views), one per run of
  // slots, instead of memcpy (kv_cache_device.cpp).
  void append_device(int layer, const Tensor& k_rows, const Tensor& v_rows,
                     std::span<const int32_t> positions);
  void retain_device(int layer, int head, std::span<const int64_t> slots);
  // Writes one K and one V row (f32) into slot `slot` of b, converting to b's dtype.
  void store_row(KvBlock& b, int64_t slot, const float* k, const float* v) const;

  KvCacheShape shape_;
  std::shared_ptr<KvPolicy> policy_;
  std::vector<std::vector<KvBlock>> heads_;  // [layer * n_kv_heads + head]
  std::vector<Tensor> channel_scales_;       // [layer * n_kv_heads + head], empty when unset
  int32_t next_position_ = 0;
};

}  // namespace tandem::llm
