// Whether a compiled template can drive generate (runtime/generate_check.hpp; checklist
// GEN-*, SPC-*; decisions.md "Generate checks its graph when it is used"). The row-counter
// rule: a verify graph drawing each row with its own sample step must give each row the
// counter step + row, or seeded speculative output would silently differ from plain steps.

#include "runtime/generate_check.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace mpakt {
namespace {

/// A verify template over three positions whose logits input is bound; `row_step(r)` is the
/// JSON of row r's sample `step` parameter ("" leaves it out).
std::string per_row_verify(const std::function<std::string(int)>& row_step) {
  std::string steps;
  for (int r = 0; r < 3; ++r) {
    steps += R"({"op": "slice", "in": ["logits"], "out": "row)" + std::to_string(r) + R"(", "params": {"start": )" +
             std::to_string(r) + R"(, "length": 1, "axis": 0}},)";
    const std::string step = row_step(r);
    steps += R"({"op": "sample", "in": ["row)" + std::to_string(r) + R"("], "out": "tok)" + std::to_string(r) +
             R"(", "params": {"temperature": 0.8)" + (step.empty() ? "" : ", \"step\": " + step) + "}},";
  }
  steps += R"({"op": "concat", "in": ["tok0", "tok1"], "out": "t01", "params": {"axis": 0}},)";
  steps += R"({"op": "concat", "in": ["t01", "tok2"], "out": "tok", "params": {"axis": 0}})";
  return R"({"inputs": [{"name": "ids", "shape": [3], "bind": "ids"},
                        {"name": "logits", "shape": [3, 16], "bind": "logits"}],
             "steps": [{"op": "scale", "in": ["ids"], "out": "unused", "params": {"factor": {"$bind": "pos"}}},)" +
         steps + R"(], "outputs": ["tok"]})";
}

result<std::int32_t> check(const std::string& text, std::vector<std::string> bindings, bool verify = true) {
  auto d = parse_graph_text(text, true);
  if (!d) return std::move(d).err();
  return check_generate_template(*d, bindings, true, verify);
}

TEST(GenerateCheck, AVerifyGraphWithOneSampleStepPerRowMustBindEachRowsStep) {
  // no step binding: generate would give every row the same counter
  auto unbound = check(per_row_verify([](int) { return ""; }), {"ids", "logits", "pos"});
  ASSERT_FALSE(unbound.ok());
  EXPECT_NE(unbound.err().message.find("one sample step per row"), std::string::npos) << unbound.err().message;
  EXPECT_NE(unbound.err().message.find("tok0"), std::string::npos) << unbound.err().message;
  // a literal step is overridden by generate the same way
  EXPECT_FALSE(check(per_row_verify([](int r) { return std::to_string(r); }), {"ids", "logits", "pos"}).ok());
  // bound, but every row to the same counter
  auto same = check(per_row_verify([](int) { return R"({"$bind": "step"})"; }), {"ids", "logits", "pos", "step"});
  ASSERT_FALSE(same.ok());
  EXPECT_NE(same.err().message.find("its own step"), std::string::npos) << same.err().message;
  // step + row (as the architecture builder writes it), or pos + row: accepted, k = 2
  auto per_row = check(per_row_verify([](int r) { return R"({"$bind": "step", "add": )" + std::to_string(r) + "}"; }),
                       {"ids", "logits", "pos", "step"});
  ASSERT_TRUE(per_row.ok()) << per_row.err().message;
  EXPECT_EQ(*per_row, 2);
  EXPECT_TRUE(check(per_row_verify([](int r) { return R"({"$bind": "pos", "add": )" + std::to_string(r) + "}"; }),
                    {"ids", "logits", "pos"})
                  .ok());
}

TEST(GenerateCheck, OneMultiRowSampleStepNeedsNoPerRowBinding) {
  // row r of one sample step draws with step + r already (OP-SAMPLE)
  const std::string g = R"({"inputs": [{"name": "ids", "shape": [3], "bind": "ids"},
                                       {"name": "logits", "shape": [3, 16], "bind": "logits"}],
                            "steps": [{"op": "scale", "in": ["ids"], "out": "unused", "params": {"factor": {"$bind": "pos"}}},
                                      {"op": "sample", "in": ["logits"], "out": "tok", "params": {"temperature": 0.8}}],
                            "outputs": ["tok"]})";
  auto k = check(g, {"ids", "logits", "pos"});
  ASSERT_TRUE(k.ok()) << k.err().message;
  EXPECT_EQ(*k, 2);
}

}  // namespace
}  // namespace mpakt
