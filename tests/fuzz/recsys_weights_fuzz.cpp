// SPDX-License-Identifier: Apache-2.0
// Fuzz target for recsys weight files (safetensors, recsys/weights.h): the bytes, written to a
// scratch file (the reader takes a path), go to read_safetensors and then to RecModel::load for
// four small zoo models (tiny-dlrm with f32 and i8 tables, tiny-wnd, tiny-din with f16 tables),
// which check the stored config and every tensor against the model. Any input must be read or raise
// a tandem::Error; anything else escaping (another exception type, a crash, a sanitizer report) is
// a bug. An accepted file must write back and read again unchanged, and an accepted model must save
// and load again. Replayed by ctest over tests/fuzz/corpus/recsys_weights; a libFuzzer binary with
// -DTANDEM_FUZZ=ON (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "tandem/recsys/config.h"
#include "tandem/recsys/model.h"
#include "tandem/recsys/weights.h"

using tandem::fuzz::accepted;
using tandem::fuzz::must;
namespace rec = tandem::rec;

namespace {

bool same(const rec::SafetensorsFile& a, const rec::SafetensorsFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (const auto& [name, t] : a.tensors) {
    const auto it = b.tensors.find(name);
    if (it == b.tensors.end() || it->second.dtype != t.dtype || it->second.shape != t.shape ||
        it->second.data != t.data)
      return false;
  }
  return true;
}

const std::vector<rec::ModelConfig>& models() {
  static const std::vector<rec::ModelConfig> m = [] {
    rec::ModelConfig i8 = rec::zoo_config("tiny-dlrm");
    i8.table_dtype = tandem::DType::kI8;
    rec::ModelConfig din = rec::zoo_config("tiny-din");
    din.table_dtype = tandem::DType::kF16;
    return std::vector<rec::ModelConfig>{rec::zoo_config("tiny-dlrm"), i8,
                                         rec::zoo_config("tiny-wnd"), din};
  }();
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tandem::fuzz::fuzz_file(
      "weights.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  const auto file = accepted([&] { return rec::read_safetensors(path); });
  if (!file) return 0;
  const std::string again = tandem::fuzz::scratch_path("again.safetensors");
  rec::write_safetensors(again, *file);
  must(same(rec::read_safetensors(again), *file), "safetensors round trip changed the file");
  for (const auto& cfg : models()) {
    const auto model = accepted([&] { return rec::RecModel::load(cfg, path); });
    if (!model) continue;
    model->save(again);
    must(rec::RecModel::load(cfg, again).num_nodes() == model->num_nodes(),
         "a saved model loads with other nodes");
  }
  return 0;
}
