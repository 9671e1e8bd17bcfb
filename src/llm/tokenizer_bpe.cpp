// SPDX-License-Identifier: Apache-2.0
// Byte-level BPE: a word's bytes become their single-byte tokens, then the adjacent pair with the
// lowest merge rank is merged (leftmost on ties) until no pair has a merge. A min-heap of candidate
// pairs with lazy invalidation keeps this O(n log n) per word; finished words are cached.
#include <queue>
#include <tuple>

#include "llm/tokenizer_internal.h"
#include "llm/unicode.h"
#include "tandem/core/error.h"
#include "tandem/core/log.h"

namespace tandem::llm::detail {
namespace {

constexpr size_t kMaxCachedWordBytes = 64;
constexpr size_t kMaxCacheEntries = 1 << 17;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

BytePairModel::BytePairModel(const Vocab& vocab, const PieceIndex& index)
    : index_(&index), pre_(pre_tokenizer_kind(vocab.pre)) {
  ignore_merges_ = pre_ == PreTokenizerKind::kLlama3;
  const auto& stand_ins = unicode::byte_to_unicode();
  const bool unk_is_unknown = vocab.unk_id >= 0 &&
                              static_cast<size_t>(vocab.unk_id) < vocab.types.size() &&
                              vocab.types[vocab.unk_id] == TokenType::kUnknown;
  int missing_bytes = 0;
  for (int b = 0; b < 256; ++b) {
    byte_text_[b] = stand_ins[b];
    auto it = index.find(stand_ins[b]);
    if (it != index.end()) {
      byte_ids_[b] = it->second;
    } else if (unk_is_unknown) {
      byte_ids_[b] = vocab.unk_id;
    } else {
      byte_ids_[b] = -1;  // dropped, as llama.cpp and HF tokenizers do
      ++missing_bytes;
    }
  }
  if (missing_bytes == 256) throw InvalidArgument("tokenizer: byte-level vocab has no byte tokens");
  if (missing_bytes != 0) {
    log().debug("tokenizer: {} bytes have no token in the byte-level vocab; they are dropped",
                missing_bytes);
  }
  merges_.reserve(vocab.merges.size());
  size_t skipped = 0;
  std::string joined;
  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const std::string& m = vocab.merges[rank];
    const size_t space = m.find(' ', 1);  // a piece is never empty
    if (space == std::string::npos || space + 1 >= m.size()) {
      throw InvalidArgument(
          cat("tokenizer: merge ", rank, " '", m, "' is not two pieces separated by a space"));
    }
    const std::string_view left(m.data(), space), right(m.data() + space + 1, m.size() - space - 1);
    joined.assign(left).append(right);
    auto l = index.find(left), r = index.find(right), j = index.find(joined);
    if (l == index.end() || r == index.end() || j == index.end()) {
      ++skipped;
      continue;
    }
    // A pair listed twice keeps its first (best) rank.
    merges_.try_emplace(pair_key(l->second, r->second), static_cast<int32_t>(rank), j->second);
  }
  if (skipped != 0) {
    log().debug("tokenizer: {} of {} merges name pieces missing from the vocab; ignored", skipped,
                vocab.merges.size());
  }
}

void BytePairModel::encode(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<std::pair<uint32_t, uint32_t>> words;
  pre_tokenize(pre_, text, words);
  for (const auto& [begin, end] : words) encode_word(text.substr(begin, end - begin), out);
}

void BytePairModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  bool whole = false;
  if (ignore_merges_) {
    std::string mapped;
    for (unsigned char b : word) mapped += byte_text_[b];
    auto it = index_->find(mapped);
    if (it != index_->end()) {
      ids.push_back(it->second);
      whole = true;
    }
  }
  if (!whole) {
    struct Symbol {
      int32_t id, prev, next;
    };
    std::vector<Symbol> syms;
    syms.reserve(word.size());
    for (unsigned char b : word) {
      if (byte_ids_[b] >= 0) syms.push_back({byte_ids_[b], 0, 0});
    }
    const auto n = static_cast<int32_t>(syms.size());
    for (int32_t i = 0; i < n; ++i) {
      syms[i].prev = i - 1;
      syms[i].next = i + 1 < n ? i + 1 : -1;
    }
    // (rank, left position, left id, right id): smallest rank, then leftmost, first.
    using Candidate = std::tuple<int32_t, int32_t, int32_t, int32_t>;
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    auto consider = [&](int32_t left) {
      if (left < 0) return;
      const int32_t right = syms[left].next;
      if (right < 0) return;
      auto it = merges_.find(pair_key(syms[left].id, syms[right].id));
      if (it != merges_.end()) heap.emplace(it->second.first, left, syms[left].id, syms[right].id);
    };
    for (int32_t i = 0; i + 1 < n; ++i) consider(i);
    while (!heap.empty()) {
      const auto [rank, left, left_id, right_id] = heap.top();
      heap.pop();
      const int32_t right = syms[left].next;
      if (syms[left].id != left_id || right < 0 || syms[right].id != right_id) continue;  // stale
      syms[left].id = merges_.find(pair_key(left_id, right_id))->second.second;
      syms[left].next = syms[right].next;
      if (syms[right].next >= 0) syms[syms[right].next].prev = left;
      syms[right].id = -1;
      consider(syms[left].prev);
      consider(left);
    }
    for (int32_t i = 0; i >= 0 && i < n; i = syms[i].next) ids.push_back(syms[i].id);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

}  // namespace tandem::llm::detail
