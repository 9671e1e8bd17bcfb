// SPDX-License-Identifier: Apache-2.0
// Options the recsys commands share (rec-serve, rec-tune): the query-size distribution of the
// workload kit (tandem/recsys/workload.h), bound to the caller's fields.
//
//   add_query_size_options(sub, o->query_size, o->size_dist, o->size_sd);
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "commands.h"

namespace tandem::cli {

// --query-size (rows per query, 0 = the model's), --size-dist and --size-sd.
inline void add_query_size_options(CLI::App* sub, int64_t& query_size, std::string& size_dist,
                                   double& size_sd) {
  sub->add_option("--query-size", query_size, "Candidate rows per query (0 = the model's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  sub->add_option("--size-dist", size_dist, "Query sizes: fixed, normal, lognormal, uniform")
      ->check(CLI::IsMember({"fixed", "normal", "lognormal", "uniform"}))
      ->capture_default_str();
  sub->add_option("--size-sd", size_sd, "normal: sd of the size; lognormal: sd of its log")
      ->check(number_in(0.0, 1e6))
      ->capture_default_str();
}

}  // namespace tandem::cli
