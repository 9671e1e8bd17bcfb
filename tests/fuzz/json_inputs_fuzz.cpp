// SPDX-License-Identifier: Apache-2.0
// Fuzz target for tandem's JSON readers: the bytes go through tandem::parse_json (the one parser
// every JSON input uses: depth bound, duplicate keys, out-of-range numbers), then ClusterSpec,
// DeviceProfile, LinkProfile and Graph. Any input must either parse or raise a tandem::Error;
// anything else escaping (another exception type, a crash, a sanitizer report) is a bug. Built as a
// libFuzzer binary with clang (scripts/fuzz.sh) and, everywhere, as a replay test over
// tests/fuzz/corpus/json.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tandem/core/cluster.h"
#include "tandem/core/error.h"
#include "tandem/core/graph.h"
#include "tandem/core/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j;
  try {
    j = tandem::parse_json(text, "fuzz.json");
  } catch (const tandem::Error&) {
    return 0;  // not acceptable JSON: refused with a message
  }
  auto attempt = [&](auto&& read) {
    try {
      read();
    } catch (const tandem::Error&) {
      // expected for malformed inputs
    }
  };
  attempt([&] {
    const auto spec = tandem::ClusterSpec::from_json(j, "fuzz.json");
    // What was accepted must serialise and read back.
    (void)tandem::ClusterSpec::from_json(spec.to_json(), "fuzz.json (round trip)");
  });
  attempt([&] { (void)tandem::DeviceProfile::from_json(j, "fuzz.json"); });
  attempt([&] { (void)tandem::LinkProfile::from_json(j, "fuzz.json"); });
  attempt([&] {
    const auto g = tandem::Graph::from_json(j, "fuzz.json");
    (void)g.topological_order();
    (void)tandem::Graph::from_json(g.to_json(), "fuzz.json (round trip)");
  });
  return 0;
}
