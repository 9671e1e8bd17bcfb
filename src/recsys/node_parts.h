// SPDX-License-Identifier: Apache-2.0
// The op nodes several architectures share (node_parts.cpp): the dense input, pooled embedding
// bags, MLP towers, row-wise concatenation and the sigmoid output. Each adds its NodeDef (what it
// computes on the CPU and on a device, and its cost for q rows) to a model and returns its id.
// The architecture builders (arch_*.cpp) compose them with their own nodes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "recsys/model_impl.h"

namespace tandem::rec::parts {

inline constexpr int64_t kF = 4;  // bytes per f32

inline int64_t rows_of(const QueryState& st) { return st.inputs->rows; }

// A node named `name` of kind `kind` reading `inputs` (cost and run functions still to set).
NodeDef node(const std::string& name, const std::string& kind, std::vector<int> inputs = {});
// A cost node with one output.
OpNode io_node(const std::string& name, const std::string& kind, double flops, double read,
               double written, const Shape& out);
// Bytes of one table element in the model's table dtype (f32 4, f16 2, i8 1).
int64_t table_elem_bytes(const ModelConfig& c);
// Sum of the pooled tables' widths.
int64_t user_width(const ModelConfig& c);
// Bytes read per item lookup (every item table's row plus its 8-byte id).
int64_t item_row_bytes(const ModelConfig& c);

// "dense" [rows, dense_features]: the query's dense features.
int dense_input(RecModel::Impl& m);
// One "emb_bag" node [rows, dim] per pooled table, named after the table.
std::vector<int> embedding_bags(RecModel::Impl& m);
// A chain of linear layers "prefix.i" of the given widths over `seq_rows` rows per query row
// (hidden layers ReLU; the last one when relu_last); returns the last layer's id.
int mlp(RecModel::Impl& m, const std::string& prefix, int input, int64_t in,
        const std::vector<int64_t>& widths, bool relu_last, int64_t seq_rows);
// "name" [rows, width]: the inputs' rows side by side.
int concat(RecModel::Impl& m, const std::string& name, const std::vector<int>& inputs,
           int64_t width);
// "out" [rows, 1] = sigmoid(sum of the inputs' [rows, 1] logits).
int sigmoid_out(RecModel::Impl& m, const std::vector<int>& inputs);
// The user side of a sequence model: the dense input (when it has dense features), then the bags.
std::vector<int> user_front(RecModel::Impl& m);
// "cand" [rows, di]: each row's candidate item, the concatenation over the item tables.
int candidate_items(RecModel::Impl& m);
// "seq" [rows, L, di]: each row's L behaviours from the item tables.
int behaviour_items(RecModel::Impl& m);
// "name" [rows, width] = a * b elementwise (two [rows, width] nodes).
int product(RecModel::Impl& m, const std::string& name, int a, int b, int64_t width);

// ---- the transformer block of BST and SASRec.
// "seq" [rows, T, di]: each row's behaviours (then its candidate when candidate_last: T = L + 1,
// else T = L) from the item tables, plus the position embedding "pos_emb" [T, di].
int item_sequence(RecModel::Impl& m, bool candidate_last);
// "mha" [rows * T, di]: multi-head self-attention (cfg.heads) of each row's T positions, not
// causal, from "qkv" [rows * T, 3 di].
int self_attention(RecModel::Impl& m, int qkv, int64_t T);
// "name" = in_node W^T + b + res_node (weights wname.weight, wname.bias), over T rows per row.
int residual_linear(RecModel::Impl& m, const std::string& name, const std::string& wname,
                    int in_node, int res_node, int64_t in, int64_t out, int64_t T);
// "name" [rows * T, di]: layer norm of each position (weights name.weight, name.bias).
int norm(RecModel::Impl& m, const std::string& name, int in_node, int64_t T);
// One post-LN block over x [rows, T, di]: H = LN1(X + MHA(X)), Y = LN2(H + W2 ReLU(W1 H)) (nodes
// qkv, mha, attn_out, ln1, ffn.0, ffn_out, ln2; weights as add_block_weights lists them); returns
// "ln2" [rows * T, di].
int transformer_block(RecModel::Impl& m, int x, int64_t T);

}  // namespace tandem::rec::parts
