// SPDX-License-Identifier: Apache-2.0
// DeviceProfile, LinkProfile, ClusterSpec: what the planners know about the hardware, read from JSON.
//
// A DeviceProfile holds the measured (or datasheet) capabilities of one device; a LinkProfile the
// bandwidth and latency between two devices; a ClusterSpec a set of named devices and the links
// between them. The profiler (profiler.h, `tandem profile`) writes DeviceProfile JSON for this machine.
//
//   auto cluster = tandem::ClusterSpec::from_json_file("cluster.json");
//   double t = cluster.link("edge0", "cloud").transfer_time_s(4 << 20);
//
// Malformed files raise ParseError naming the file and the JSON path of the bad field
// ("cluster.json: devices[1].peak_flops: expected a positive number").
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/export.h"

namespace tandem {

struct TANDEM_API DeviceProfile {
  std::string name;                          // unique within a cluster, e.g. "edge0"
  std::string kind = "cpu";                  // "cpu" | "cuda" (which backend runs it)
  double peak_flops = 0;                     // f32 FLOP/s the device sustains on GEMM
  double mem_bandwidth_bytes_per_s = 0;      // sustained memory bandwidth
  double mem_bytes = 0;                      // memory capacity
  double power_w = 0;                        // average power under load (0 = unknown)
  int threads = 1;                           // CPU threads the device may use (emulation budget)
  double speed_factor = 1.0;                 // emulation: wall time is stretched by 1 / speed_factor
  // Measured per-op latency tables: op key ("gemm:m=128,n=576,k=576") -> seconds.
  std::map<std::string, double> op_latency_s;

  nlohmann::json to_json() const;
  // `where` names the source for error messages ("cluster.json: devices[0]").
  static DeviceProfile from_json(const nlohmann::json& j, const std::string& where = "device profile");
};

struct TANDEM_API LinkProfile {
  std::string from, to;                      // device names
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;
  double transfer_time_s(double bytes) const { return latency_s + bytes / bandwidth_bytes_per_s; }

  nlohmann::json to_json() const;
  static LinkProfile from_json(const nlohmann::json& j, const std::string& where = "link profile");
};

struct TANDEM_API ClusterSpec {
  std::vector<DeviceProfile> devices;
  std::vector<LinkProfile> links;            // directed; a link given once applies both ways unless the
                                             // reverse is also listed

  const DeviceProfile& device(const std::string& name) const;  // throws NotFound
  const LinkProfile& link(const std::string& from, const std::string& to) const;  // throws NotFound

  nlohmann::json to_json() const;
  static ClusterSpec from_json(const nlohmann::json& j, const std::string& where = "cluster spec");
  static ClusterSpec from_json_file(const std::string& path);   // IoError / ParseError
  void save(const std::string& path) const;
};

}  // namespace tandem
