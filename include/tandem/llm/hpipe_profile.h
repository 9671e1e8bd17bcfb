// SPDX-License-Identifier: Apache-2.0
// HPipe profiles: the per-layer compute time of a decoder model as a function of slice length s
// (new tokens) and context length c (tokens already cached), measured on this CPU and fitted as the
// HPipe spec asks (llm.md 2.1, after TeraPipe's latency model):
//
//   t_layer(s, c) = base(s) + a_s * s + a_c * c + a_sc * s * c
//
// base(s) is the no-context time of the measured slice lengths (piecewise linear between them;
// past the largest it grows linearly plus the within-slice attention pairs a_sc (s^2 - s_max s)/2);
// base at every measured s, a_c and a_sc are fitted jointly by least squares over all measured
// (s, c) points, so each base(s) draws on every context length. The spec's b*s regression term
// stays a_s = 0: at batch 1 it is part of base(s). One emulated device d of a ClusterSpec runs the
// same kernels stretched by 1 / d.speed_factor, so its layer time is t_layer / speed_factor (the
// cluster files set peak_flops in the same ratio). Links cost latency_s + bytes /
// bandwidth_bytes_per_s.
//
//   auto model = tandem::llm::Model::load("SmolLM2-135M-Instruct.Q4_1.gguf");
//   auto prof = tandem::llm::hpipe::profile_model(model, "SmolLM2-135M-Instruct.Q4_1.gguf", {});
//   prof.save("smollm2.hpipe.json");
//   double t = prof.layer.predict_s(128, 1024);   // one layer, 128 new tokens after 1024
//
// Thread-safety: profile_model changes cpu_num_threads() while it runs (restored after).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/core/cost_model.h"
#include "tandem/export.h"

namespace tandem::llm {
class Model;
}

namespace tandem::llm::hpipe {

struct TANDEM_API LayerTimeFit {
  std::vector<double> s_grid;  // measured slice lengths (ascending)
  std::vector<double> base_s;  // seconds per layer at c = 0 for each of them
  double a_s = 0, a_c = 0, a_sc = 0;
  // Seconds of one layer for s new tokens after c cached ones (s >= 1, c >= 0).
  double predict_s(double s, double c) const;
  nlohmann::json to_json() const;
  static LayerTimeFit from_json(const nlohmann::json& j, const std::string& where);
};

struct TANDEM_API ModelProfile {
  std::string model_name;  // general.name or the file name
  std::string model_path;  // the GGUF it was measured on
  std::string sha256;      // of that file
  int n_layers = 0, d_model = 0, d_ff = 0;
  int64_t vocab_size = 0;
  int threads = 1;                      // CPU threads used while measuring (the reference device)
  double layer_weight_bytes = 0;        // stored bytes of one decoder layer's weights
  double embed_bytes = 0;               // token_embd
  double head_bytes = 0;                // output norm + output projection (0 extra when tied)
  double kv_bytes_per_token_layer = 0;  // f32 K + V of one token in one layer
  double act_bytes_per_token = 0;       // hidden state crossing a stage boundary (f32 d_model)
  double head_row_s = 0;                // final norm + output projection of one row (last_only)
  LayerTimeFit layer;
  // Fit quality over the measured points: mean |pred - meas| / meas.
  double fit_mean_rel_error = 0;
  std::vector<nlohmann::json> samples;  // {"s", "c", "measured_s", "predicted_s"}

  nlohmann::json to_json() const;
  static ModelProfile from_json(const nlohmann::json& j, const std::string& where = "profile");
  static ModelProfile load(const std::string& path);  // IoError / ParseError
  void save(const std::string& path) const;           // IoError
};

// HPipe's cost model: a profile's fitted layer times behind the core CostModel interface. It
// prices nodes of kind "decoder_layers" (attrs: "layers", "tokens" s, "context" c, "head": whether
// the final norm + projection of one row runs after them) as
//   on_device_s(layers * layer.predict_s(s, c) + head * head_row_s, device)
// (measured on this host, carried to the device by its speed factor; cost_model.h); links cost
// latency + bytes / bandwidth (CostModel::predict_transfer_s). layers_s() is the same price
// without building a node, for the planners' inner loops.
//
//   hpipe::LayerCostModel cost(prof);
//   double t = cost.predict_op_s(hpipe::LayerCostModel::layers_node(4, false, 128, 1024), dev);
class TANDEM_API LayerCostModel : public CostModel {
 public:
  explicit LayerCostModel(const ModelProfile& profile);
  std::string name() const override { return "hpipe-layer-fit"; }
  // InvalidArgument for another kind or missing / negative attrs.
  double predict_op_s(const OpNode& node, const DeviceProfile& device) const override;
  double layers_s(double layers, bool head, double s, double c, const DeviceProfile& device) const;
  static OpNode layers_node(int layers, bool head, double s, double c);

 private:
  LayerTimeFit fit_;
  double head_row_s_ = 0;
};

struct ProfileOptions {
  std::vector<int> slice_lengths = {8, 32, 128, 512};  // s grid (tokens)
  std::vector<int> context_lengths = {512, 2048};      // c values measured with every s
  int repeats = 3;                                     // best of
  int threads = 1;                                     // cpu_num_threads while measuring
  int layer = 0;                                       // which layer is timed
};

// Measures `model` (loaded from `path`) on this CPU. InvalidArgument for empty grids or lengths
// past the model's context; Unsupported for models forward_layers cannot run.
TANDEM_API ModelProfile profile_model(const Model& model, const std::string& path,
                                      const ProfileOptions& options);

}  // namespace tandem::llm::hpipe
