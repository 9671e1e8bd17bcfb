// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the pipeline runtime's wire format (sched::decode) and the JSON plan reader. Any
// input must decode or raise a tandem::Error; anything else escaping (another exception type, a
// crash, a sanitizer report) is a bug. Decoded messages must re-encode and decode to the same
// header and tensors. Replayed by ctest over tests/fuzz/corpus/sched_wire; a libFuzzer binary with
// -DTANDEM_FUZZ=ON (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "tandem/core/error.h"
#include "tandem/sched/plan.h"
#include "tandem/sched/wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem::sched;
  WireLimits limits;
  limits.max_message_bytes = 1 << 20;
  try {
    Message m = decode(data, size, limits);
    const std::string again = encode(m);
    Message back = decode(again.data(), again.size(), limits);
    if (back.type != m.type || back.seq != m.seq || back.stage != m.stage ||
        back.tensors.size() != m.tensors.size())
      std::abort();
    for (size_t i = 0; i < m.tensors.size(); ++i)
      if (back.tensors[i].shape() != m.tensors[i].shape() ||
          std::memcmp(back.tensors[i].raw_data(), m.tensors[i].raw_data(),
                      static_cast<size_t>(m.tensors[i].nbytes())) != 0)
        std::abort();
    if (m.type == MsgType::kPacket || m.type == MsgType::kResult)
      (void)message_to_packet(std::move(m));
  } catch (const tandem::Error&) {
    // expected for malformed frames
  }
  const nlohmann::json j =
      nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded()) {
    try {
      const PipelinePlan p = PipelinePlan::from_json(j, "fuzz.json");
      (void)PipelinePlan::from_json(p.to_json(), "fuzz.json (round trip)");
    } catch (const tandem::Error&) {
    }
  }
  return 0;
}
