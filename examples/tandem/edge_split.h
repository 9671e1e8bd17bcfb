// SPDX-License-Identifier: Apache-2.0
// `tandem edge split`: a CNN split between an edge device and a cloud server (DECC, Neurosurgeon,
// DADS, edge-only, cloud-only; tandem/cnn/edge/edge_cloud_planners.h), one plan, every system side
// by side, or a bandwidth sweep. A subcommand of its own rather than `edge plan --system decc`:
// its cluster is exactly two devices and its plan is two node lists and an upload list, not
// stages of pieces, so none of `edge plan`'s output or options (--lambda, --refine, ...) apply.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tandem::cli {

// Adds the subcommand under `edge`; `run` is set to the function that runs it.
CLI::App* add_edge_split(CLI::App* edge, std::function<int()>& run);

}  // namespace tandem::cli
