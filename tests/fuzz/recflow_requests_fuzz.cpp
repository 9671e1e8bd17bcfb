// SPDX-License-Identifier: Apache-2.0
// Fuzz target for converted RecFlow request files (recsys/recflow_data.h): any bytes must be read
// or raise a tandem::Error. An accepted file must write back and read again to the same requests,
// and every request with candidates must map onto the recflow-din schema (tables scaled 1e-3)
// with every id inside its table. Replayed by ctest over tests/fuzz/corpus/recflow_requests; a
// libFuzzer binary with -DTANDEM_FUZZ=ON (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "tandem/recsys/config.h"
#include "tandem/recsys/recflow_data.h"

using tandem::fuzz::accepted;
using tandem::fuzz::must;
namespace rec = tandem::rec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto file = accepted([&] { return rec::parse_recflow_requests(bytes, "fuzz.trf"); });
  if (!file) return 0;
  const std::string again = tandem::fuzz::scratch_path("again.trf");
  rec::write_recflow_requests(again, *file);
  const auto back = rec::read_recflow_requests(again);
  must(back.requests.size() == file->requests.size(), "round trip changed the request count");
  static const rec::ModelConfig schema = [] {
    rec::ModelConfig c = rec::zoo_config("recflow-din");
    c.scale_rows(1e-3);
    return c;
  }();
  for (size_t i = 0; i < file->requests.size(); ++i) {
    const auto& r = file->requests[i];
    must(back.requests[i].candidates == r.candidates && back.requests[i].stage == r.stage &&
             back.requests[i].behaviours == r.behaviours,
         "round trip changed a request");
    if (r.candidates.empty()) continue;
    const rec::QueryInputs q = rec::recflow_query(r, schema);
    for (size_t k = 0; k < q.item_ids.size(); ++k)
      for (int64_t v : q.item_ids[k])
        must(v >= 0 && v < schema.item_tables[k].rows, "a candidate id outside its table");
  }
  return 0;
}
