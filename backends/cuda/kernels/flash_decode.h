// SPDX-License-Identifier: Apache-2.0
// Index and softmax-merge math of the CUDA paged attention (paged_attention.cu), flash-decoding
// style, compiled for the GPU by that kernel and, the same source, for the host by a CPU test
// (tests/cuda/flash_decode_host_test.cpp) that runs the split and the merge over random paged
// caches and compares them with the CPU reference attention on a machine without a GPU.
//
// What: the slots of each KV head (its pages' used slots, in page order) are cut into chunks of at
// most `chunk_slots` slots; a chunk starts at (page, slot) and may span pages. One GPU block per
// (query row, chunk) scores the chunk's visible slots for every query head of the GQA group (one
// K/V read serves the group) and keeps a partial softmax state per head: the running maximum m,
// the sum l of exp(score - m) and the unnormalised sum acc of exp(score - m) * V. A second kernel
// merges the chunks of each (query row, head): M = max m_c, out = sum_c e^(m_c - M) acc_c /
// sum_c e^(m_c - M) l_c. Why: one block per (row, head) leaves most of a large GPU idle at decode
// (one row) and reads each K/V row once per query head; chunks fill the GPU and share the reads.
//
//   std::vector<FlashChunk> chunks;
//   std::vector<int64_t> head_chunk_begin;
//   plan_flash_chunks(used_per_page, head_page_begin, chunk_slots, chunks, head_chunk_begin);
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define TANDEM_FD_FN __host__ __device__ __forceinline__
#else
#define TANDEM_FD_FN inline
#endif

namespace tandem::cuda {

// A run of `count` consecutive slots of KV head `head`, from slot `slot` of page `page` (an index
// into the flat page table, whose pages of head h are [head_page_begin[h], head_page_begin[h+1])).
struct FlashChunk {
  int32_t head = 0;
  int32_t page = 0;
  int32_t slot = 0;
  int32_t count = 0;
};

// Moves (page, slot) forward by `offset` used slots to the slot that lies there, skipping pages
// without used slots; used(p) is page p's number of used slots. The target slot must exist (an
// offset of 0 from slot 0 of an empty page moves to the next used slot).
template <class Used>
TANDEM_FD_FN void advance_slots(int32_t& page, int32_t& slot, int64_t offset, const Used& used) {
  for (;;) {
    const int64_t left = used(page) - slot;
    if (offset < left) {
      slot += static_cast<int32_t>(offset);
      return;
    }
    offset -= left;
    ++page;
    slot = 0;
  }
}

// Chunk length for a call: enough chunks per head that tq * hkv * chunks blocks fill a large GPU
// (about kFlashTargetBlocks), none shorter than kFlashMinChunk slots, one chunk when the
// (row, head) pairs alone are enough.
inline constexpr int64_t kFlashTargetBlocks = 1024;
inline constexpr int64_t kFlashMinChunk = 64;
inline int64_t flash_chunk_slots(int64_t tq, int64_t hkv, int64_t max_head_slots) {
  if (max_head_slots <= kFlashMinChunk) return kFlashMinChunk;
  const int64_t pairs = tq * hkv > 0 ? tq * hkv : 1;
  int64_t chunks = (kFlashTargetBlocks + pairs - 1) / pairs;
  const int64_t most = (max_head_slots + kFlashMinChunk - 1) / kFlashMinChunk;
  chunks = chunks < 1 ? 1 : (chunks > most ? most : chunks);
  return (max_head_slots + chunks - 1) / chunks;
}

// The chunks of every head, head by head: head h's are [head_chunk_begin[h],
// head_chunk_begin[h+1]). used: used slots of every page of the flat table; head_page_begin: hkv +
// 1 entries. A head without slots gets no chunk.
inline void plan_flash_chunks(const std::vector<int32_t>& used,
                              const std::vector<int64_t>& head_page_begin, int64_t chunk_slots,
                              std::vector<FlashChunk>& chunks,
                              std::vector<int64_t>& head_chunk_begin) {
  chunks.clear();
  const int64_t hkv = static_cast<int64_t>(head_page_begin.size()) - 1;
  head_chunk_begin.assign(static_cast<size_t>(hkv + 1), 0);
  const auto used_of = [&](int32_t p) {
    return static_cast<int64_t>(used[static_cast<size_t>(p)]);
  };
  for (int64_t h = 0; h < hkv; ++h) {
    head_chunk_begin[h] = static_cast<int64_t>(chunks.size());
    int64_t total = 0;
    for (int64_t p = head_page_begin[h]; p < head_page_begin[h + 1]; ++p)
      total += used_of(int32_t(p));
    if (total == 0) continue;
    int32_t page = static_cast<int32_t>(head_page_begin[h]), slot = 0;
    advance_slots(page, slot, 0, used_of);  // the first used slot
    for (int64_t start = 0; start < total; start += chunk_slots) {
      const int64_t count = total - start < chunk_slots ? total - start : chunk_slots;
      chunks.push_back(
          FlashChunk{static_cast<int32_t>(h), page, slot, static_cast<int32_t>(count)});
      if (start + count < total) advance_slots(page, slot, count, used_of);
    }
  }
  head_chunk_begin[hkv] = static_cast<int64_t>(chunks.size());
}

// ---------------------------------------------------------------- softmax states
// Folding a tile of scores into a state (m, l, acc): m_new = max(m, tile max); the old l and acc
// are scaled by rescale(m, m_new), each score s contributes weight(s, m_new). Masked scores are
// -inf; a state that has seen only masked scores keeps m = -inf, l = 0.
TANDEM_FD_FN float fd_exp(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return std::exp(x);
#endif
}
TANDEM_FD_FN float rescale(float m_old, float m_new) {
  return m_old == -INFINITY ? 0.0f : (m_new == -INFINITY ? 1.0f : fd_exp(m_old - m_new));
}
TANDEM_FD_FN float weight(float score, float m_new) {
  return score == -INFINITY ? 0.0f : fd_exp(score - m_new);
}

// The merge of n chunk states of one (row, head): m[c * stride], l[c * stride]. Returns the
// maximum M and sets *inv_l to 1 / sum_c e^(m_c - M) l_c (0 when no chunk saw a visible slot, so
// that the row comes out as zeros); chunk c's acc then enters with weight rescale(m_c, M) * *inv_l.
TANDEM_FD_FN float merge_states(const float* m, const float* l, int64_t n, int64_t stride,
                                float* inv_l) {
  float mx = -INFINITY;
  for (int64_t c = 0; c < n; ++c) mx = m[c * stride] > mx ? m[c * stride] : mx;
  float sum = 0.0f;
  for (int64_t c = 0; c < n; ++c) sum += rescale(m[c * stride], mx) * l[c * stride];
  *inv_l = sum > 0.0f ? 1.0f / sum : 0.0f;
  return mx;
}

}  // namespace tandem::cuda

#undef TANDEM_FD_FN
