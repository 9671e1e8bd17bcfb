// SPDX-License-Identifier: Apache-2.0
// Edge cost models and the planning problem (tandem/cnn/edge/cost.h).
#include "tandem/cnn/edge/cost.h"

#include <cmath>

#include "tandem/core/error.h"

namespace tandem::cnn::edge {

double EdgeCostModel::transfer_s(double bytes, const LinkProfile& link) const {
  return link.transfer_time_s(bytes);
}

AnalyticCostModel::AnalyticCostModel(std::map<std::string, AnalyticCoefficients> per_device,
                                     AnalyticCoefficients fallback)
    : per_device_(std::move(per_device)), fallback_(fallback) {
  auto check = [](const std::string& who, const AnalyticCoefficients& c) {
    if (!(c.alpha > 0) || !std::isfinite(c.alpha))
      throw InvalidArgument(
          cat("analytic cost model: ", who, ": alpha must be positive, got ", c.alpha));
    if (!(c.beta >= 0) || !std::isfinite(c.beta))
      throw InvalidArgument(cat("analytic cost model: ", who, ": beta must be >= 0, got ", c.beta));
  };
  check("fallback", fallback_);
  for (const auto& [name, c] : per_device_) check(cat("device '", name, "'"), c);
}

double AnalyticCostModel::compute_s(const TileWork& work, const DeviceProfile& device) const {
  if (!(device.peak_flops > 0))
    throw InvalidArgument(
        cat("device '", device.name, "': peak_flops must be positive, got ", device.peak_flops));
  auto it = per_device_.find(device.name);
  const AnalyticCoefficients& c = it == per_device_.end() ? fallback_ : it->second;
  double bytes = 0;
  if (c.beta > 0)
    for (const NodeWork& n : work.nodes) bytes += n.in_bytes + n.out_bytes;
  return c.alpha * work.flops / device.peak_flops + c.beta * bytes;
}

double PerOpCostModel::compute_s(const TileWork& work, const DeviceProfile& device) const {
  double t = 0;
  for (const NodeWork& n : work.nodes) {
    OpNode op;
    op.name = graph_->node(n.node).name;
    switch (graph_->node(n.node).op) {
      case OpKind::kConv:
        op.kind = "conv2d";
        break;
      case OpKind::kGemm:
        op.kind = "gemm";
        break;
      default:
        op.kind = op_name(graph_->node(n.node).op);
        break;
    }
    op.flops = n.flops;
    op.bytes_read = n.in_bytes;
    op.bytes_written = n.out_bytes;
    t += ops_->predict_op_s(op, device);
  }
  return t;
}

int EdgeProblem::device_index(const std::string& name) const {
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i].name == name) return static_cast<int>(i);
  throw NotFound(cat("edge plan: no device named '", name, "' in the cluster"));
}

EdgeProblem make_problem(const Chain& chain, const ClusterSpec& cluster,
                         const EdgeCostModel& cost) {
  if (cluster.devices.empty()) throw InvalidArgument("edge plan: the cluster has no devices");
  for (const DeviceProfile& d : cluster.devices) {
    if (!(d.speed_factor > 0) || !std::isfinite(d.speed_factor))
      throw InvalidArgument(
          cat("device '", d.name, "': speed_factor must be positive, got ", d.speed_factor));
    if (!(d.peak_flops > 0) || !std::isfinite(d.peak_flops))
      throw InvalidArgument(
          cat("device '", d.name, "': peak_flops must be positive, got ", d.peak_flops));
    if (!(d.mem_bytes > 0))
      throw InvalidArgument(
          cat("device '", d.name, "': mem_bytes must be positive, got ", d.mem_bytes));
  }
  cluster.validate();
  EdgeProblem p;
  p.chain = &chain;
  p.cost = &cost;
  p.devices = cluster.devices;
  if (cluster.links.empty()) {
    if (cluster.devices.size() > 1)
      throw InvalidArgument("edge plan: a cluster of several devices needs links (the medium)");
    p.medium.from = p.medium.to = cluster.devices[0].name;
    p.medium.bandwidth_bytes_per_s = 1e30;  // nothing to move: one device
    return p;
  }
  p.medium = cluster.links[0];
  for (const LinkProfile& l : cluster.links)
    if (l.bandwidth_bytes_per_s < p.medium.bandwidth_bytes_per_s) p.medium = l;
  return p;
}

}  // namespace tandem::cnn::edge
