// SPDX-License-Identifier: Apache-2.0
// The RULER-style retrieval tasks of kv-eval (kv_ruler.h): generation is deterministic per seed,
// plant_inserts puts each sentence where it says and leaves the text otherwise intact, and the
// scorers score known-correct, partly-correct and wrong answers as documented. No model.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "tandem/core/error.h"
#include "tandem/llm/kv_ruler.h"

namespace tandem::llm {
namespace {

std::string sentences(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "Sentence number " + std::to_string(i) + " of the haystack. ";
  return s;
}

TEST(KvRuler, GenerationIsDeterministicPerSeedAndSample) {
  for (const std::string& kind : ruler_task_kinds()) {
    const RulerTask a = make_ruler_task(kind, 7, 1), b = make_ruler_task(kind, 7, 1);
    EXPECT_EQ(a.question, b.question) << kind;
    EXPECT_EQ(a.expected, b.expected) << kind;
    ASSERT_EQ(a.inserts.size(), b.inserts.size()) << kind;
    for (size_t i = 0; i < a.inserts.size(); ++i) {
      EXPECT_EQ(a.inserts[i].text, b.inserts[i].text) << kind;
      EXPECT_EQ(a.inserts[i].depth, b.inserts[i].depth) << kind;
    }
    EXPECT_NE(make_ruler_task(kind, 8, 1).expected, a.expected) << kind;  // another seed differs
  }
}

TEST(KvRuler, MultiKeyFactsAreDistinctSpreadAndOneIsAsked) {
  const RulerTaskOptions o{.keys = 4};
  for (int sample = 0; sample < 4; ++sample) {
    const RulerTask t = make_ruler_task("multikey", 3, sample, o);
    ASSERT_EQ(t.inserts.size(), 4u);
    ASSERT_EQ(t.expected.size(), 1u);
    std::set<std::string> values;
    int holding = 0;
    for (size_t i = 0; i < t.inserts.size(); ++i) {
      EXPECT_DOUBLE_EQ(t.inserts[i].depth, (i + 1) / 5.0);
      values.insert(first_number(t.inserts[i].text));
      holding += t.inserts[i].text.find(" is " + t.expected[0] + ".") != std::string::npos;
    }
    EXPECT_EQ(values.size(), 4u);  // four distinct five-digit values
    EXPECT_EQ(holding, 1);         // exactly one fact holds the expected value
    // The asked key is the key of fact sample % 4.
    const std::string& fact = t.inserts[sample % 4].text;
    const std::string key = fact.substr(29, fact.find(" is ") - 29);  // after "...number for "
    EXPECT_NE(t.question.find("number for " + key + "?"), std::string::npos) << t.question;
    EXPECT_NE(fact.find(t.expected[0]), std::string::npos);
  }
}

TEST(KvRuler, VariableTrackingIsOneChainFromTheValue) {
  const RulerTask t = make_ruler_task("vartrack", 5, 0, RulerTaskOptions{.hops = 3});
  ASSERT_EQ(t.expected.size(), 4u);
  ASSERT_EQ(t.inserts.size(), 4u);
  const std::string value = first_number(t.question);
  EXPECT_EQ(t.inserts[0].text, "VAR " + t.expected[0] + " = " + value + ".");
  for (size_t i = 1; i < t.inserts.size(); ++i) {
    EXPECT_EQ(t.inserts[i].text, "VAR " + t.expected[i] + " = VAR " + t.expected[i - 1] + ".");
    EXPECT_GT(t.inserts[i].depth, t.inserts[i - 1].depth);
  }
}

TEST(KvRuler, PlantedWhereItSaysAndTheTextIsOtherwiseIntact) {
  const std::string text = sentences(200);
  const RulerTask t = make_ruler_task("multikey", 11, 0);
  const std::string planted = plant_inserts(text, t.inserts);
  size_t prev = 0;
  std::string rest = planted;
  for (const RulerInsert& in : t.inserts) {
    const std::string block = "\n\n" + in.text + "\n\n";
    const size_t at = planted.find(block);
    ASSERT_NE(at, std::string::npos) << in.text;
    EXPECT_GE(at, prev);  // in depth order
    prev = at;
    // Offset in the original text: what precedes the insert, minus the inserts before it.
    size_t offset = at;
    for (const RulerInsert& before : t.inserts) {
      if (&before == &in) break;
      offset -= before.text.size() + 4;
    }
    const double target = in.depth * static_cast<double>(text.size());
    EXPECT_LE(static_cast<double>(offset), target);
    EXPECT_GT(static_cast<double>(offset), target - 40.0);  // within one sentence before it
    EXPECT_EQ(text.substr(offset - 1, 1), ".");             // just after a sentence's period
    rest.erase(rest.find(block), block.size());
  }
  EXPECT_EQ(rest, text);
}

TEST(KvRuler, ScorersTellRightFromWrong) {
  const RulerTask mk = make_ruler_task("multikey", 2, 1);
  EXPECT_EQ(mk.score(mk.expected[0]), 1.0);
  EXPECT_EQ(mk.score("The number is " + mk.expected[0] + "."), 1.0);
  std::string other;
  for (const RulerInsert& in : mk.inserts) {
    if (first_number(in.text) != mk.expected[0]) other = first_number(in.text);
  }
  EXPECT_EQ(mk.score(other), 0.0);  // a distractor's value
  EXPECT_EQ(mk.score("I do not know."), 0.0);

  const RulerTask vt = make_ruler_task("vartrack", 2, 0, RulerTaskOptions{.hops = 3});
  const auto& n = vt.expected;
  EXPECT_EQ(vt.score(n[0] + ", " + n[1] + ", " + n[2] + ", " + n[3]), 1.0);
  EXPECT_EQ(vt.score("VAR " + n[2] + " and VAR " + n[0]), 0.5);
  EXPECT_EQ(vt.score(n[0] + n[1]), 0.0);  // glued names are not words
  EXPECT_EQ(vt.score("QQQQQ"), 0.0);
}

TEST(KvRuler, BadInputIsRefusedByName) {
  EXPECT_THROW(make_ruler_task("needle", 1, 0), InvalidArgument);
  EXPECT_THROW(make_ruler_task("multikey", 1, 0, RulerTaskOptions{.keys = 0}), InvalidArgument);
  EXPECT_THROW(make_ruler_task("vartrack", 1, 0, RulerTaskOptions{.hops = 17}), InvalidArgument);
  EXPECT_THROW(plant_inserts("a. b. c.", {{0.7, "x"}, {0.2, "y"}}), InvalidArgument);
  EXPECT_THROW(plant_inserts("a. b. c.", {{1.5, "x"}}), InvalidArgument);
  try {
    make_ruler_task("needle", 1, 0);
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'needle' is unknown (known: multikey, vartrack)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tandem::llm
