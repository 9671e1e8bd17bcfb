// SPDX-License-Identifier: Apache-2.0
// `tandem edge compare`: every edge system x model x bandwidth, each plan predicted by its cost
// model and replayed on the real engine (tandem/cnn/edge/measure.h), as a table and JSON.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tandem::cli {

// Adds the subcommand under `edge`; `run` is set to the function that runs it.
CLI::App* add_edge_compare(CLI::App* edge, std::function<int()>& run);

}  // namespace tandem::cli
