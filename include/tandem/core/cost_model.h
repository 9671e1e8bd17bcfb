// SPDX-License-Identifier: Apache-2.0
// Cost models: how long an op takes on a device and a transfer on a link, predicted from the Graph
// IR's FLOPs and bytes (graph.h) and a DeviceProfile / LinkProfile (cluster.h).
//
// RooflineCostModel is the analytic model every planner can use without measurements:
//   t(op) = max(flops / peak_flops, (bytes_read + bytes_written) / mem_bandwidth) /
//   efficiency(kind)
//           + launch_overhead_s
// (Williams et al., "Roofline", CACM 2009). ProfiledCostModel uses the latency tables `tandem
// profile` writes into DeviceProfile::op_latency_s: an exact op_key() hit returns the measured
// time; otherwise the time is interpolated linearly in FLOPs between the two nearest same-kind
// entries (same kind and the same non-numeric parameters, e.g. weight dtype) that bracket the node;
// otherwise the roofline answers. prediction_error() reports how far a model is from measurements
// (mean / max absolute relative error), so predicted and measured cost can be printed side by side
// as design.md asks.
//
//   tandem::RooflineCostModel roofline({.launch_overhead_s = 5e-6});
//   double t = roofline.predict_graph_s(graph, cluster.device("edge0"));
//   tandem::ProfiledCostModel profiled;
//   auto err = tandem::prediction_error(roofline, me, tandem::table_samples(me));  // roofline vs
//   tables
//
// Where speed_factor applies (one rule for every model): numbers that describe a device itself
// (peak_flops, bandwidth, its op_latency_s tables) are used as they are; times measured on *this*
// host and carried to another device (profiles such as HPipe's layer fit, emulated devices) go
// through on_device_s(), host seconds / speed_factor, the only place the factor is applied.
//
// Departures: a graph on one device is predicted as the sum of its ops in topological order (no
// overlap between ops); the learned model of the design card is not here. Thread-safety: the models
// are immutable after construction; predict_* may be called concurrently.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tandem/core/cluster.h"
#include "tandem/core/graph.h"
#include "tandem/export.h"

namespace tandem {

// Seconds `device` takes for work that took `host_s` on this host: host_s / device.speed_factor
// (InvalidArgument for a speed factor that is not positive and finite).
TANDEM_API double on_device_s(double host_s, const DeviceProfile& device);
TANDEM_API double on_device_s(double host_s, double speed_factor);

class TANDEM_API CostModel {
 public:
  virtual ~CostModel() = default;
  virtual std::string name() const = 0;
  // Seconds `node` takes on `device`. Throws InvalidArgument for a device without peak_flops or
  // bandwidth when the model needs them.
  virtual double predict_op_s(const OpNode& node, const DeviceProfile& device) const = 0;
  // Seconds to move `bytes` over `link`: latency_s + bytes / bandwidth_bytes_per_s.
  virtual double predict_transfer_s(double bytes, const LinkProfile& link) const;
  // Seconds for the whole graph on one device: the sum of predict_op_s over a topological order
  // (validates the graph first).
  virtual double predict_graph_s(const Graph& graph, const DeviceProfile& device) const;
};

struct RooflineOptions {
  // Fixed cost added to every op that does work (kernel launch, dispatch, thread wake-up), seconds.
  double launch_overhead_s = 0.0;
  // Fraction (0, 1] of the roofline bound an op kind reaches; the roofline time is divided by it.
  // Kinds not listed use default_efficiency.
  std::map<std::string, double> efficiency;
  double default_efficiency = 1.0;
};

class TANDEM_API RooflineCostModel : public CostModel {
 public:
  // Throws InvalidArgument for a non-positive or non-finite efficiency or a negative overhead.
  explicit RooflineCostModel(RooflineOptions options = {});
  std::string name() const override { return "roofline"; }
  // 0 for nodes that move no bytes and do no FLOPs (inputs); otherwise the formula above.
  double predict_op_s(const OpNode& node, const DeviceProfile& device) const override;
  const RooflineOptions& options() const { return options_; }
  double efficiency(const std::string& kind) const;

 private:
  RooflineOptions options_;
};

class TANDEM_API ProfiledCostModel : public CostModel {
 public:
  // `fallback` answers for nodes the tables cannot (no entry, nothing to interpolate between).
  explicit ProfiledCostModel(RooflineOptions fallback = {});
  std::string name() const override { return "profiled"; }
  double predict_op_s(const OpNode& node, const DeviceProfile& device) const override;

  enum class Source { kExact, kInterpolated, kRoofline, kNoCost };
  struct Prediction {
    double seconds = 0;
    Source source = Source::kRoofline;
  };
  // The prediction and where it came from.
  Prediction predict(const OpNode& node, const DeviceProfile& device) const;

 private:
  RooflineCostModel fallback_;
};

TANDEM_API const char* to_string(ProfiledCostModel::Source s);  // "exact", "interpolated", ...

// One measured op.
struct MeasuredOp {
  OpNode node;
  double measured_s = 0;
};

struct PredictionError {
  int count = 0;                  // samples compared
  double mean_abs_rel_error = 0;  // mean of |predicted - measured| / measured
  double max_abs_rel_error = 0;
  std::string worst;  // name of the node with the largest error
};

// Compares `model` on `device` with measured samples (each measured_s must be positive).
TANDEM_API PredictionError prediction_error(const CostModel& model, const DeviceProfile& device,
                                            const std::vector<MeasuredOp>& samples);
// The same for precomputed pairs (names may be empty).
TANDEM_API PredictionError relative_error(const std::vector<double>& predicted_s,
                                          const std::vector<double>& measured_s,
                                          const std::vector<std::string>& names = {});
// The device's latency table as samples (nodes rebuilt with node_from_op_key; unparseable keys
// skipped).
TANDEM_API std::vector<MeasuredOp> table_samples(const DeviceProfile& device);

}  // namespace tandem
