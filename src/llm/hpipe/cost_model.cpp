// SPDX-License-Identifier: Apache-2.0
// HPipe's layer-fit cost model (hpipe_profile.h).
#include "tandem/core/error.h"
#include "tandem/llm/hpipe_profile.h"

namespace tandem::llm::hpipe {

LayerCostModel::LayerCostModel(const ModelProfile& profile)
    : fit_(profile.layer), head_row_s_(profile.head_row_s) {}

double LayerCostModel::layers_s(double layers, bool head, double s, double c,
                                const DeviceProfile& device) const {
  return on_device_s(layers * fit_.predict_s(s, c) + (head ? head_row_s_ : 0.0), device);
}

OpNode LayerCostModel::layers_node(int layers, bool head, double s, double c) {
  OpNode n;
  n.name = "decoder_layers";
  n.kind = "decoder_layers";
  n.attrs = {{"layers", layers}, {"head", head}, {"tokens", s}, {"context", c}};
  return n;
}

double LayerCostModel::predict_op_s(const OpNode& node, const DeviceProfile& device) const {
  if (node.kind != "decoder_layers")
    throw InvalidArgument(
        cat(name(), ": prices 'decoder_layers' nodes, not '", node.kind, "' ('", node.name, "')"));
  auto number = [&](const char* key) {
    auto it = node.attrs.find(key);
    if (it == node.attrs.end() || !it->second.is_number() || it->second.get<double>() < 0)
      throw InvalidArgument(
          cat(name(), ": node '", node.name, "' needs a non-negative '", key, "'"));
    return it->second.get<double>();
  };
  auto head = node.attrs.find("head");
  const bool with_head =
      head != node.attrs.end() && head->second.is_boolean() && head->second.get<bool>();
  return layers_s(number("layers"), with_head, number("tokens"), number("context"), device);
}

}  // namespace tandem::llm::hpipe
