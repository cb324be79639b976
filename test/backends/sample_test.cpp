// sample: params and shape rule (runtime/ops/sample.cpp), the counter-based RNG
// (runtime/ops/sample_rng.hpp), the reference kernel (backends/cpu/ref/sample.cpp) and the
// fast kernel (backends/cpu/fast/sample.cpp), which must draw the reference's token.

#include "runtime/ops/sample_params.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "runtime/ops/sample_rng.hpp"
#include "test/support/levels.hpp"
#include "test/support/op_checks.hpp"

namespace mpakt {
namespace {

using test::check_error;
using test::mentions;
using test::random_f32;
using test::run_error;
using test::run_values;
using test::t32;

std::vector<std::string> features_of(std::string_view params, std::size_t n_inputs = 1) {
  std::vector<std::string> out;
  auto pm = parse_params_text(params);
  EXPECT_TRUE(pm.ok());
  find_op_def("sample")->features(*pm, n_inputs, out);
  return out;
}

float sample1(std::string_view params, std::vector<float> logits, std::vector<float> history = {}) {
  std::vector<tensor> in = {t32({std::int64_t(logits.size())}, logits)};
  if (!history.empty()) in.push_back(t32({std::int64_t(history.size())}, history));
  const auto out = run_values("sample", params, in);
  return out.size() == 1 ? out[0] : -1;
}

TEST(Sample, RngIsPinned) {
  // values from a Python transcription of the documented formula
  EXPECT_EQ(ops::sample_bits(0, 0), 0x48218226ff3cd4bfull);
  EXPECT_EQ(ops::sample_bits(42, 7), 0x5864fa25fd883a8aull);
  EXPECT_EQ(ops::sample_bits(2147483646, 123456), 0xfa6841ff557f95ccull);
  EXPECT_DOUBLE_EQ(ops::sample_uniform(0, 0), 0.28176129772258496);
  EXPECT_DOUBLE_EQ(ops::sample_uniform(0, 1), 0.572181483697937);
}

TEST(Sample, TemperatureZeroIsArgmaxWithLowestIndexTies) {
  EXPECT_EQ(sample1("{}", {0.1f, 3, -2, 3, 1}), 1);
  EXPECT_EQ(sample1(R"({"temperature": 0, "topK": 2, "topP": 0.1, "seed": 5})", {5, 4, 9, 1}), 2);
  const auto rows = run_values("sample", "{}", {t32({2, 3, 2}, {0, 1, 1, 0, 2, 2, 5, 4, -1, 0, 3, 3})});
  EXPECT_EQ(rows, (std::vector<float>{1, 0, 0, 0, 1, 0}));
}

TEST(Sample, TemperatureZeroAgreesWithArgmaxOnNan) {
  // OP-SAMPLE / OP-ARGMAX: the first NaN counts as the maximum for both ops, so a greedy
  // sample step and an argmax step choose the same token whatever the logits hold.
  const float nan = std::nanf("");
  const std::vector<std::vector<float>> rows = {
      {1, nan, 5, nan}, {nan, 9, 2}, {3, 7, nan}, {2, 8, -1}, {nan, nan}};
  for (const auto& row : rows) {
    const tensor t = t32({std::int64_t(row.size())}, row);
    const auto arg = run_values("argmax", "{}", {t});
    ASSERT_EQ(arg.size(), 1u);
    EXPECT_EQ(sample1("{}", row), arg[0]);
    // a repetition penalty leaves NaN NaN: still the same choice
    EXPECT_EQ(sample1(R"({"repetitionPenalty": 1.3})", row, {0, 1}), arg[0]);
  }
  EXPECT_EQ(sample1("{}", {1, nan, 5, nan}), 1);
}

TEST(Sample, OutputDropsTheVocabularyAxis) {
  auto one = test::run_op("sample", "{}", {random_f32({7}, 1)});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->shape(), shape_t{1});
  auto many = test::run_op("sample", "{}", {random_f32({2, 3, 7}, 2)});
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(many->shape(), (shape_t{2, 3}));
}

TEST(Sample, DrawsTheFirstTokenWhoseCumulativeProbabilityExceedsU) {
  // four equal logits: the draw for counter c is floor(4 * u(seed, c))
  for (int step = 0; step < 20; ++step) {
    const float got = sample1(R"({"temperature": 1, "seed": 9, "step": )" + std::to_string(step) + "}", {2, 2, 2, 2});
    EXPECT_EQ(got, std::floor(4 * ops::sample_uniform(9, std::uint64_t(step)))) << step;
  }
}

TEST(Sample, SameSeedAndStepGiveTheSameToken) {
  const tensor logits = random_f32({50}, 3);
  std::set<float> seen;
  for (int step = 0; step < 30; ++step) {
    const std::string p = R"({"temperature": 1.5, "seed": 77, "step": )" + std::to_string(step) + "}";
    const auto a = run_values("sample", p, {logits});
    EXPECT_EQ(a, run_values("sample", p, {logits}));
    seen.insert(a[0]);
  }
  EXPECT_GT(seen.size(), 5u);  // the steps really draw different numbers
  EXPECT_NE(run_values("sample", R"({"temperature": 1.5, "seed": 1})", {random_f32({1000}, 4)}),
            run_values("sample", R"({"temperature": 1.5, "seed": 2})", {random_f32({1000}, 4)}));
}

TEST(Sample, RowRUsesCounterStepPlusR) {
  const tensor logits = random_f32({3, 40}, 5);
  const auto rows = run_values("sample", R"({"temperature": 2, "seed": 3, "step": 10})", {logits});
  ASSERT_EQ(rows.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    const tensor row = t32({40}, std::vector<float>(logits.f32() + r * 40, logits.f32() + (r + 1) * 40));
    EXPECT_EQ(rows[std::size_t(r)], run_values("sample", R"({"temperature": 2, "seed": 3, "step": )" + std::to_string(10 + r) + "}", {row})[0]);
  }
}

TEST(Sample, TopKOneAndTinyTopPAreArgmax) {
  const tensor logits = random_f32({64}, 6);
  const float best = run_values("sample", "{}", {logits})[0];
  for (int step = 0; step < 10; ++step) {
    const std::string s = std::to_string(step);
    EXPECT_EQ(run_values("sample", R"({"temperature": 5, "topK": 1, "step": )" + s + "}", {logits})[0], best);
    EXPECT_EQ(run_values("sample", R"({"temperature": 5, "topP": 0.0001, "step": )" + s + "}", {logits})[0], best);
  }
}

TEST(Sample, TopKKeepsTiesAndTopPKeepsTheSmallestSufficientSet) {
  // topK 2 over [5, 5, 5, 0]: the k-th largest is 5, so all three 5s stay
  std::set<float> seen;
  for (int step = 0; step < 200; ++step)
    seen.insert(sample1(R"({"temperature": 1, "topK": 2, "step": )" + std::to_string(step) + "}", {5, 5, 5, 0}));
  EXPECT_EQ(seen, (std::set<float>{0, 1, 2}));
  // probabilities 0.5, 0.3, 0.15, 0.05: topP 0.7 keeps the first two (ascending cumulative
  // 0.05, 0.2, 0.5 <= 0.3 drop tokens 3 and 2)
  const std::vector<float> lp = {float(std::log(0.5)), float(std::log(0.3)), float(std::log(0.15)), float(std::log(0.05))};
  seen.clear();
  for (int step = 0; step < 200; ++step) seen.insert(sample1(R"({"temperature": 1, "topP": 0.7, "step": )" + std::to_string(step) + "}", lp));
  EXPECT_EQ(seen, (std::set<float>{0, 1}));
}

TEST(Sample, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  // token 0 at 3 becomes 1.5 (< 2): token 1 wins
  EXPECT_EQ(sample1(R"({"repetitionPenalty": 2})", {3, 2, -5}, {0}), 1);
  // token 1 at -1 becomes -2 (< -1.5): token 0 wins
  EXPECT_EQ(sample1(R"({"repetitionPenalty": 2})", {-1.5f, -1, -5}, {1}), 0);
  // distinct ids are penalised once: 3 / 1.2 = 2.5 > 2.4 even with 0 repeated
  EXPECT_EQ(sample1(R"({"repetitionPenalty": 1.2})", {3, 2.4f}, {0, 0, 0}), 0);
}

TEST(Sample, PresencePenaltySubtractsOncePerDistinctId) {
  EXPECT_EQ(sample1(R"({"presencePenalty": 0.5})", {3, 2.6f}, {0, 0, 0}), 1);
  EXPECT_EQ(sample1(R"({"presencePenalty": 0.3})", {3, 2.6f}, {0, 0, 0}), 0);
}

TEST(Sample, FrequencyPenaltySubtractsOncePerOccurrence) {
  // OpenAI's mu[j] - c[j] * frequency - (c[j] > 0) * presence: id 0 occurs three times
  EXPECT_EQ(sample1(R"({"frequencyPenalty": 0.2})", {3, 2.5f}, {0, 0, 0}), 1);  // 3 - 0.6 = 2.4
  EXPECT_EQ(sample1(R"({"frequencyPenalty": 0.1})", {3, 2.5f}, {0, 0, 0}), 0);  // 3 - 0.3 = 2.7
  // with presence: 3 - 0.3 - 0.15 = 2.55 > 2.5 keeps 0; one more occurrence tips it
  EXPECT_EQ(sample1(R"({"frequencyPenalty": 0.1, "presencePenalty": 0.15})", {3, 2.5f}, {0, 0, 0}), 0);
  EXPECT_EQ(sample1(R"({"frequencyPenalty": 0.1, "presencePenalty": 0.15})", {3, 2.5f}, {0, 0, 0, 0}), 1);
  // after the repetition penalty: 3 / 1.2 - 0.1 = 2.4 < 2.41 (before it, (3 - 0.1) / 1.2 = 2.417 would win)
  EXPECT_EQ(sample1(R"({"repetitionPenalty": 1.2, "frequencyPenalty": 0.1})", {3, 2.41f}, {0}), 1);
}

TEST(Sample, PenaltyStartLeavesEarlierRowsOut) {
  // rows 0..4 hold ids 0..4; logits favour 0 > 1 > ...; only rows from penaltyStart count
  const std::vector<float> logits = {5, 4, 3, 2, 1};
  const std::vector<float> history = {0, 1, 2, 3, 4};
  EXPECT_EQ(sample1(R"({"presencePenalty": 10, "penaltyEnd": 3, "penaltyStart": 1})", logits, history), 0);  // rows 1, 2
  EXPECT_EQ(sample1(R"({"presencePenalty": 10, "penaltyEnd": 1, "penaltyStart": 1})", logits, history), 0);  // none
  EXPECT_EQ(sample1(R"({"frequencyPenalty": 10, "penaltyStart": 1, "penaltyEnd": 2})", logits, history), 0);  // row 1
  EXPECT_EQ(sample1(R"({"frequencyPenalty": 10, "penaltyStart": 0, "penaltyEnd": 2})", logits, history), 2);  // rows 0, 1
}

TEST(Sample, PenaltiesNeedAHistoryAndSkipEmptySlots) {
  EXPECT_EQ(sample1(R"({"repetitionPenalty": 10, "presencePenalty": 10})", {3, 2}), 0);
  EXPECT_EQ(sample1(R"({"repetitionPenalty": 10})", {3, 2}, {-1, -1, 7, 2.5f}), 0);  // empty, out of vocab, not an id
  const auto out = run_values("sample", R"({"presencePenalty": 5})", {t32({2}, {3, 2}), t32({2, 1}, {-1, 0})});  // [N, 1] history
  EXPECT_EQ(out, std::vector<float>{1});
}

TEST(Sample, WindowAndEndSelectTheHistoryRows) {
  // history rows: 0 1 2 3 4 -> ids 0 1 2 3 4; logits favour 0 > 1 > 2 > 3 > 4 by 1 each
  const std::vector<float> logits = {5, 4, 3, 2, 1};
  const std::vector<float> history = {0, 1, 2, 3, 4};
  const std::string heavy = R"("presencePenalty": 10)";
  EXPECT_EQ(sample1("{" + heavy + "}", logits, history), 0);  // all penalised alike: order unchanged
  EXPECT_EQ(sample1("{" + heavy + R"(, "penaltyEnd": 1})", logits, history), 1);    // only row 0
  EXPECT_EQ(sample1("{" + heavy + R"(, "penaltyEnd": 3})", logits, history), 3);    // rows 0..2
  EXPECT_EQ(sample1("{" + heavy + R"(, "penaltyWindow": 2})", logits, history), 0);  // rows 3, 4
  EXPECT_EQ(sample1("{" + heavy + R"(, "penaltyEnd": 3, "penaltyWindow": 1})", logits, history), 0);  // row 2
  EXPECT_EQ(sample1("{" + heavy + R"(, "penaltyEnd": 2, "penaltyWindow": 1})", logits, history), 0);  // row 1
  EXPECT_EQ(sample1("{" + heavy + R"(, "penaltyEnd": 1, "penaltyWindow": 1})", logits, history), 1);  // row 0
  EXPECT_EQ(sample1("{" + heavy + R"(, "penaltyEnd": 0})", logits, history), 0);    // nothing
}

TEST(Sample, VerifyRowsSeeOneMoreHistoryRowEach) {
  // row r penalises history rows [0, penaltyEnd + r): row 0 sees id 0, row 1 also id 1
  const auto out = run_values("sample", R"({"presencePenalty": 10, "penaltyEnd": 1})",
                              {t32({2, 3}, {5, 4, 3, 5, 4, 3}), t32({3}, {0, 1, 2})});
  EXPECT_EQ(out, (std::vector<float>{1, 2}));
}

TEST(Sample, ChecksItsParams) {
  EXPECT_TRUE(mentions(check_error("sample", R"({"temperature": -1})"), {"temperature"}));
  EXPECT_TRUE(mentions(check_error("sample", R"({"topK": 2.5})"), {"topK"}));
  EXPECT_TRUE(mentions(check_error("sample", R"({"topP": 1.5})"), {"topP"}));
  EXPECT_TRUE(mentions(check_error("sample", R"({"seed": -1})"), {"seed"}));
  EXPECT_TRUE(mentions(check_error("sample", R"({"seed": 0.5})"), {"seed"}));
  EXPECT_TRUE(mentions(check_error("sample", R"({"step": 1.5})"), {"step"}));
  EXPECT_TRUE(mentions(check_error("sample", R"({"repetitionPenalty": 0})"), {"repetitionPenalty"}));
  EXPECT_TRUE(mentions(check_error("sample", R"({"penaltyWindow": -2})"), {"penaltyWindow"}));
  EXPECT_TRUE(mentions(check_error("sample", R"({"penaltyEnd": 3.5})"), {"penaltyEnd"}));
  EXPECT_TRUE(mentions(check_error("sample", R"({"penaltyStart": -1})"), {"penaltyStart"}));
  EXPECT_EQ(check_error("sample", R"({"temperature": 0.7, "topK": 40, "topP": 0.9, "seed": 1234, "step": 41,
      "repetitionPenalty": 1.1, "presencePenalty": -0.5, "penaltyWindow": 64, "penaltyEnd": 42})"), "");
}

TEST(Sample, EveryParamIsBindable) {
  auto pm = parse_params_text("{}");
  const op_def* def = find_op_def("sample");
  auto p = def->parse(*pm);
  ASSERT_TRUE(p.ok());
  for (const char* name : {"temperature", "topK", "topP", "seed", "step", "repetitionPenalty", "presencePenalty",
                           "frequencyPenalty", "penaltyWindow", "penaltyEnd", "penaltyStart"})
    EXPECT_NE(def->bindable(**p, name), nullptr) << name;
  EXPECT_EQ(def->bindable(**p, "logits"), nullptr);
}

TEST(Sample, RefusesBadShapesNamingTheInput) {
  EXPECT_TRUE(mentions(run_error("sample", "{}", {random_f32({2, 5}, 1), random_f32({2, 2}, 2)}), {"input history", "[2, 2]"}));
  EXPECT_TRUE(mentions(run_error("sample", "{}", {t32({2, 0}, {})}), {"input logits", "[2, 0]"}));
}

TEST(Sample, ReportsThePenaltyFeature) {
  EXPECT_TRUE(features_of(R"({"temperature": 1, "topK": 5, "topP": 0.5, "seed": 1, "step": 2})").empty());
  EXPECT_EQ(features_of("{}", 2), std::vector<std::string>{"sample.penalty"});
  for (const char* p : {R"({"repetitionPenalty": 1.1})", R"({"presencePenalty": 1})", R"({"penaltyWindow": 4})", R"({"penaltyEnd": 4})",
                        R"({"frequencyPenalty": 0.5})", R"({"penaltyStart": 3})"})
    EXPECT_EQ(features_of(p), std::vector<std::string>{"sample.penalty"}) << p;
}

/// OP-SAMPLE: the fast kernel draws exactly the reference's token — its radix order of the
/// kept logits, its reused exponentials and its early end of topP's removals change nothing —
/// over vocabularies up to SmolLM2's, every sampling setting alone and together, penalties,
/// rows with ties, zeros of both signs, −inf and +inf, logits that round to one float after
/// the temperature, and a NaN (which the fast kernel hands to the reference).
TEST(Sample, FastKernelDrawsTheReferencesToken) {
  const auto fast = test::fast_kernels_on_this_cpu("sample");
  ASSERT_EQ(fast.size(), 1u);
  const char* settings[] = {
      R"({})",
      R"({"temperature": 0.7})",
      R"({"temperature": 1, "topP": 0.9})",
      R"({"temperature": 0.7, "topP": 0.5, "seed": 3})",
      R"({"temperature": 2.5, "topP": 0.999, "seed": 9})",
      R"({"temperature": 0.3, "topP": 0.05})",
      R"({"temperature": 1.3, "topK": 40})",
      R"({"temperature": 0.7, "topK": 5, "topP": 0.8, "seed": 11})",
      R"({"temperature": 0.7, "topK": 1})",
      R"({"temperature": 0.9, "topP": 0.9, "repetitionPenalty": 1.3, "presencePenalty": 0.5, "frequencyPenalty": 0.25})",
  };
  int compared = 0;
  for (std::int64_t vocab : {1, 2, 7, 100, 5000, 49152}) {
    for (int variant = 0; variant < 4; ++variant) {
      const std::int64_t rows = variant == 3 ? 3 : 1;
      tensor logits = random_f32({rows, vocab}, unsigned(vocab * 7 + variant), 4.0f);
      float* v = logits.f32();
      if (variant == 1 && vocab >= 7) {  // ties, zeros of both signs, −inf and +inf
        for (std::int64_t i = 0; i < vocab; i += 3) v[i] = v[0];
        v[1] = -0.0f, v[2] = 0.0f, v[4] = -INFINITY;
        if (vocab >= 100) v[vocab - 1] = -INFINITY, v[50] = 0.0f, v[51] = -0.0f;
      }
      if (variant == 2) {  // neighbouring floats: after the temperature many round together
        for (std::int64_t i = 0; i < vocab; ++i) v[i] = std::nextafter(1.5f, 2.0f * float(i % 2)) + float(i % 5) * 1e-7f;
      }
      std::vector<tensor> in = {logits};
      tensor history = t32({8}, {3, 1, 4, 1, 5, 9, 2, 6});
      for (const char* set : settings) {
        const bool penalised = std::string_view(set).find("Penalty") != std::string_view::npos;
        std::vector<tensor> inputs = in;
        if (penalised) inputs.push_back(history);
        for (int step : {0, 17, 123}) {
          std::string params = set;
          params.insert(params.size() - 1, std::string(params.size() > 2 ? ", " : "") + "\"step\": " + std::to_string(step));
          SCOPED_TRACE("vocab " + std::to_string(vocab) + " variant " + std::to_string(variant) + " " + params);
          EXPECT_EQ(run_values("sample", params, inputs, fast[0].fn), run_values("sample", params, inputs));
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 6 * 4 * 10 * 3);
  // topP's cut inside a run of equal logits: which of them go (the higher ids first) decides
  // the draws below
  const tensor ties = t32({1, 9}, {1, 1, 1, 5, 1, 1, 1, 1, -0.5f});
  for (int step = 0; step < 200; ++step) {
    const std::string params = R"({"temperature": 1, "topP": 0.94, "step": )" + std::to_string(step) + "}";
    EXPECT_EQ(run_values("sample", params, {ties}, fast[0].fn), run_values("sample", params, {ties})) << params;
  }
  // a NaN among the logits: the reference's choice, whatever it is
  tensor with_nan = random_f32({1, 300}, 5, 3.0f);
  with_nan.f32()[40] = NAN;
  for (const char* set : {R"({"temperature": 0.7, "topP": 0.9})", R"({"temperature": 1, "topK": 3})"})
    EXPECT_EQ(run_values("sample", set, {with_nan}, fast[0].fn), run_values("sample", set, {with_nan})) << set;
}

}  // namespace
}  // namespace mpakt
