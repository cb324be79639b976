// rmsnorm, layernorm, softmax, causal_mask: shape rules (runtime/ops/norm.cpp) and
// reference kernels (backends/cpu/ref/norm.cpp). Expected values computed by hand.

#include "runtime/ops/norm_params.hpp"

#include <gtest/gtest.h>

#include <limits>

#include "test/support/op_checks.hpp"

namespace mpakt {
namespace {

using test::check_error;
using test::expect_close;
using test::mentions;
using test::run_error;
using test::run_values;
using test::t32;

constexpr float inf = std::numeric_limits<float>::infinity();

std::vector<std::string> features_of(std::string_view op, std::string_view params) {
  std::vector<std::string> out;
  auto pm = parse_params_text(params);
  EXPECT_TRUE(pm.ok());
  find_op_def(op)->features(*pm, 2, out);
  return out;
}

TEST(Rmsnorm, NormalisesEachRow) {
  // row [1, 2, 3, 4]: mean square 7.5, rms 2.7386128; row [0, 0, 0, 2]: rms 1
  expect_close(run_values("rmsnorm", R"({"eps": 0})", {t32({2, 4}, {1, 2, 3, 4, 0, 0, 0, 2}), t32({4}, {1, 1, 1, 1})}),
               {0.3651483717f, 0.7302967433f, 1.0954451150f, 1.4605934867f, 0, 0, 0, 2});
}

TEST(Rmsnorm, ScalesByGammaAndDefaultsEpsTo1e6) {
  // eps 1e-6 added to a mean square of 1e-6 halves it: x / sqrt(2e-6)
  expect_close(run_values("rmsnorm", "{}", {t32({1, 2}, {1e-3f, -1e-3f}), t32({2}, {2, 0.5f})}),
               {2 * 0.7071067812f, -0.5f * 0.7071067812f}, 1e-6, 1e-5);
}

TEST(Rmsnorm, WeightOffsetAddsToGamma) {
  // Gemma: gamma stored relative to 1
  expect_close(run_values("rmsnorm", R"({"eps": 0, "weightOffset": 1})", {t32({1, 2}, {3, 4}), t32({2}, {0, 1})}),
               {3 / 3.5355339059f, 2 * 4 / 3.5355339059f});
}

TEST(Rmsnorm, GroupSizeNormalisesEachGroupOnItsOwn) {
  // groups [1, 2] (rms 1.5811388) and [3, 4] (rms 3.5355339), gamma per group position
  expect_close(run_values("rmsnorm", R"({"eps": 0, "groupSize": 2})", {t32({1, 4}, {1, 2, 3, 4}), t32({2}, {1, 10})}),
               {0.6324555320f, 12.6491106407f, 0.8485281374f, 11.3137084990f});
}

TEST(Rmsnorm, RefusesBadShapesAndParams) {
  EXPECT_TRUE(mentions(run_error("rmsnorm", "{}", {t32({1, 4}, {1, 2, 3, 4}), t32({3}, {1, 1, 1})}), {"input gamma", "[3]", "[4]"}));
  EXPECT_TRUE(mentions(run_error("rmsnorm", R"({"groupSize": 3})", {t32({1, 4}, {1, 2, 3, 4}), t32({3}, {1, 1, 1})}),
                       {"groupSize", "4"}));
  // with groupSize, gamma has groupSize values, not C
  EXPECT_TRUE(mentions(run_error("rmsnorm", R"({"groupSize": 2})", {t32({1, 4}, {1, 2, 3, 4}), t32({4}, {1, 1, 1, 1})}),
                       {"input gamma", "groupSize"}));
  EXPECT_TRUE(mentions(run_error("rmsnorm", R"({"groupSize": 0})", {t32({1, 4}, {1, 2, 3, 4}), t32({4}, {1, 1, 1, 1})}),
                       {"groupSize"}));
  EXPECT_TRUE(mentions(run_error("rmsnorm", R"({"groupSize": 1.5})", {t32({1, 4}, {1, 2, 3, 4}), t32({4}, {1, 1, 1, 1})}),
                       {"groupSize"}));
  EXPECT_TRUE(mentions(check_error("rmsnorm", R"({"eps": -1})"), {"eps"}));
  EXPECT_EQ(check_error("rmsnorm", R"({"eps": 1e-5, "weightOffset": -1})"), "");
}

TEST(Rmsnorm, BindableParamsAreEpsAndWeightOffset) {
  const op_def* def = find_op_def("rmsnorm");
  ops::rmsnorm_params p;
  EXPECT_EQ(def->bindable(p, "eps"), &p.eps);
  EXPECT_EQ(def->bindable(p, "weightOffset"), &p.weight_offset);
  EXPECT_EQ(def->bindable(p, "groupSize"), nullptr);
}

TEST(Rmsnorm, Features) {
  EXPECT_TRUE(features_of("rmsnorm", R"({"eps": 1e-5})").empty());
  EXPECT_EQ(features_of("rmsnorm", R"({"weightOffset": 1})"), std::vector<std::string>{"rmsnorm.weightOffset"});
  EXPECT_EQ(features_of("rmsnorm", R"({"groupSize": 128})"), std::vector<std::string>{"rmsnorm.groupSize"});
}

TEST(Layernorm, NormalisesShiftsAndScales) {
  // [1, 2, 3, 4]: mean 2.5, variance 1.25 (biased), std 1.1180340
  expect_close(run_values("layernorm", R"({"eps": 0})",
                          {t32({1, 4}, {1, 2, 3, 4}), t32({4}, {1, 2, 1, 1}), t32({4}, {0, 0, 1, -1})}),
               {-1.3416407865f, -0.8944271910f, 1.4472135955f, 0.3416407865f});
}

TEST(Layernorm, DefaultEpsIs1e5) {
  // [1, -1]: variance 1; 1 / sqrt(1 + 1e-5)
  expect_close(run_values("layernorm", "{}", {t32({1, 2}, {1, -1}), t32({2}, {1, 1}), t32({2}, {0, 0})}),
               {0.9999950000f, -0.9999950000f}, 1e-7, 0);
}

TEST(Layernorm, RefusesBadGammaOrBeta) {
  EXPECT_TRUE(mentions(run_error("layernorm", "{}", {t32({1, 2}, {1, 2}), t32({3}, {1, 1, 1}), t32({2}, {0, 0})}), {"input gamma"}));
  EXPECT_TRUE(mentions(run_error("layernorm", "{}", {t32({1, 2}, {1, 2}), t32({2}, {1, 1}), t32({1, 2}, {0, 0})}), {"input beta"}));
  EXPECT_TRUE(mentions(check_error("layernorm", R"({"eps": -0.5})"), {"eps"}));
}

TEST(Layernorm, FeatureOnlyForANonDefaultEps) {
  EXPECT_TRUE(features_of("layernorm", "{}").empty());
  EXPECT_TRUE(features_of("layernorm", R"({"eps": 1e-5})").empty());
  EXPECT_EQ(features_of("layernorm", R"({"eps": 1e-12})"), std::vector<std::string>{"layernorm.eps"});
}

TEST(Softmax, RowsSumToOne) {
  expect_close(run_values("softmax", "{}", {t32({2, 3}, {1, 2, 3, 0, 0, 0})}),
               {0.0900305732f, 0.2447284711f, 0.6652409558f, 1 / 3.0f, 1 / 3.0f, 1 / 3.0f});
}

TEST(Softmax, SubtractsTheMaximumSoHugeLogitsWork) {
  expect_close(run_values("softmax", "{}", {t32({1, 2}, {1000, 1000})}), {0.5f, 0.5f});
  expect_close(run_values("softmax", "{}", {t32({1, 3}, {-inf, 0, -inf})}), {0, 1, 0});
}

TEST(CausalMask, MasksTheStrictUpperTriangleOfEveryBlock) {
  expect_close(run_values("causal_mask", "{}", {t32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})}), {1, -inf, 3, 4, 5, -inf, 7, 8});
  expect_close(run_values("causal_mask", "{}", {t32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9})}),
               {1, -inf, -inf, 4, 5, -inf, 7, 8, 9});
}

TEST(CausalMask, RefusesNonSquareBlocks) {
  EXPECT_TRUE(mentions(run_error("causal_mask", "{}", {t32({2, 3}, {1, 2, 3, 4, 5, 6})}), {"input a", "[2, 3]"}));
  EXPECT_TRUE(mentions(run_error("causal_mask", "{}", {t32({4}, {1, 2, 3, 4})}), {"input a"}));
}

}  // namespace
}  // namespace mpakt
