// SPDX-License-Identifier: Apache-2.0
// The edge runtime's stages load each model once per process (internal to src/cnn/edge): every
// stage and every frame of cnn.tiles and cnn.split share one imported graph per ONNX path
// (load_edge_graph, chain.h: the import plus the virtual sink), so a worker running several stages
// of one model imports it once.
#pragma once

#include <memory>
#include <string>

#include "tandem/cnn/graph.h"

namespace tandem::cnn::edge::detail {

// The graph of `onnx_path`, imported on the first call and shared afterwards (thread-safe).
std::shared_ptr<const Graph> cached_edge_graph(const std::string& onnx_path);

}  // namespace tandem::cnn::edge::detail
