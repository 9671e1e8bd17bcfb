// SPDX-License-Identifier: Apache-2.0
// DeviceProfile / LinkProfile / ClusterSpec: JSON round trips, lookups, and one error per bad field
// (each message must name the file and the JSON path of the field).
#include "tandem/core/cluster.h"
#include "common/temp_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "tandem/core/error.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected \"" << part << "\" in: " << text;
}

fs::path examples_dir() { return fs::path(TANDEM_SOURCE_DIR) / "examples" / "clusters"; }

using tandem::fixtures::TempDir;

json valid_cluster() {
  return json::parse(R"({
    "description": "two boards",
    "devices": [
      {"name": "a", "kind": "cpu", "peak_flops": 1e10, "mem_bandwidth_bytes_per_s": 4e9, "mem_bytes": 4e9,
       "power_w": 6.4, "threads": 4, "speed_factor": 0.5, "description": "board a",
       "op_latency_s": {"gemm:k=64,m=1,n=64,weight=f32": 2.5e-6}},
      {"name": "b", "peak_flops": 2e10, "mem_bandwidth_bytes_per_s": 8e9, "mem_bytes": 8e9}
    ],
    "links": [{"from": "a", "to": "b", "bandwidth_bytes_per_s": 1.25e7, "latency_s": 0.002,
               "description": "wifi"}]
  })");
}

std::string parse_error(const json& j) {
  try {
    ClusterSpec::from_json(j, "cluster.json");
  } catch (const ParseError& e) {
    EXPECT_EQ(e.source(), "cluster.json");
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ParseError, got: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected ParseError for " << j.dump();
  return {};
}

TEST(Cluster, JsonRoundTrip) {
  const ClusterSpec c = ClusterSpec::from_json(valid_cluster(), "cluster.json");
  EXPECT_EQ(c.description, "two boards");
  ASSERT_EQ(c.devices.size(), 2u);
  const DeviceProfile& a = c.device("a");
  EXPECT_EQ(a.kind, "cpu");
  EXPECT_EQ(a.description, "board a");
  EXPECT_DOUBLE_EQ(a.peak_flops, 1e10);
  EXPECT_DOUBLE_EQ(a.mem_bandwidth_bytes_per_s, 4e9);
  EXPECT_DOUBLE_EQ(a.mem_bytes, 4e9);
  EXPECT_DOUBLE_EQ(a.power_w, 6.4);
  EXPECT_EQ(a.threads, 4);
  EXPECT_DOUBLE_EQ(a.speed_factor, 0.5);
  ASSERT_EQ(a.op_latency_s.size(), 1u);
  EXPECT_DOUBLE_EQ(a.op_latency_s.at("gemm:k=64,m=1,n=64,weight=f32"), 2.5e-6);
  const DeviceProfile& b = c.device("b");  // defaults
  EXPECT_EQ(b.kind, "cpu");
  EXPECT_EQ(b.threads, 1);
  EXPECT_DOUBLE_EQ(b.speed_factor, 1.0);
  EXPECT_DOUBLE_EQ(b.power_w, 0.0);
  ASSERT_EQ(c.links.size(), 1u);
  EXPECT_EQ(c.links[0].description, "wifi");

  const json out = c.to_json();
  const ClusterSpec back = ClusterSpec::from_json(out);
  EXPECT_EQ(back.to_json(), out);
  EXPECT_NO_THROW(back.validate());
}

TEST(Cluster, LinksApplyBothWays) {
  const ClusterSpec c = ClusterSpec::from_json(valid_cluster());
  EXPECT_EQ(&c.link("a", "b"), &c.link("b", "a"));
  EXPECT_TRUE(c.has_link("b", "a"));
  EXPECT_DOUBLE_EQ(c.link("b", "a").transfer_time_s(1.25e7), 1.002);
  EXPECT_DOUBLE_EQ(c.transfer_time_s("a", "b", 2.5e7), 2.002);
  EXPECT_EQ(c.transfer_time_s("a", "a", 1e9), 0.0);
  EXPECT_THROW(c.transfer_time_s("zz", "zz", 1), NotFound);
  EXPECT_THROW(c.device("c"), NotFound);
  EXPECT_FALSE(c.has_device("c"));
  EXPECT_TRUE(contains(
      [&] {
        try {
          c.link("a", "c");
        } catch (const NotFound& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      "no link between 'a' and 'c'"));

  // A listed reverse link wins over the forward one.
  ClusterSpec d = c;
  LinkProfile back;
  back.from = "b";
  back.to = "a";
  back.bandwidth_bytes_per_s = 1e6;
  back.latency_s = 0.01;
  d.links.push_back(back);
  EXPECT_DOUBLE_EQ(d.link("b", "a").bandwidth_bytes_per_s, 1e6);
  EXPECT_DOUBLE_EQ(d.link("a", "b").bandwidth_bytes_per_s, 1.25e7);
}

TEST(Cluster, ExactMessageForBadPeakFlops) {
  json j = valid_cluster();
  j["devices"][1]["peak_flops"] = -3;
  EXPECT_EQ(parse_error(j),
            "cluster.json: devices[1].peak_flops: expected a positive number, got -3");
}

TEST(Cluster, EveryBadFieldIsNamed) {
  struct Case {
    std::function<void(json&)> mutate;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](json& j) { j["devices"][0]["peak_flops"] = "fast"; },
       "devices[0].peak_flops: expected a positive number, got \"fast\""},
      {[](json& j) { j["devices"][0]["peak_flops"] = 0; },
       "devices[0].peak_flops: expected a positive number, got 0"},
      {[](json& j) { j["devices"][0]["peak_flops"] = true; },
       "devices[0].peak_flops: expected a positive number, got true"},
      {[](json& j) { j["devices"][0].erase("peak_flops"); },
       "devices[0]: missing required key 'peak_flops'"},
      {[](json& j) { j["devices"][1]["mem_bandwidth_bytes_per_s"] = -1.5; },
       "devices[1].mem_bandwidth_bytes_per_s: expected a positive number, got -1.5"},
      {[](json& j) { j["devices"][1].erase("mem_bandwidth_bytes_per_s"); },
       "devices[1]: missing required key 'mem_bandwidth_bytes_per_s'"},
      {[](json& j) { j["devices"][0]["mem_bytes"] = json::array(); },
       "devices[0].mem_bytes: expected a positive number, got []"},
      {[](json& j) { j["devices"][1].erase("mem_bytes"); },
       "devices[1]: missing required key 'mem_bytes'"},
      {[](json& j) { j["devices"][0]["power_w"] = -6; },
       "devices[0].power_w: expected a value in [0, 1e+06], got -6"},
      {[](json& j) { j["devices"][0]["threads"] = 2.5; },
       "devices[0].threads: expected a positive integer, got 2.5"},
      {[](json& j) { j["devices"][0]["threads"] = 0; },
       "devices[0].threads: expected a positive integer, got 0"},
      {[](json& j) { j["devices"][0]["threads"] = "4"; },
       "devices[0].threads: expected a positive integer, got \"4\""},
      {[](json& j) { j["devices"][0]["speed_factor"] = 0; },
       "devices[0].speed_factor: expected a positive number, got 0"},
      {[](json& j) { j["devices"][0]["kind"] = "tpu"; },
       "devices[0].kind: expected \"cpu\" or \"cuda\", got \"tpu\""},
      {[](json& j) { j["devices"][0]["kind"] = 1; }, "devices[0].kind: expected a string, got 1"},
      {[](json& j) { j["devices"][0]["name"] = ""; },
       "devices[0].name: expected a non-empty string"},
      {[](json& j) { j["devices"][0]["name"] = 7; }, "devices[0].name: expected a string, got 7"},
      {[](json& j) { j["devices"][1].erase("name"); }, "devices[1]: missing required key 'name'"},
      {[](json& j) { j["devices"][0]["description"] = 3; },
       "devices[0].description: expected a string, got 3"},
      {[](json& j) { j["devices"][0]["op_latency_s"]["gemm:k=64,m=1,n=64,weight=f32"] = -1; },
       "devices[0].op_latency_s.gemm:k=64,m=1,n=64,weight=f32: expected a positive number, got -1"},
      {[](json& j) { j["devices"][0]["op_latency_s"] = json::array({1}); },
       "devices[0].op_latency_s: expected an object, got [1]"},
      {[](json& j) { j["devices"][0]["peak_flop"] = 1; },
       "devices[0]: unknown key 'peak_flop' (allowed: name, kind"},
      {[](json& j) { j["devices"][1]["name"] = "a"; },
       "devices[1].name: duplicate device name 'a'"},
      {[](json& j) { j["devices"][1] = 5; }, "devices[1]: expected an object, got 5"},
      {[](json& j) { j["devices"] = json::array(); }, "devices: expected at least one device"},
      {[](json& j) { j["devices"] = json::object(); }, "devices: expected an array, got {}"},
      {[](json& j) { j.erase("devices"); }, "missing required key 'devices'"},
      {[](json& j) { j["link"] = json::array(); },
       "unknown key 'link' (allowed: description, devices, links)"},
      {[](json& j) { j["description"] = json::object(); },
       "description: expected a string, got {}"},
      {[](json& j) { j["links"][0]["to"] = "zzz"; }, "links[0].to: unknown device 'zzz'"},
      {[](json& j) { j["links"][0]["from"] = "yyy"; }, "links[0].from: unknown device 'yyy'"},
      {[](json& j) { j["links"][0]["to"] = "a"; }, "links[0].to: link from 'a' to itself"},
      {[](json& j) { j["links"][0]["bandwidth_bytes_per_s"] = 0; },
       "links[0].bandwidth_bytes_per_s: expected a positive number, got 0"},
      {[](json& j) { j["links"][0].erase("bandwidth_bytes_per_s"); },
       "links[0]: missing required key 'bandwidth_bytes_per_s'"},
      {[](json& j) { j["links"][0]["latency_s"] = -0.001; },
       "links[0].latency_s: expected a value in [0, 3600], got -0.001"},
      {[](json& j) { j["links"][0].erase("latency_s"); },
       "links[0]: missing required key 'latency_s'"},
      {[](json& j) { j["links"][0]["jitter_s"] = 0.1; }, "links[0]: unknown key 'jitter_s'"},
      {[](json& j) { j["links"].push_back(j["links"][0]); }, "links[1]: duplicate link 'a' -> 'b'"},
      {[](json& j) { j["links"] = "a-b"; }, "links: expected an array, got \"a-b\""},
  };
  for (const auto& c : cases) {
    json j = valid_cluster();
    c.mutate(j);
    const std::string msg = parse_error(j);
    EXPECT_TRUE(contains(msg, "cluster.json: " + c.expect)) << j.dump();
  }
  EXPECT_EQ(parse_error(json::array()), "cluster.json: expected an object, got []");
}

TEST(Cluster, LatencyZeroAndReverseLinksAreAllowed) {
  json j = valid_cluster();
  j["links"][0]["latency_s"] = 0;
  j["links"].push_back(
      {{"from", "b"}, {"to", "a"}, {"bandwidth_bytes_per_s", 1e6}, {"latency_s", 0.01}});
  const ClusterSpec c = ClusterSpec::from_json(j);
  EXPECT_EQ(c.links.size(), 2u);
}

TEST(Cluster, FilesRoundTripAndErrors) {
  TempDir dir;
  const std::string path = dir.file("cluster.json");
  const ClusterSpec c = ClusterSpec::from_json(valid_cluster());
  c.save(path);
  const ClusterSpec back = ClusterSpec::from_json_file(path);
  EXPECT_EQ(back.to_json(), c.to_json());

  // Errors in a file name the file's path.
  json bad = valid_cluster();
  bad["devices"][1]["peak_flops"] = -3;
  std::ofstream(path) << bad.dump(2);
  try {
    ClusterSpec::from_json_file(path);
    ADD_FAILURE() << "expected ParseError";
  } catch (const ParseError& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ": devices[1].peak_flops: expected a positive number, got -3");
    EXPECT_EQ(e.source(), path);
  }

  // Invalid JSON: byte offset.
  std::ofstream(path) << "{\"devices\": [1, 2,, 3]}";
  try {
    ClusterSpec::from_json_file(path);
    ADD_FAILURE() << "expected ParseError";
  } catch (const ParseError& e) {
    EXPECT_EQ(e.offset(), 18);
    EXPECT_TRUE(contains(e.what(), path + " at byte 18: invalid JSON"));
  }

  // Missing file.
  const std::string missing = dir.file("nope.json");
  try {
    ClusterSpec::from_json_file(missing);
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "cannot open '" + missing + "'"));
  }
  EXPECT_THROW(c.save(dir.file("no_such_dir/x.json")), IoError);
}

TEST(Cluster, DeviceProfileFile) {
  TempDir dir;
  DeviceProfile p;
  p.name = "me";
  p.kind = "cuda";
  p.peak_flops = 1e12;
  p.mem_bandwidth_bytes_per_s = 1e11;
  p.mem_bytes = 8e9;
  p.op_latency_s["softmax:cols=8,rows=2"] = 1e-6;
  const std::string path = dir.file("me.json");
  p.save(path);
  const DeviceProfile back = DeviceProfile::from_json_file(path);
  EXPECT_EQ(back.to_json(), p.to_json());
  json j = p.to_json();
  j["mem_bytes"] = nullptr;
  try {
    DeviceProfile::from_json(j, "me.json");
    ADD_FAILURE() << "expected ParseError";
  } catch (const ParseError& e) {
    EXPECT_EQ(std::string(e.what()), "me.json: mem_bytes: expected a positive number, got null");
  }
  json l = {{"from", "x"}, {"to", "y"}, {"bandwidth_bytes_per_s", 1e9}};
  try {
    LinkProfile::from_json(l, "link");
    ADD_FAILURE() << "expected ParseError";
  } catch (const ParseError& e) {
    EXPECT_EQ(std::string(e.what()), "link: missing required key 'latency_s'");
  }
  l["latency_s"] = 1e-4;
  EXPECT_EQ(LinkProfile::from_json(l).to_json(), l);
}

TEST(Cluster, ValidateCatchesProgrammaticMistakes) {
  ClusterSpec c = ClusterSpec::from_json(valid_cluster());
  EXPECT_NO_THROW(c.validate());
  ClusterSpec d = c;
  d.devices[1].name = "a";
  EXPECT_THROW(d.validate(), InvalidArgument);
  d = c;
  d.links[0].to = "ghost";
  EXPECT_THROW(d.validate(), InvalidArgument);
  d = c;
  d.devices[0].mem_bandwidth_bytes_per_s = 0;
  EXPECT_THROW(d.validate(), InvalidArgument);
  EXPECT_THROW(d.save("/dev/null"), InvalidArgument);  // save validates first
  d = c;
  d.links[0].latency_s = -1;
  EXPECT_THROW(d.validate(), InvalidArgument);
  EXPECT_THROW(ClusterSpec{}.validate(), InvalidArgument);
}

TEST(Cluster, ExampleFilesLoad) {
  const ClusterSpec edge = ClusterSpec::from_json_file((examples_dir() / "edge4.json").string());
  EXPECT_EQ(edge.devices.size(), 4u);
  EXPECT_FALSE(edge.description.empty());
  // Every pair of the four boards is linked.
  for (const auto& a : edge.devices)
    for (const auto& b : edge.devices)
      if (a.name != b.name) EXPECT_TRUE(edge.has_link(a.name, b.name)) << a.name << " " << b.name;
  const ClusterSpec gpu =
      ClusterSpec::from_json_file((examples_dir() / "hetero_gpu.json").string());
  EXPECT_EQ(gpu.devices.size(), 3u);
  int cuda = 0;
  for (const auto& d : gpu.devices) cuda += d.kind == "cuda";
  EXPECT_EQ(cuda, 2);
  EXPECT_NO_THROW(edge.validate());
  EXPECT_NO_THROW(gpu.validate());
}

}  // namespace
}  // namespace tandem
