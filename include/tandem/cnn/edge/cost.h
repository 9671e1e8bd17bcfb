// SPDX-License-Identifier: Apache-2.0
// Cost of a tile on an edge device and of moving bytes over the cluster's shared medium: the only
// thing the edge planners know about the hardware (spec cnn.md §2 "cost model interface", §3.1
// eq. 5-8).
//
// What: EdgeCostModel predicts the seconds a device takes for one TileWork (chain.h). Two
// implementations:
//   AnalyticCostModel  PICO eq. 5: t = α_d·θ/ϑ_d (+ β_d·bytes, 0 by default), θ the tile's FLOPs
//                      with its halo, ϑ_d the device's capacity (FLOP/s), α_d, β_d per-device
//                      regression coefficients (1 and 0 unless fitted).
//   PerOpCostModel     on top of the core tandem::CostModel (cost_model.h): every node of the tile
//                      becomes an OpNode with the tile's FLOPs and bytes, and the core model
//                      predicts it (roofline, or ProfiledCostModel's measured tables once
//                      profiled).
// Transfers use the link model t = L + bytes/B of the shared medium (one WLAN: a stage's transfers
// are summed, eq. 8).
//
// EdgeProblem bundles what a planner needs: the chain, the devices and the medium. Speed factors
// follow the core rule (core/cost_model.h): a DeviceProfile's peak_flops, bandwidth and op tables
// describe the device itself and are used as they are (ϑ_d = peak_flops), while
// DeviceProfile::speed_factor only tells the emulator how much to stretch this host's time; host
// measurements carried to a device (a profiled table measured here) go through core
// on_device_s(), the one place the factor applies. The medium is the slowest listed link (lowest
// bandwidth, its latency).
//   cnn::edge::AnalyticCostModel cost;
//   auto problem = cnn::edge::make_problem(chain, cluster, cost);
//   double t = cost.compute_s(chain.tile_work(0, 3, rows), problem.devices[0]);
//
// Thread-safety: models are immutable; predictions may run concurrently.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tandem/cnn/edge/chain.h"
#include "tandem/core/cluster.h"
#include "tandem/core/cost_model.h"
#include "tandem/export.h"

namespace tandem::cnn::edge {

class TANDEM_API EdgeCostModel {
 public:
  virtual ~EdgeCostModel() = default;
  virtual std::string name() const = 0;
  // Seconds `device` computes `work`.
  virtual double compute_s(const TileWork& work, const DeviceProfile& device) const = 0;
  // Seconds to move `bytes` over `link`: latency_s + bytes / bandwidth_bytes_per_s.
  virtual double transfer_s(double bytes, const LinkProfile& link) const;
};

struct AnalyticCoefficients {
  double alpha = 1.0;  // α_d: regression slope on FLOPs/ϑ (dimensionless)
  double beta = 0.0;   // β_d: seconds per byte of tile activations read and written
};

class TANDEM_API AnalyticCostModel : public EdgeCostModel {
 public:
  // Coefficients by device name; devices not listed use `fallback`. Throws InvalidArgument for a
  // non-positive alpha or a negative beta, naming the device.
  explicit AnalyticCostModel(std::map<std::string, AnalyticCoefficients> per_device = {},
                             AnalyticCoefficients fallback = {});
  std::string name() const override { return "analytic (PICO eq. 5)"; }
  // Throws InvalidArgument naming the device when its peak_flops is not positive.
  double compute_s(const TileWork& work, const DeviceProfile& device) const override;

 private:
  std::map<std::string, AnalyticCoefficients> per_device_;
  AnalyticCoefficients fallback_;
};

class TANDEM_API PerOpCostModel : public EdgeCostModel {
 public:
  // `ops` must outlive this model.
  PerOpCostModel(const Graph& graph, const tandem::CostModel& ops) : graph_(&graph), ops_(&ops) {}
  std::string name() const override { return "per-op (" + ops_->name() + ")"; }
  double compute_s(const TileWork& work, const DeviceProfile& device) const override;

 private:
  const Graph* graph_;
  const tandem::CostModel* ops_;
};

struct TANDEM_API EdgeProblem {
  const Chain* chain = nullptr;
  std::vector<DeviceProfile> devices;  // the cluster's, in its order
  LinkProfile medium;                  // the shared medium
  const EdgeCostModel* cost = nullptr;

  int device_index(const std::string& name) const;  // throws NotFound naming the device
  double transfer_s(double bytes) const { return cost->transfer_s(bytes, medium); }
};

// Validates the cluster (InvalidArgument naming the device or link: negative or zero speed, peak
// FLOP/s, memory, bandwidth) and builds the problem. A cluster with more than one device needs at
// least one link. `chain`, `cost` must outlive the problem.
TANDEM_API EdgeProblem make_problem(const Chain& chain, const ClusterSpec& cluster,
                                    const EdgeCostModel& cost);

}  // namespace tandem::cnn::edge
