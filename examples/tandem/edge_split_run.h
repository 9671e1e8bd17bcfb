// SPDX-License-Identifier: Apache-2.0
// `tandem edge split --run N`: the edge/cloud plans run on the pipeline runtime (cnn.split stages:
// the edge here, the cloud in process or on a `tandem worker`), each frame's measured delay beside
// the plan's prediction; `--adapt`: the plan follows the probed uplink (adaptive.h).
#pragma once

#include <string>
#include <vector>

#include "tandem/cnn/edge/cost.h"
#include "tandem/cnn/graph.h"
#include "tandem/core/cluster.h"

namespace tandem::cli {

struct SplitRunOptions {
  std::string model;
  std::vector<std::string> systems;  // edge_cloud_system_names() entries
  int frames = 0;                    // > 0: run
  std::vector<std::string> workers;  // cloud=ENDPOINT
  std::string key;                   // CURVE key file for tcp:// workers
  bool emulate_link = false;         // with a worker: also emulate the cluster's link
  bool adapt = false;                // probe and re-plan between segments of frames
  int frames_per_probe = 4;
  bool verify = false;
  std::string json_path, md_path;
};

// Runs and prints the table (markdown, and JSON when asked). `cluster` already has --mbps applied.
int run_split_frames(const SplitRunOptions& o, const cnn::Graph& g, const ClusterSpec& cluster,
                     const cnn::edge::EdgeCostModel& cost);

}  // namespace tandem::cli
