// SPDX-License-Identifier: Apache-2.0
// One imported graph per model path and process (graph_cache.h).
#include "cnn/edge/graph_cache.h"

#include <map>
#include <mutex>

#include "tandem/cnn/edge/chain.h"

namespace tandem::cnn::edge::detail {

std::shared_ptr<const Graph> cached_edge_graph(const std::string& onnx_path) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const Graph>> graphs;
  std::lock_guard lock(mutex);
  auto& g = graphs[onnx_path];
  if (!g) g = std::make_shared<const Graph>(load_edge_graph(onnx_path));
  return g;
}

}  // namespace tandem::cnn::edge::detail
