// SPDX-License-Identifier: Apache-2.0
// Options the recsys commands share (rec-serve, rec-tune): the query-size distribution of the
// workload kit (tandem/recsys/workload.h), bound to the caller's fields, and applied to a workload.
//
//   add_query_size_options(sub, o->query_size, o->size_dist, o->size_sd, o->size_quantiles);
//   set_query_sizes(w.size, o.size_dist, o.size_sd, o.size_quantiles);
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "commands.h"
#include "tandem/recsys/workload.h"

namespace tandem::cli {

// --query-size (rows per query, 0 = the model's), --size-dist, --size-sd and --size-quantiles.
inline void add_query_size_options(CLI::App* sub, int64_t& query_size, std::string& size_dist,
                                   double& size_sd, std::string& size_quantiles) {
  sub->add_option("--query-size", query_size, "Candidate rows per query (0 = the model's)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  sub->add_option("--size-dist", size_dist, "Query sizes: fixed, normal, lognormal, uniform")
      ->check(CLI::IsMember({"fixed", "normal", "lognormal", "uniform"}))
      ->capture_default_str();
  sub->add_option("--size-sd", size_sd, "normal: sd of the size; lognormal: sd of its log")
      ->check(number_in(0.0, 1e6))
      ->capture_default_str();
  sub->add_option("--size-quantiles", size_quantiles,
                  "File of equally likely query sizes in MLPerf DLRM's format "
                  "(bench/recsys/mlperf_dist_quantile.txt: its 100-700); overrides --size-dist")
      ->check(CLI::ExistingFile);
}

// The distribution those options name (the quantile file read here, ParseError naming its line).
inline void set_query_sizes(rec::QuerySizeOptions& s, const std::string& size_dist, double size_sd,
                            const std::string& size_quantiles) {
  s.dist = rec::parse_size_dist(size_dist);
  s.stddev = size_sd;
  if (!size_quantiles.empty()) rec::use_size_quantiles(s, rec::read_size_quantiles(size_quantiles));
}

}  // namespace tandem::cli
