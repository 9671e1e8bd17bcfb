// SPDX-License-Identifier: Apache-2.0
// Fuzz target for embedding table files (.temb, recsys/embedding.h): the bytes, written to a
// scratch file (the reader maps a path), go to EmbeddingTable::map_file. Any input must map or
// raise a tandem::Error; anything else escaping (another exception type, a crash, a sanitizer
// report) is a bug. An accepted table must read its first and last rows, pool them, and write back
// to a file that maps to the same header and bytes. Replayed by ctest over
// tests/fuzz/corpus/embedding_table; a libFuzzer binary with -DTANDEM_FUZZ=ON (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "tandem/recsys/embedding.h"

using tandem::fuzz::accepted;
using tandem::fuzz::must;
namespace rec = tandem::rec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tandem::fuzz::fuzz_file(
      "table.temb", std::string_view(reinterpret_cast<const char*>(data), size));
  const auto t = accepted([&] { return rec::EmbeddingTable::map_file(path, "fuzz"); });
  if (!t) return 0;
  must(t->rows() >= 1 && t->dim() >= 1, "empty table accepted");
  must(64 + t->bytes() == static_cast<int64_t>(size), "table bytes do not match the file");
  std::vector<float> row(static_cast<size_t>(t->dim()));
  t->read_row(0, row.data());
  t->read_row(t->rows() - 1, row.data());
  const int64_t ids[] = {0, t->rows() - 1}, offsets[] = {0, 2};
  t->pooled_lookup(ids, offsets, 1, rec::Pooling::kMean, row.data(), t->dim());
  const std::string again = tandem::fuzz::scratch_path("again.temb");
  t->write_file(again);
  const auto back = rec::EmbeddingTable::map_file(again, "fuzz");
  must(back.rows() == t->rows() && back.dim() == t->dim() && back.dtype() == t->dtype() &&
           std::memcmp(back.row_data(0), t->row_data(0), static_cast<size_t>(t->bytes())) == 0,
       "embedding table round trip changed the table");
  return 0;
}
