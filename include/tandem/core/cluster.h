// SPDX-License-Identifier: Apache-2.0
// DeviceProfile, LinkProfile, ClusterSpec: what the planners know about the hardware, read from
// JSON.
//
// A DeviceProfile holds the measured (or datasheet) capabilities of one device; a LinkProfile the
// bandwidth and latency between two devices; a ClusterSpec a set of named devices and the links
// between them. The profiler (profiler.h, `tandem profile`) writes DeviceProfile JSON for this
// machine; examples/clusters/*.json are ready-made clusters.
//
//   auto cluster = tandem::ClusterSpec::from_json_file("cluster.json");
//   double t = cluster.link("edge0", "cloud").transfer_time_s(4 << 20);
//
// File format (numbers only, SI units: bytes, seconds, FLOP/s, watts):
//   { "description": "...",                                   (optional)
//     "devices": [ { "name": "edge0", "kind": "cpu", "peak_flops": 1.2e10,
//                    "mem_bandwidth_bytes_per_s": 4e9, "mem_bytes": 4e9,
//                    "power_w": 6.4, "threads": 4, "speed_factor": 1.0,        (optional)
//                    "description": "...", "op_latency_s": { "<op key>": 1.5e-4 } } ],   (optional)
//     "links":   [ { "from": "edge0", "to": "edge1", "bandwidth_bytes_per_s": 2.5e6,
//                    "latency_s": 0.004, "description": "..." } ] }            (optional)
// Reading is strict: a missing, wrong-typed or out-of-range field, an unknown key, a duplicate
// device name, a link naming an unknown device or a repeated link raises ParseError naming the file
// and the JSON path ("cluster.json: devices[1].peak_flops: expected a positive number, got -3");
// invalid JSON raises ParseError with the byte offset; an unreadable file IoError naming the path.
//
// Op keys (DeviceProfile::op_latency_s) are written "kind:name=value,name=value" with the names
// sorted, e.g. "gemm:k=576,m=128,n=576,weight=f32" or "rms_norm:dim=576,rows=128"; op_key() in
// graph.h builds the key of an OpNode and node_from_op_key() the node back (cost_model.h
// interpolates with it).
//
// Thread-safety: plain values; const access from many threads is safe.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/export.h"

namespace tandem {

struct TANDEM_API DeviceProfile {
  std::string name;                      // unique within a cluster, e.g. "edge0"
  std::string kind = "cpu";              // "cpu" | "cuda" (which backend runs it)
  std::string description;               // free text: hardware, where the numbers come from
  double peak_flops = 0;                 // f32 FLOP/s the device sustains on GEMM
  double mem_bandwidth_bytes_per_s = 0;  // sustained memory bandwidth
  double mem_bytes = 0;                  // memory capacity
  double power_w = 0;                    // average power under load (0 = unknown)
  int threads = 1;                       // CPU threads the device may use (emulation budget)
  double speed_factor = 1.0;             // emulation: wall time is stretched by 1 / speed_factor
  // Measured per-op latency tables: op key (see above) -> seconds.
  std::map<std::string, double> op_latency_s;

  nlohmann::json to_json() const;
  // `where` names the source for error messages ("me.json", "cluster.json: devices[0]").
  static DeviceProfile from_json(const nlohmann::json& j,
                                 const std::string& where = "device profile");
  // Reads a DeviceProfile file (as written by `tandem profile`); IoError / ParseError.
  static DeviceProfile from_json_file(const std::string& path);
  void save(const std::string& path) const;  // IoError
};

struct TANDEM_API LinkProfile {
  std::string from, to;  // device names
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;
  std::string description;  // free text ("802.11ac, measured with iperf3")
  double transfer_time_s(double bytes) const { return latency_s + bytes / bandwidth_bytes_per_s; }

  nlohmann::json to_json() const;
  static LinkProfile from_json(const nlohmann::json& j, const std::string& where = "link profile");
};

struct TANDEM_API ClusterSpec {
  std::string description;
  std::vector<DeviceProfile> devices;
  std::vector<LinkProfile> links;  // directed; a link given once applies both ways unless the
                                   // reverse is also listed

  const DeviceProfile& device(const std::string& name) const;  // throws NotFound
  bool has_device(const std::string& name) const;
  // The link from -> to, else the reverse link; throws NotFound when neither is listed.
  const LinkProfile& link(const std::string& from, const std::string& to) const;
  bool has_link(const std::string& from, const std::string& to) const;
  // Seconds to move `bytes` from one device to another: 0 on the same device, else the link's
  // latency + bytes / bandwidth (NotFound when the devices are not linked).
  double transfer_time_s(const std::string& from, const std::string& to, double bytes) const;
  // Checks the invariants from_json enforces (unique names, links between known devices, positive
  // numbers); throws InvalidArgument naming the offending device or link.
  void validate() const;

  nlohmann::json to_json() const;
  static ClusterSpec from_json(const nlohmann::json& j, const std::string& where = "cluster spec");
  static ClusterSpec from_json_file(const std::string& path);  // IoError / ParseError
  void save(const std::string& path) const;                    // IoError
};

}  // namespace tandem
