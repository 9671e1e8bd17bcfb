// SPDX-License-Identifier: Apache-2.0
// Wall-clock helpers shared by the library's sources (private to src/): seconds since a time point
// and a monotonic "now" in seconds, both on std::chrono::steady_clock.
//
//   const auto t0 = std::chrono::steady_clock::now();
//   ...;
//   double took = tandem::seconds_since(t0);
#pragma once

#include <chrono>

namespace tandem {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Seconds on the steady clock since its epoch: for differences only.
inline double monotonic_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace tandem
