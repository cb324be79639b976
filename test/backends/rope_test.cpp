// rope: params and shape rule (runtime/ops/rope.cpp) and the reference kernel
// (backends/cpu/ref/rope.cpp). Expected values are worked out by hand in the comments.

#include "runtime/ops/rope_params.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numbers>

#include "test/support/op_checks.hpp"

namespace mpakt {
namespace {

using test::check_error;
using test::expect_close;
using test::mentions;
using test::random_f32;
using test::run_error;
using test::run_values;
using test::t32;

std::vector<std::string> features_of(std::string_view params) {
  std::vector<std::string> out;
  auto pm = parse_params_text(params);
  EXPECT_TRUE(pm.ok());
  find_op_def("rope")->features(*pm, 1, out);
  return out;
}

// One head of width 4 with base 10000: inverse frequencies 1 and 0.01.
const std::vector<float> head4 = {1, 2, 3, 4};

TEST(Rope, PositionZeroIsIdentity) {
  const tensor x = random_f32({1, 32}, 1);
  expect_close(run_values("rope", R"({"headDim": 16})", {x}), test::values_of(x), 0, 0);
}

TEST(Rope, HalfSplitRotatesChannelIWithIPlusHalf) {
  // offset 1: pair (0, 2) turns by 1 rad, pair (1, 3) by 0.01 rad
  const double c1 = std::cos(1.0), s1 = std::sin(1.0), c2 = std::cos(0.01), s2 = std::sin(0.01);
  expect_close(run_values("rope", R"({"headDim": 4, "offset": 1})", {t32({1, 4}, head4)}),
               {float(1 * c1 - 3 * s1), float(2 * c2 - 4 * s2), float(3 * c1 + 1 * s1), float(4 * c2 + 2 * s2)}, 1e-6, 1e-6);
}

TEST(Rope, InterleavedRotatesAdjacentPairs) {
  // pair (0, 1) turns by 1 rad, pair (2, 3) by 0.01 rad
  const double c1 = std::cos(1.0), s1 = std::sin(1.0), c2 = std::cos(0.01), s2 = std::sin(0.01);
  const auto got = run_values("rope", R"({"headDim": 4, "offset": 1, "interleaved": true})", {t32({1, 4}, head4)});
  expect_close(got, {float(1 * c1 - 2 * s1), float(2 * c1 + 1 * s1), float(3 * c2 - 4 * s2), float(4 * c2 + 3 * s2)}, 1e-6, 1e-6);
  EXPECT_NE(got, run_values("rope", R"({"headDim": 4, "offset": 1})", {t32({1, 4}, head4)}));
}

TEST(Rope, EveryHeadRotatesAlike) {
  // two heads with the same values come out the same
  const auto got = run_values("rope", R"({"headDim": 4, "offset": 3})", {t32({1, 8}, {1, 2, 3, 4, 1, 2, 3, 4})});
  ASSERT_EQ(got.size(), 8u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[std::size_t(i)], got[std::size_t(i + 4)]);
}

TEST(Rope, RotaryDimLeavesTheRestOfEachHeadAlone) {
  // rotaryDim 2: one pair (0, 1) with inverse frequency 1; channels 2..5 pass through
  const double c = std::cos(2.0), s = std::sin(2.0);
  expect_close(run_values("rope", R"({"headDim": 6, "rotaryDim": 2, "offset": 2})", {t32({1, 6}, {1, 2, 3, 4, 5, 6})}),
               {float(1 * c - 2 * s), float(2 * c + 1 * s), 3, 4, 5, 6}, 1e-6, 1e-6);
}

TEST(Rope, RowsSitAtConsecutivePositionsFromOffset) {
  // a prefill of 4 rows equals rows 0..1 at offset 0 and rows 2..3 at offset 2 (decode split)
  const tensor x = random_f32({4, 32}, 2);
  const auto all = run_values("rope", R"({"headDim": 8, "offset": 5})", {x});
  auto tail_in = t32({2, 32}, std::vector<float>(x.f32() + 64, x.f32() + 128));
  const auto tail = run_values("rope", R"({"headDim": 8, "offset": 7})", {tail_in});
  ASSERT_EQ(all.size(), 128u);
  expect_close(std::vector<float>(all.begin() + 64, all.end()), tail, 0, 0);
}

TEST(Rope, MlaLayoutsDifferEvenAtOneToken) {
  // OP-ROPE-04: a decode step (T = 1) does not hide a wrong layout. Two heads of width 4 at
  // position 5: roped as [1, 2·4] both heads sit at 5; folded to [2, 4] the second head sits
  // at 6. And the interleaved pairing rotates other channel pairs than the half split.
  const std::vector<float> q = {1, 2, 3, 4, 5, 6, 7, 8};
  const auto flat = run_values("rope", R"({"headDim": 4, "offset": 5})", {t32({1, 8}, q)});
  const auto folded = run_values("rope", R"({"headDim": 4, "offset": 5})", {t32({2, 4}, q)});
  ASSERT_EQ(flat.size(), 8u);
  ASSERT_EQ(folded.size(), 8u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(flat[std::size_t(i)], folded[std::size_t(i)]) << i;  // head 0: both at 5
  double apart = 0;
  for (int i = 4; i < 8; ++i) apart = std::max(apart, double(std::fabs(flat[std::size_t(i)] - folded[std::size_t(i)])));
  EXPECT_GT(apart, 0.1);  // head 1: position 5 against 6
  const auto interleaved = run_values("rope", R"({"headDim": 4, "offset": 5, "interleaved": true})", {t32({1, 8}, q)});
  double pairing = 0;
  for (int i = 0; i < 8; ++i) pairing = std::max(pairing, double(std::fabs(flat[std::size_t(i)] - interleaved[std::size_t(i)])));
  EXPECT_GT(pairing, 0.1);
}

TEST(Rope, ScoresDependOnRelativePositionOnly) {
  // q at m, k at n: q.k after rotation depends on m - n
  const tensor q = random_f32({1, 16}, 3), k = random_f32({1, 16}, 4);
  const auto dot_at = [&](int m, int n) {
    const auto a = run_values("rope", R"({"headDim": 16, "offset": )" + std::to_string(m) + "}", {q});
    const auto b = run_values("rope", R"({"headDim": 16, "offset": )" + std::to_string(n) + "}", {k});
    double d = 0;
    for (std::size_t i = 0; i < a.size(); ++i) d += double(a[i]) * b[i];
    return d;
  };
  EXPECT_NEAR(dot_at(7, 3), dot_at(14, 10), 1e-5);
  EXPECT_GT(std::fabs(dot_at(7, 3) - dot_at(7, 6)), 1e-3);
}

TEST(Rope, LinearScalingDividesTheFrequencies) {
  const tensor x = random_f32({3, 16}, 5);
  expect_close(run_values("rope", R"({"headDim": 8, "offset": 9, "scaling": {"rope_type": "linear", "factor": 4}})", {x}),
               run_values("rope", R"({"headDim": 8, "offset": 9, "invFreq": [0.25, 0.025, 0.0025, 0.00025]})", {x}), 1e-6, 1e-5);
}

TEST(Rope, Llama3KeepsHighFrequenciesSmoothsMiddleAndDividesLow) {
  // inv_freq 1, 0.1, 0.01, 0.001 (wavelengths 6.3, 62.8, 628, 6283) with original context
  // 200, low 1, high 4: wavelengths below 50 stay, above 200 are divided by 8, and 62.8 is
  // smoothed with s = (200/62.83 - 1)/3 = 0.727696: (1-s)*0.1/8 + s*0.1 = 0.0761737.
  const tensor x = random_f32({2, 8}, 6);
  const double s = (200 / (2 * std::numbers::pi / 0.1) - 1) / 3;
  char middle[32];
  std::snprintf(middle, sizeof middle, "%.9g", (1 - s) * 0.1 / 8 + s * 0.1);
  const std::string inv = std::string("[1, ") + middle + ", 0.00125, 0.000125]";
  expect_close(run_values("rope", R"({"headDim": 8, "offset": 30, "scaling": {"rope_type": "llama3", "factor": 8,
                  "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 200}})", {x}),
               run_values("rope", R"({"headDim": 8, "offset": 30, "invFreq": )" + inv + "}", {x}), 1e-5, 1e-5);
}

TEST(Rope, DynamicGrowsTheBaseOnlyPastTheMaximum) {
  // headDim 4, factor 2, max 4: seq_len 5 gives base 10000 * (2*5/4 - 1)^(4/2) = 22500
  const tensor x = random_f32({1, 8}, 7);
  const std::string dyn = R"("scaling": {"rope_type": "dynamic", "factor": 2, "max_position_embeddings": 4})";
  expect_close(run_values("rope", R"({"headDim": 4, "offset": 4, )" + dyn + "}", {x}),
               run_values("rope", R"({"headDim": 4, "offset": 4, "base": 22500})", {x}), 1e-6, 1e-5);
  expect_close(run_values("rope", R"({"headDim": 4, "offset": 3, )" + dyn + "}", {x}),
               run_values("rope", R"({"headDim": 4, "offset": 3})", {x}), 0, 0);
}

TEST(Rope, YarnAndLongropeScaleCosAndSinByTheirAttentionFactor) {
  // at position 0 the rotation is the identity, so rotated channels come out times the factor
  const tensor x = t32({1, 4}, {1, 2, 3, 4});
  const float yarn = float(0.1 * std::log(4.0) + 1);  // get_mscale(4)
  expect_close(run_values("rope", R"({"headDim": 4, "scaling": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32}})", {x}),
               {yarn, 2 * yarn, 3 * yarn, 4 * yarn}, 1e-6, 1e-6);
  const float lr = float(std::sqrt(1 + std::log(4.0) / std::log(32.0)));  // max 128 / original 32
  expect_close(run_values("rope", R"({"headDim": 4, "rotaryDim": 2, "scaling": {"rope_type": "longrope", "short_factor": [1],
                  "long_factor": [2], "original_max_position_embeddings": 32, "max_position_embeddings": 128}})", {x}),
               {lr, 2 * lr, 3, 4}, 1e-6, 1e-6);
  // attentionFactor, when given, wins over the derived one
  expect_close(run_values("rope", R"({"headDim": 4, "attentionFactor": 0.5, "scaling": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32}})", {x}),
               {0.5f, 1, 1.5f, 2}, 1e-6, 1e-6);
}

TEST(Rope, LongropeSwitchesToLongFactorsPastTheOriginalContext) {
  // inv_freq = 1 / (ext * base^(2i/d)); headDim 4: base terms 1 and 100
  const tensor x = random_f32({2, 4}, 8);
  const std::string obj = R"("scaling": {"rope_type": "longrope", "short_factor": [1, 2], "long_factor": [4, 8],
      "original_max_position_embeddings": 8, "attention_factor": 1})";
  expect_close(run_values("rope", R"({"headDim": 4, "offset": 6, )" + obj + "}", {x}),  // seq_len 8: short
               run_values("rope", R"({"headDim": 4, "offset": 6, "invFreq": [1, 0.005]})", {x}), 1e-6, 1e-5);
  expect_close(run_values("rope", R"({"headDim": 4, "offset": 7, )" + obj + "}", {x}),  // seq_len 9: long
               run_values("rope", R"({"headDim": 4, "offset": 7, "invFreq": [0.25, 0.00125]})", {x}), 1e-6, 1e-5);
}

TEST(Rope, PartialRotaryFactorInTheScalingObjectSetsRotaryDim) {
  const tensor x = random_f32({2, 16}, 13);
  expect_close(run_values("rope", R"({"headDim": 8, "offset": 3, "scaling": {"rope_type": "default", "partial_rotary_factor": 0.5}})", {x}),
               run_values("rope", R"({"headDim": 8, "offset": 3, "rotaryDim": 4})", {x}), 0, 0);
}

TEST(Rope, RopeThetaInTheScalingObjectOverridesBase) {
  const tensor x = random_f32({2, 8}, 9);
  expect_close(run_values("rope", R"({"headDim": 8, "offset": 3, "base": 10000, "scaling": {"rope_type": "default", "rope_theta": 500}})", {x}),
               run_values("rope", R"({"headDim": 8, "offset": 3, "base": 500})", {x}), 0, 0);
}

TEST(Rope, RefusesBadParams) {
  const tensor x = random_f32({1, 16}, 10);
  EXPECT_TRUE(mentions(run_error("rope", R"({"headDim": 8, "rotaryDim": 3})", {x}), {"rotaryDim", "even"}));
  EXPECT_TRUE(mentions(run_error("rope", R"({"headDim": 8, "rotaryDim": 10})", {x}), {"rotaryDim", "headDim"}));
  EXPECT_TRUE(mentions(run_error("rope", R"({"headDim": 5})", {random_f32({1, 10}, 12)}), {"headDim", "even"}));
  EXPECT_TRUE(mentions(run_error("rope", R"({"headDim": 8, "rotaryDim": 6, "scaling": {"partial_rotary_factor": 0.5}})", {x}),
                       {"rotaryDim", "partial_rotary_factor", "4"}));
  EXPECT_TRUE(mentions(run_error("rope", R"({"headDim": 8, "invFreq": [1, 2]})", {x}), {"invFreq", "4"}));
  EXPECT_TRUE(mentions(run_error("rope", R"({"headDim": 8, "scaling": {"rope_type": "ntk"}})", {x}), {"scaling", "ntk"}));
  EXPECT_TRUE(mentions(run_error("rope", R"({"headDim": 8, "scaling": {"rope_type": "llama3", "factor": 8,
      "high_freq_factor": 4, "original_max_position_embeddings": 8192}})", {x}), {"scaling", "low_freq_factor"}));
  EXPECT_TRUE(mentions(run_error("rope", R"({"headDim": 8, "scaling": {"rope_type": "longrope", "short_factor": [1, 1, 1, 1],
      "long_factor": [1, 1, 1, 1], "original_max_position_embeddings": 32}})", {x}), {"max_position_embeddings"}));
  EXPECT_TRUE(mentions(run_error("rope", R"({"headDim": 8, "scaling": {"rope_type": "dynamic", "factor": 2}})", {x}),
                       {"scaling", "max_position_embeddings"}));
  EXPECT_TRUE(mentions(run_error("rope", R"({"headDim": 8, "scaling": {"rope_type": "linear", "factor": -2}})", {x}),
                       {"scaling.factor"}));
  EXPECT_TRUE(mentions(check_error("rope", R"({"headDim": 8, "offset": -1})"), {"offset"}));
  EXPECT_TRUE(mentions(check_error("rope", R"({"headDim": 8, "offset": 2.5})"), {"offset"}));
  EXPECT_TRUE(mentions(check_error("rope", R"({"headDim": 8, "base": 0})"), {"base"}));
  EXPECT_EQ(check_error("rope", R"({"headDim": 8, "offset": 41, "base": 1e6})"), "");
}

TEST(Rope, BoundParamsParseAsZeroWithoutComplaint) {
  // validation passes a bound value as 0: parse must accept it, check decides later
  EXPECT_EQ(test::check_error("rope", R"({"headDim": 8, "offset": 0, "base": 10000, "attentionFactor": 1})"), "");
  auto pm = parse_params_text(R"({"headDim": 8, "base": 0, "attentionFactor": 0})");
  ASSERT_TRUE(pm.ok());
  auto p = find_op_def("rope")->parse(*pm);
  ASSERT_TRUE(p.ok());
  const op_def* def = find_op_def("rope");
  EXPECT_NE(def->bindable(**p, "offset"), nullptr);
  EXPECT_NE(def->bindable(**p, "base"), nullptr);
  EXPECT_NE(def->bindable(**p, "attentionFactor"), nullptr);
  EXPECT_EQ(def->bindable(**p, "headDim"), nullptr);
  EXPECT_EQ(def->bindable(**p, "rotaryDim"), nullptr);
  *def->bindable(**p, "offset") = 12;
  EXPECT_EQ(static_cast<const ops::rope_params&>(**p).offset, 12);
}

TEST(Rope, RefusesBadShapesNamingTheInput) {
  EXPECT_TRUE(mentions(run_error("rope", R"({"headDim": 16})", {random_f32({2, 24}, 11)}), {"input x", "[2, 24]", "16"}));
}

TEST(Rope, ReportsFeatures) {
  EXPECT_TRUE(features_of(R"({"headDim": 8})").empty());
  EXPECT_TRUE(features_of(R"({"headDim": 8, "interleaved": false})").empty());
  EXPECT_EQ(features_of(R"({"headDim": 8, "interleaved": true})"), std::vector<std::string>{"rope.interleaved"});
  EXPECT_EQ(features_of(R"({"headDim": 8, "rotaryDim": 4})"), std::vector<std::string>{"rope.rotaryDim"});
  EXPECT_EQ(features_of(R"({"headDim": 8, "invFreq": [1, 1, 1, 1]})"), std::vector<std::string>{"rope.scaling"});
  EXPECT_EQ(features_of(R"({"headDim": 8, "attentionFactor": 2})"), std::vector<std::string>{"rope.scaling"});
  EXPECT_EQ(features_of(R"({"headDim": 8, "scaling": {"rope_type": "linear", "factor": 2}})"),
            std::vector<std::string>{"rope.scaling"});
}

}  // namespace
}  // namespace mpakt
