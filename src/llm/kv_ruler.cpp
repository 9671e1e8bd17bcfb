// SPDX-License-Identifier: Apache-2.0
// RULER-style retrieval tasks for kv-eval: generation, planting, scoring (kv_ruler.h).
#include "tandem/llm/kv_ruler.h"

#include <algorithm>
#include <cctype>
#include <random>
#include <set>

#include "tandem/core/error.h"

namespace tandem::llm {
namespace {

// Keys of the multi-key facts: common concrete nouns, one token or two in most vocabularies.
constexpr const char* kKeyWords[] = {"apple",   "river",  "candle", "window", "garden",  "silver",
                                     "harbor",  "pencil", "forest", "ladder", "mirror",  "orange",
                                     "violin",  "anchor", "basket", "castle", "dragon",  "feather",
                                     "glacier", "island", "jacket", "kettle", "lantern", "meadow"};

uint64_t mix_seed(uint64_t seed, const std::string& kind, int sample) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the kind, then the seed and the sample
  for (char c : kind) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h ^ (seed * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(sample) << 32);
}

std::string five_digits(std::mt19937_64& rng) { return std::to_string(10000 + rng() % 90000); }

// Depth of fact i of n: spread evenly, never at the very start or end.
double spread_depth(int i, int n) { return static_cast<double>(i + 1) / (n + 1); }

RulerTask multikey(std::mt19937_64& rng, int sample, int keys) {
  std::vector<std::string> words(std::begin(kKeyWords), std::end(kKeyWords));
  for (size_t i = 0; i + 1 < words.size(); ++i) {  // Fisher-Yates on the raw draws
    std::swap(words[i], words[i + rng() % (words.size() - i)]);
  }
  RulerTask t;
  t.kind = "multikey";
  t.intro = "Read the text below. Special magic numbers are hidden in it.\n\n";
  std::set<std::string> values;
  std::vector<std::string> vals;
  for (int i = 0; i < keys; ++i) {
    std::string v = five_digits(rng);
    while (!values.insert(v).second) v = five_digits(rng);
    vals.push_back(v);
    t.inserts.push_back(
        {spread_depth(i, keys), "The special magic number for " + words[i] + " is " + v + "."});
  }
  const int asked = sample % keys;
  t.question =
      "\n\nWhat is the special magic number for " + words[asked] + "? Answer with the number only.";
  t.expected = {vals[asked]};
  return t;
}

RulerTask vartrack(std::mt19937_64& rng, int hops) {
  std::set<std::string> seen;
  std::vector<std::string> names;
  while (static_cast<int>(names.size()) < hops + 1) {
    std::string n(5, 'A');
    for (char& c : n) c = static_cast<char>('A' + rng() % 26);
    if (seen.insert(n).second) names.push_back(n);
  }
  const std::string value = five_digits(rng);
  RulerTask t;
  t.kind = "vartrack";
  t.intro = "Read the text below. Variable assignments are hidden in it.\n\n";
  for (int i = 0; i <= hops; ++i) {
    const std::string rhs = i == 0 ? value : "VAR " + names[i - 1];
    t.inserts.push_back({spread_depth(i, hops + 1), "VAR " + names[i] + " = " + rhs + "."});
  }
  t.question = "\n\nFind all variables that are assigned the value " + value +
               " in the text above. Answer with the variable names only.";
  t.expected = names;
  return t;
}

// The words of `s` (runs of letters).
std::set<std::string> words_of(const std::string& s) {
  std::set<std::string> out;
  std::string w;
  for (char c : s + " ") {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      w += c;
    } else if (!w.empty()) {
      out.insert(w);
      w.clear();
    }
  }
  return out;
}

}  // namespace

const std::vector<std::string>& ruler_task_kinds() {
  static const std::vector<std::string> kinds = {"multikey", "vartrack"};
  return kinds;
}

RulerTask make_ruler_task(const std::string& kind, uint64_t seed, int sample,
                          const RulerTaskOptions& options) {
  for (const auto& [name, v] : {std::pair{"keys", options.keys}, {"hops", options.hops}}) {
    if (v < 1 || v > 16) {
      throw InvalidArgument(
          cat("RULER task '", kind, "': ", name, " = ", v, " is outside [1, 16]"));
    }
  }
  std::mt19937_64 rng(mix_seed(seed, kind, sample));
  if (kind == "multikey") return multikey(rng, sample, options.keys);
  if (kind == "vartrack") return vartrack(rng, options.hops);
  throw InvalidArgument(cat("RULER task '", kind, "' is unknown (known: multikey, vartrack)"));
}

std::string plant_inserts(const std::string& text, const std::vector<RulerInsert>& inserts) {
  std::vector<size_t> cuts;
  for (size_t i = 0; i < inserts.size(); ++i) {
    const double d = inserts[i].depth;
    if (!(d >= 0 && d <= 1) || (i > 0 && d < inserts[i - 1].depth)) {
      throw InvalidArgument(cat("plant_inserts: insert ", i, " at depth ", d,
                                " (depths must lie in [0, 1], ascending)"));
    }
    const size_t cut = static_cast<size_t>(d * static_cast<double>(text.size()));
    const size_t dot = text.rfind(". ", cut);
    cuts.push_back(dot == std::string::npos ? cut : dot + 1);
  }
  std::string out;
  size_t from = 0;
  for (size_t i = 0; i < inserts.size(); ++i) {
    out += text.substr(from, cuts[i] - from);
    out += "\n\n" + inserts[i].text + "\n\n";
    from = cuts[i];
  }
  return out + text.substr(from);
}

std::string first_number(const std::string& s) {
  const size_t i = s.find_first_of("0123456789");
  if (i == std::string::npos) return "";
  const size_t j = s.find_first_not_of("0123456789", i);
  return s.substr(i, j == std::string::npos ? std::string::npos : j - i);
}

double RulerTask::score(const std::string& answer) const {
  if (expected.empty()) return 0;
  if (kind != "vartrack") return first_number(answer) == expected[0] ? 1.0 : 0.0;
  const std::set<std::string> words = words_of(answer);
  const auto named = std::count_if(expected.begin(), expected.end(),
                                   [&](const std::string& n) { return words.count(n) > 0; });
  return static_cast<double>(named) / static_cast<double>(expected.size());
}

}  // namespace tandem::llm
