// SPDX-License-Identifier: Apache-2.0
// `tandem inspect`: what a GGUF model file holds: architecture, hyperparameters (the
// "<arch>.*" keys), general.* facts, the tensor table (name, type, shape, bytes) with totals per
// type, and a vocabulary summary. Without -m it inspects the default model (fetched on first use).

#include <cinttypes>
#include <cstdio>
#include <map>

#include "commands.h"
#include "model_path.h"
#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/vocab.h"

namespace tandem::cli {

namespace {

std::string shape_text(const Shape& s) { return s.to_string(); }

// A metadata value as one line of text (long arrays summarised).
std::string value_text(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json vocab_json(const llm::GgufFile& f) {
  try {
    const llm::Vocab v = llm::load_vocab(f);
    auto piece = [&](int32_t id) -> nlohmann::json {
      if (id < 0) return nullptr;
      return v.tokens[static_cast<size_t>(id)];
    };
    return {{"model", v.model},
            {"pre", v.pre},
            {"tokens", v.tokens.size()},
            {"merges", v.merges.size()},
            {"scores", !v.scores.empty()},
            {"bos", {{"id", v.bos_id}, {"piece", piece(v.bos_id)}}},
            {"eos", {{"id", v.eos_id}, {"piece", piece(v.eos_id)}}},
            {"unk_id", v.unk_id},
            {"pad_id", v.pad_id},
            {"add_bos", v.add_bos},
            {"add_eos", v.add_eos},
            {"add_space_prefix", v.add_space_prefix},
            {"chat_template_chars", v.chat_template.size()}};
  } catch (const Error& e) {
    return {{"error", e.what()}};
  }
}

}  // namespace

int run_inspect(const InspectOptions& o) {
  const std::string path = resolve_model_path(o.model, !o.no_progress);
  const llm::GgufFile f(path);
  const std::string arch = f.find_string("general.architecture").value_or("");
  const nlohmann::json meta = f.metadata_json(8);

  nlohmann::json hyper = nlohmann::json::object(), general = nlohmann::json::object();
  for (const auto& [key, value] : meta.items()) {
    if (!arch.empty() && key.rfind(arch + ".", 0) == 0) hyper[key.substr(arch.size() + 1)] = value;
    if (key.rfind("general.", 0) == 0) general[key.substr(8)] = value;
  }
  nlohmann::json tensors = nlohmann::json::array();
  std::map<std::string, std::pair<int, uint64_t>> per_type;
  uint64_t total_bytes = 0;
  int64_t total_params = 0;
  for (const auto& t : f.tensors()) {
    const std::string type = llm::ggml_type_name(t.ggml_type);
    tensors.push_back({{"name", t.name},
                       {"type", type},
                       {"shape", t.shape.to_vector()},
                       {"bytes", t.nbytes},
                       {"offset", t.offset}});
    auto& [count, bytes] = per_type[type];
    ++count;
    bytes += t.nbytes;
    total_bytes += t.nbytes;
    total_params += t.shape.numel();
  }
  const nlohmann::json vocab = vocab_json(f);

  if (o.output == "json") {
    nlohmann::json types = nlohmann::json::object();
    for (const auto& [type, cb] : per_type)
      types[type] = {{"tensors", cb.first}, {"bytes", cb.second}};
    const nlohmann::json j = {{"file", path},
                              {"gguf_version", f.version()},
                              {"file_bytes", f.file_size()},
                              {"alignment", f.alignment()},
                              {"architecture", arch},
                              {"general", general},
                              {"hyperparameters", hyper},
                              {"parameters", total_params},
                              {"tensor_bytes", total_bytes},
                              {"types", types},
                              {"tensors", tensors},
                              {"vocab", vocab},
                              {"metadata", meta}};
    std::printf("%s\n", value_text(j).c_str());
    return 0;
  }

  std::printf("# %s\n\n", path.c_str());
  std::printf("GGUF v%u, %.1f MiB, %zu metadata keys, %zu tensors, alignment %u\n\n", f.version(),
              static_cast<double>(f.file_size()) / (1 << 20), f.keys().size(), f.tensors().size(),
              f.alignment());
  std::printf("architecture: %s\n", arch.empty() ? "(none)" : arch.c_str());
  for (const auto& [key, value] : general.items())
    if (key != "architecture")
      std::printf("general.%s: %s\n", key.c_str(), value_text(value).c_str());
  std::printf("parameters: %" PRId64 " (%.1f M), tensor data %.1f MiB\n\n", total_params,
              static_cast<double>(total_params) / 1e6,
              static_cast<double>(total_bytes) / (1 << 20));

  std::printf("## Hyperparameters\n\n| key | value |\n|---|---|\n");
  for (const auto& [key, value] : hyper.items())
    std::printf("| %s | %s |\n", key.c_str(), value_text(value).c_str());

  std::printf("\n## Vocabulary\n\n");
  if (vocab.contains("error")) {
    std::printf("not usable: %s\n", vocab["error"].get<std::string>().c_str());
  } else {
    std::printf("model %s (pre-tokenizer %s), %zu tokens, %zu merges%s\n",
                vocab["model"].get<std::string>().c_str(), vocab["pre"].get<std::string>().c_str(),
                vocab["tokens"].get<size_t>(), vocab["merges"].get<size_t>(),
                vocab["scores"].get<bool>() ? ", scores" : "");
    std::printf(
        "bos %s, eos %s, unk %d, pad %d; add_bos %s, add_eos %s; chat template: %zu chars\n",
        value_text(vocab["bos"]).c_str(), value_text(vocab["eos"]).c_str(),
        vocab["unk_id"].get<int>(), vocab["pad_id"].get<int>(),
        vocab["add_bos"].get<bool>() ? "yes" : "no", vocab["add_eos"].get<bool>() ? "yes" : "no",
        vocab["chat_template_chars"].get<size_t>());
  }

  std::printf("\n## Tensor types\n\n| type | tensors | MiB |\n|---|---|---|\n");
  for (const auto& [type, cb] : per_type)
    std::printf("| %s | %d | %.2f |\n", type.c_str(), cb.first,
                static_cast<double>(cb.second) / (1 << 20));

  std::printf("\n## Tensors\n\n| name | type | shape | bytes |\n|---|---|---|---|\n");
  for (const auto& t : f.tensors())
    std::printf("| %s | %s | %s | %" PRIu64 " |\n", t.name.c_str(),
                llm::ggml_type_name(t.ggml_type).c_str(), shape_text(t.shape).c_str(), t.nbytes);
  return 0;
}

}  // namespace tandem::cli
