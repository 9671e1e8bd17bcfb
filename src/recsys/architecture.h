// SPDX-License-Identifier: Apache-2.0
// The registry of recommendation architectures (DLRM, Wide&Deep, DIN, BST, SASRec, DSSM):
// everything that differs between them lives in one Architecture entry, registered by the file that
// implements it (arch_dlrm.cpp, arch_wnd.cpp, arch_din.cpp, arch_bst.cpp, ...), and the config
// reader, weight generator, input validation and graph builder look the entry up by the model's
// kind instead of branching on it.
//
//   const Architecture& a = architecture(cfg.kind);
//   a.build(impl);                                      // adds the model's op nodes
//
// A new architecture is a ModelKind value (its name in config.h's to_string) plus one file that
// fills an Architecture and registers it:
//   const Registration kReg(architectures(), "mine", std::make_shared<const Architecture>(...));
// Thread-safety: entries are immutable once registered.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "recsys/model_impl.h"
#include "tandem/core/registry.h"

namespace tandem::rec {

struct Architecture {
  ModelKind kind = ModelKind::kDlrm;
  std::string title;      // "DLRM", "Wide&Deep": in messages
  bool sequence = false;  // item tables and a behaviour sequence (QueryInputs::item_ids, seq_ids)
  bool wide_tables = false;  // one f32 width-1 table per pooled table (the wide part of WnD)
  // Keys of a model object only some architectures have (kKindKeys) that this one accepts.
  std::vector<std::string> keys;
  // Reads those keys into c and checks the whole config (ParseError through `model`, the model
  // object; `embedding_dim` is its default table width, 0 when absent).
  std::function<void(const detail::JsonField& model, int64_t embedding_dim, ModelConfig& c)> read;
  // Writes them back (ModelConfig::to_json).
  std::function<void(const ModelConfig& c, nlohmann::json& j)> write;
  // Width of the input of the top MLP.
  std::function<int64_t(const ModelConfig& c)> top_input_width;
  // Dense weights besides the bottom and top MLPs, in a fixed order.
  std::function<void(const ModelConfig& c, std::vector<WeightSpec>& out)> weights;
  // Adds the model's op nodes to m.nodes in a topological order.
  std::function<void(RecModel::Impl& m)> build;
};

// The keys of a model object that belong to some architectures only.
inline const std::vector<std::string> kKindKeys = {
    "interaction", "item_tables", "seq_len", "attention_mlp", "heads", "ffn_dim", "tower_mlp"};

// name (to_string(kind)) -> architecture.
Registry<std::shared_ptr<const Architecture>>& architectures();
// The entry of a kind (InvalidArgument when none is registered).
const Architecture& architecture(ModelKind kind);

// ---- config reading helpers the architectures share (config.cpp).
inline constexpr int64_t kMaxWidth = int64_t{1} << 20;
// A positive integer no larger than `max`.
int64_t bounded(const detail::JsonField& f, int64_t max);
// An array of at most 64 layer widths.
std::vector<int64_t> widths(const detail::JsonField& f);
// Tables named prefix.0, prefix.1, ... from an array of {"rows", "count", "dim", "pooling",
// "hash"}.
std::vector<TableConfig> parse_tables(const detail::JsonField& f, const std::string& prefix,
                                      int64_t default_dim, int64_t default_pooling);
// The tables as written by ModelConfig::to_json.
nlohmann::json tables_json(const std::vector<TableConfig>& tables);
// DIN and BST: item_tables (pooling 1) and seq_len.
void read_sequence(const detail::JsonField& model, int64_t embedding_dim, ModelConfig& c);
void write_sequence(const ModelConfig& c, nlohmann::json& j);
// A tower of linear layers "prefix.i" (weights [w_i, in], biases [w_i]) from width `in`.
void add_mlp_weights(std::vector<WeightSpec>& out, const std::string& prefix, int64_t in,
                     const std::vector<int64_t>& widths);
// BST and SASRec: the sequence keys plus heads and ffn_dim (the item width a multiple of heads).
void read_block(const detail::JsonField& model, int64_t embedding_dim, ModelConfig& c);
void write_block(const ModelConfig& c, nlohmann::json& j);
// The weights of parts::transformer_block over items of width di: attn.in_proj, attn.out_proj,
// ln1, ln2, ffn.
void add_block_weights(std::vector<WeightSpec>& out, int64_t di, int64_t ffn_dim);

}  // namespace tandem::rec
