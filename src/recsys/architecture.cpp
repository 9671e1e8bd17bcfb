// SPDX-License-Identifier: Apache-2.0
// The architecture registry and the pieces of config reading and weight listing that several
// architectures share (architecture.h).
#include "recsys/architecture.h"

#include <cmath>

namespace tandem::rec {

Registry<std::shared_ptr<const Architecture>>& architectures() {
  static Registry<std::shared_ptr<const Architecture>> registry("model architecture");
  return registry;
}

const Architecture& architecture(ModelKind kind) {
  // The registry holds the entry for the life of the process, so the reference stays valid.
  return *architectures().get(to_string(kind));
}

void read_sequence(const detail::JsonField& f, int64_t embedding_dim, ModelConfig& c) {
  c.item_tables = parse_tables(f.at("item_tables"), "item", embedding_dim, 1);
  if (c.item_tables.empty()) f.at("item_tables").fail("need at least one item table");
  for (auto& t : c.item_tables) t.pooling = 1;
  c.seq_len = bounded(f.at("seq_len"), 65536);
}

void write_sequence(const ModelConfig& c, nlohmann::json& j) {
  j["item_tables"] = tables_json(c.item_tables);
  j["seq_len"] = c.seq_len;
}

void add_mlp_weights(std::vector<WeightSpec>& out, const std::string& prefix, int64_t in,
                     const std::vector<int64_t>& widths) {
  for (size_t i = 0; i < widths.size(); ++i) {
    const float s = 1.0f / std::sqrt(static_cast<float>(in));
    out.push_back({cat(prefix, '.', i, ".weight"), Shape{widths[i], in}, s, 0.0f});
    out.push_back({cat(prefix, '.', i, ".bias"), Shape{widths[i]}, s, 0.0f});
    in = widths[i];
  }
}

void read_block(const detail::JsonField& f, int64_t embedding_dim, ModelConfig& c) {
  read_sequence(f, embedding_dim, c);
  c.heads = bounded(f.at("heads"), 1024);
  c.ffn_dim = bounded(f.at("ffn_dim"), kMaxWidth);
  if (c.item_dim() % c.heads != 0)
    f.at("heads").fail(
        cat("the item width ", c.item_dim(), " is not a multiple of ", c.heads, " heads"));
}

void write_block(const ModelConfig& c, nlohmann::json& j) {
  write_sequence(c, j);
  j["heads"] = c.heads;
  j["ffn_dim"] = c.ffn_dim;
}

void add_block_weights(std::vector<WeightSpec>& out, int64_t di, int64_t ffn_dim) {
  add_mlp_weights(out, "attn.in_proj", di, {3 * di});
  const float s = 1.0f / std::sqrt(static_cast<float>(di));
  out.push_back({"attn.out_proj.weight", Shape{di, di}, s, 0.0f});
  out.push_back({"attn.out_proj.bias", Shape{di}, s, 0.0f});
  for (const char* ln : {"ln1", "ln2"}) {
    out.push_back({cat(ln, ".weight"), Shape{di}, 0.1f, 1.0f});
    out.push_back({cat(ln, ".bias"), Shape{di}, 0.1f, 0.0f});
  }
  add_mlp_weights(out, "ffn", di, {ffn_dim, di});
}

}  // namespace tandem::rec
