// SPDX-License-Identifier: Apache-2.0
// ONNX -> cnn::Graph. Reads a ModelProto with the official schema (Debian libonnx-dev + protobuf),
// decodes initializers (typed fields, raw_data, and external data files beside the model), turns
// each supported node into a typed cnn::Node, sorts nodes topologically, infers every shape and
// then simplifies: BatchNormalization folded into the preceding Conv, x * Sigmoid(x) into SiLU,
// Relu/LeakyRelu/Clip/Sigmoid/SiLU fused into the Conv or Gemm before them, and a residual
// Add(conv(x), r) (+ its activation) fused into the conv as a second input.
//
// Supported ops: Conv (groups, dilation, asymmetric pads, auto_pad, non-square kernels),
// BatchNormalization, Relu, LeakyRelu, Sigmoid, Clip, Mul, Add, MaxPool, AveragePool,
// GlobalAveragePool, Concat, Resize/Upsample (nearest, integer factors), Flatten, Reshape, Gemm,
// MatMul (constant right operand), Softmax, Split, Identity, Dropout, Constant.
//
// Errors: a file that is not a ModelProto, a tensor whose data does not match its dims, a dangling
// or cyclic reference raise ParseError naming the file and the node or tensor; an op or attribute
// value the engine does not support raises Unsupported naming the node and its op type, as does an
// opset of the default domain above 22, or below 7 for an op whose early definition differs (Add,
// Mul, Gemm, Reshape, ...).
//
//   cnn::Graph g = cnn::import_onnx("mobilenet_v2.onnx");
//   cnn::Executor ex(g, {.threads = 2});   // executor.h
//
// Thread-safety: the functions are reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tandem/cnn/graph.h"
#include "tandem/export.h"

namespace tandem::cnn {

struct ImportOptions {
  int64_t batch = 1;  // value for a symbolic (dim_param) or zero leading input dimension
  bool fuse = true;   // fold BN and fuse activations (off: one cnn::Node per ONNX node)
  // Memory a run may use; 0: the host's memory (or the address-space limit when lower). A model
  // whose weights plus the inputs and outputs of some node exceed it is refused at import
  // (Infeasible naming the node, the tensor and the bytes).
  int64_t max_memory_bytes = 0;
};

// Reads `path`; external data files are resolved relative to its directory.
TANDEM_API Graph import_onnx(const std::string& path, const ImportOptions& opts = {});
// Parses a serialized ModelProto held in memory (external data is rejected). `source` names it in
// error messages.
TANDEM_API Graph import_onnx_bytes(const void* data, size_t size,
                                   const std::string& source = "<memory>",
                                   const ImportOptions& opts = {});

// The fusion passes import_onnx runs when opts.fuse is set (exposed for graphs built in C++).
TANDEM_API void fuse_graph(Graph& g);

}  // namespace tandem::cnn
