// SPDX-License-Identifier: Apache-2.0
// Fuzz target for recommendation-model configs (recsys/config.h): the bytes go through
// tandem::parse_json, then parse_model_config (one model object) and parse_zoo (a zoo document),
// and, written to a scratch file, through load_model_config (which accepts either). Any input must
// be read or raise a tandem::Error; anything else escaping (another exception type, a crash, a
// sanitizer report) is a bug. An accepted config must write back (to_json) and read again to the
// same JSON, and what `tandem rec-serve` computes from it (table_bytes, fit_tables, scale_rows,
// item_dim) must not overflow. Replayed by ctest over tests/fuzz/corpus/recsys_config; a libFuzzer
// binary with -DTANDEM_FUZZ=ON (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "tandem/core/json.h"
#include "tandem/recsys/config.h"

using tandem::fuzz::accepted;
using tandem::fuzz::must;
namespace rec = tandem::rec;

namespace {

void check(const rec::ModelConfig& cfg) {
  const nlohmann::json out = cfg.to_json();
  const auto back = rec::parse_model_config(out, cfg.name, "fuzz-config.json (round trip)");
  must(back.to_json() == out, "recsys config round trip changed the config");
  must(cfg.table_bytes() > 0 || (cfg.tables.empty() && cfg.item_tables.empty()),
       "table_bytes not positive");
  must(cfg.item_dim() >= 0, "negative item width");
  rec::ModelConfig fitted = cfg;
  const double f = fitted.fit_tables(int64_t{64} << 20);
  must(f > 0 && f <= 1, "fit_tables factor outside (0, 1]");
  rec::ModelConfig grown = cfg;  // `rec-serve --rows-scale`: refused when the rows would not fit
  if (accepted([&] { return (grown.scale_rows(1e6), true); }))
    must(grown.table_bytes() > 0, "scaled table_bytes not positive");
  for (const auto* ts : {&fitted.tables, &fitted.item_tables})
    for (const auto& t : *ts) must(t.rows >= 1, "fit_tables left a table without rows");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto j = accepted([&] { return tandem::parse_json(text, "fuzz-config.json"); });
  if (j) {
    if (const auto cfg =
            accepted([&] { return rec::parse_model_config(*j, "fuzz", "fuzz-config.json"); }))
      check(*cfg);
    if (const auto zoo = accepted([&] { return rec::parse_zoo(*j, "fuzz-config.json"); }))
      for (const auto& cfg : *zoo) check(cfg);
  }
  const std::string path = tandem::fuzz::fuzz_file("model.json", text);
  if (const auto cfg = accepted([&] { return rec::load_model_config(path); })) check(*cfg);
  return 0;
}
