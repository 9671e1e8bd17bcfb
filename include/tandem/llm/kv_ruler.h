// SPDX-License-Identifier: Apache-2.0
// Retrieval tasks for kv-eval beyond the single passkey: RULER-style (Hsieh et al. 2024) multi-key
// needles and variable tracking, generated from a seed and planted in real text.
//
// Why: one needle shows whether a policy kept one fact; a cache that keeps one salient sentence
// can still lose the second of four similar facts, or a link of a chain spread over the text.
//   passkey   kv-eval's needle (built there, scored here): one "pass key" sentence; score 1 when
//             the answer's first number is the key.
//   multikey  `keys` facts "The special magic number for <word> is <5 digits>." at depths
//             1/(keys+1) .. keys/(keys+1), the question names one of them (sample s asks key
//             s mod keys, so consecutive samples ask every depth); score 1 when the answer's
//             first number is that key's value.
//   vartrack  a chain "VAR A = 12345." then "VAR B = VAR A." ... (`hops` links, hops + 1
//             variables of five capital letters) at the same spread depths, the question asks
//             which variables equal the number; score = share of the chain's names that appear
//             in the answer as words.
// Generation uses only the seed's mt19937_64 draws (no library distributions), so a seed gives
// the same task everywhere.
//
//   llm::RulerTask t = llm::make_ruler_task("multikey", /*seed=*/1, /*sample=*/0);
//   std::string text = llm::plant_inserts(haystack_prefix, t.inserts);  // then t.question
//   double s = t.score(model_answer);  // in [0, 1]
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/export.h"

namespace tandem::llm {

// A sentence placed at a depth of the text (0: start, 1: end).
struct RulerInsert {
  double depth = 0;
  std::string text;
};

struct RulerTask {
  std::string kind;                   // passkey, multikey or vartrack
  std::string intro;                  // before the text
  std::vector<RulerInsert> inserts;   // by depth, ascending
  std::string question;               // after the text
  std::vector<std::string> expected;  // passkey/multikey: {the number}; vartrack: the names
  // 0..1 as described above.
  TANDEM_API double score(const std::string& answer) const;
};

struct RulerTaskOptions {
  int keys = 4;  // multikey facts
  int hops = 4;  // vartrack links (hops + 1 variables)
};

// The task kinds make_ruler_task knows: multikey, vartrack.
TANDEM_API const std::vector<std::string>& ruler_task_kinds();

// Sample `sample` of task `kind` for `seed`. InvalidArgument naming the kind (and the known
// kinds) for an unknown one, or naming the field for keys / hops outside [1, 16].
TANDEM_API RulerTask make_ruler_task(const std::string& kind, uint64_t seed, int sample,
                                     const RulerTaskOptions& options = {});

// `text` with every insert placed just after the last ". " that starts at or before
// depth * size (at depth * size itself when there is none), each surrounded by blank lines;
// inserts at the same place keep their order. InvalidArgument for a depth outside [0, 1] or inserts
// not in depth order.
TANDEM_API std::string plant_inserts(const std::string& text,
                                     const std::vector<RulerInsert>& inserts);

// The first run of digits in `s` ("" when none).
TANDEM_API std::string first_number(const std::string& s);

}  // namespace tandem::llm
