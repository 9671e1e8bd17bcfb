// SPDX-License-Identifier: Apache-2.0
#include "model_path.h"

#include "report.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/llm/model_store.h"

namespace tandem::cli {

std::string resolve_model_path(const std::string& model_arg, bool progress) {
  if (!model_arg.empty()) return model_arg;
  Progress line(progress);  // a "\r" line on stderr, only when it is a terminal
  llm::FetchOptions fo;
  fo.progress = [&line](const std::string& stage, int64_t done, int64_t total) {
    line.update(total > 0 ? cat(stage, ": ", 100 * done / total, "%") : stage);
  };
  return llm::default_model_path(fo);
}

llm::Model load_model_for(const std::string& model_arg, bool progress, const std::string& device,
                          int threads, std::string* path_out) {
  if (threads > 0) set_cpu_num_threads(threads);
  const std::string path = resolve_model_path(model_arg, progress);
  if (path_out) *path_out = path;
  const Device d = Device::parse(device);
  return d.is_cpu() ? llm::Model::load(path) : llm::Model::load(path).to(d);
}

CLI::Option* add_decode_option(CLI::App* sub, llm::DecodeArithmetic& decode) {
  return sub
      ->add_option_function<std::string>(
          "--decode",
          [&decode](const std::string& name) {
            decode = name == "f32" ? llm::DecodeArithmetic::kF32 : llm::DecodeArithmetic::kInt8;
          },
          "Arithmetic of single-token (decode) steps. int8 (the default): activations "
          "rounded to int8 blocks for the quantized matrices, integer dot products, as "
          "llama.cpp decodes; f32: f32 activations, the reference")
      ->check(CLI::IsMember({"int8", "f32"}))
      ->type_name("int8|f32");
}

}  // namespace tandem::cli
