// SPDX-License-Identifier: Apache-2.0
// Fuzz target for pipeline plan JSON (what `tandem pipeline run` and the workers read): the bytes
// go through tandem::parse_json, then sched::PipelinePlan::from_json (tandem's one plan type) and
// HPipe's reading of its llm.layers stages (hpipe::layer_stages, layer_plan_for_run). Any input
// must parse or raise a tandem::Error; anything else escaping (another exception type, a crash, a
// sanitizer report) is a bug. What the reader accepted must write back (to_json) and read again to
// the same JSON, and an accepted HPipe plan's single-device reference must be one stage. Replayed
// by ctest over tests/fuzz/corpus/pipeline_plan; a libFuzzer binary with -DTANDEM_FUZZ=ON
// (scripts/fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_support.h"
#include "tandem/core/json.h"
#include "tandem/llm/hpipe.h"
#include "tandem/sched/plan.h"

using tandem::fuzz::accepted;
using tandem::fuzz::must;

namespace {

// True when a stage of the plan names a model file that exists here: layer_plan_for_run would open
// it, and a fuzz target never opens files named by its input.
bool names_an_existing_file(const tandem::sched::PipelinePlan& p) {
  for (const auto& s : p.stages) {
    const auto m = s.stage.find("model");
    std::error_code ec;
    if (m != s.stage.end() && m->is_string() && std::filesystem::exists(m->get<std::string>(), ec))
      return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace sched = tandem::sched;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto j = accepted([&] { return tandem::parse_json(text, "fuzz-plan.json"); });
  if (!j) return 0;

  // The runtime's plan (sched/plan.h).
  const auto plan = accepted([&] { return sched::PipelinePlan::from_json(*j, "fuzz-plan.json"); });
  if (plan) {
    const nlohmann::json out = plan->to_json();
    const auto back = sched::PipelinePlan::from_json(out, "fuzz-plan.json (round trip)");
    must(back.to_json() == out, "sched plan round trip changed the plan");
  }

  // HPipe's reading of a plan's llm.layers stages (llm/hpipe.h), and the plans it derives.
  if (plan) {
    namespace hpipe = tandem::llm::hpipe;
    if (const auto layers =
            accepted([&] { return hpipe::layer_stages(*plan, "fuzz-plan.json"); })) {
      const sched::PipelinePlan one = hpipe::single_device_plan(*plan);
      must(hpipe::layer_stages(one, "reference").stages.size() == 1,
           "the single-device reference is not one stage");
    }
    if (!names_an_existing_file(*plan))
      (void)accepted([&] { return hpipe::layer_plan_for_run(*plan, "fuzz-plan.json"); });
  }
  return 0;
}
