// moe: params and shape rule (runtime/ops/moe.cpp) and the reference kernel
// (backends/cpu/ref/moe.cpp). Routing cases use 1x1 experts whose down weights are powers
// of ten, so the output shows which experts were picked and with what weight.

#include "runtime/ops/moe_params.hpp"

#include <gtest/gtest.h>

#include <cmath>

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

/// Expert weights as separate tensors: gate_e [I, C], up_e [I, C], down_e [C, I].
struct expert_set {
  std::vector<tensor> gate, up, down;
};

expert_set random_experts(int e, int inter, int c, unsigned seed) {
  expert_set s;
  for (int i = 0; i < e; ++i) {
    s.gate.push_back(random_f32({inter, c}, seed + 3 * unsigned(i)));
    s.up.push_back(random_f32({inter, c}, seed + 3 * unsigned(i) + 1));
    s.down.push_back(random_f32({c, inter}, seed + 3 * unsigned(i) + 2));
  }
  return s;
}

/// Stacks same-shaped 2-D tensors into [n, rows, cols].
tensor stack(const std::vector<tensor>& parts) {
  std::vector<float> v;
  for (const auto& p : parts) v.insert(v.end(), p.f32(), p.f32() + p.numel());
  return t32({std::int64_t(parts.size()), parts[0].shape()[0], parts[0].shape()[1]}, v);
}

/// The expert inputs in the given layout, after x, logits and the optional bias.
std::vector<tensor> moe_inputs(const expert_set& s, std::string_view layout, std::vector<tensor> head) {
  if (layout == "separate") {
    for (std::size_t e = 0; e < s.gate.size(); ++e) {
      head.push_back(s.gate[e]);
      head.push_back(s.up[e]);
      head.push_back(s.down[e]);
    }
  } else if (layout == "stacked") {
    head.push_back(stack(s.gate));
    head.push_back(stack(s.up));
    head.push_back(stack(s.down));
  } else {  // fused: gate_up [E, 2I, C], gate first
    std::vector<tensor> gate_up;
    for (std::size_t e = 0; e < s.gate.size(); ++e) {
      std::vector<float> v(s.gate[e].f32(), s.gate[e].f32() + s.gate[e].numel());
      v.insert(v.end(), s.up[e].f32(), s.up[e].f32() + s.up[e].numel());
      gate_up.push_back(t32({2 * s.gate[e].shape()[0], s.gate[e].shape()[1]}, v));
    }
    head.push_back(stack(gate_up));
    head.push_back(stack(s.down));
  }
  return head;
}

/// E 1x1 experts with gate = up = 1 and down_e = 10^e: with x = 1 each expert outputs
/// silu(1) * 10^e, so the result is silu(1) * sum of weight_e * 10^e.
expert_set decimal_experts(int e) {
  expert_set s;
  for (int i = 0; i < e; ++i) {
    s.gate.push_back(t32({1, 1}, {1}));
    s.up.push_back(t32({1, 1}, {1}));
    s.down.push_back(t32({1, 1}, {float(std::pow(10.0, i))}));
  }
  return s;
}

const double silu1 = 1 / (1 + std::exp(-1.0));
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double logit(double p) { return std::log(p / (1 - p)); }

std::vector<double> softmax(std::vector<double> v) {
  double sum = 0;
  for (double& x : v) sum += (x = std::exp(x));
  for (double& x : v) x /= sum;
  return v;
}

float route(std::string_view params, std::vector<float> logits, std::vector<float> bias = {}) {
  std::vector<tensor> head = {t32({1, 1}, {1}), t32({1, std::int64_t(logits.size())}, logits)};
  if (!bias.empty()) head.push_back(t32({std::int64_t(bias.size())}, bias));
  const auto out = run_values("moe", params, moe_inputs(decimal_experts(int(logits.size())), "separate", head));
  return out.empty() ? NAN : out[0];
}

TEST(Moe, SoftmaxTopKWeighsByProbabilities) {
  // logits [1, 3, 2, 0]: experts 1 and 2 with their softmax probabilities
  const auto p = softmax({1, 3, 2, 0});
  EXPECT_NEAR(route(R"({"topK": 2})", {1, 3, 2, 0}), silu1 * (p[1] * 10 + p[2] * 100), 1e-4);
  EXPECT_NEAR(route(R"({"topK": 2, "normalize": true})", {1, 3, 2, 0}), silu1 * (p[1] * 10 + p[2] * 100) / (p[1] + p[2]), 1e-4);
  EXPECT_NEAR(route(R"({"topK": 2, "normalize": true, "scale": 2.5})", {1, 3, 2, 0}),
              2.5 * silu1 * (p[1] * 10 + p[2] * 100) / (p[1] + p[2]), 1e-4);
}

TEST(Moe, TiesGoToTheLowerExpertIndex) {
  EXPECT_NEAR(route(R"({"topK": 2})", {0, 0, 0, 0}), silu1 * (0.25 * 1 + 0.25 * 10), 1e-6);
}

TEST(Moe, SelectionBiasPicksButDoesNotWeigh) {
  // sigmoid scores; bias 5 on expert 3 makes it win although its score is the lowest
  EXPECT_NEAR(route(R"({"topK": 2, "scoring": "sigmoid", "selectionBias": true})", {0, 1, 2, -1}, {0, 0, 0, 5}),
              silu1 * (sigmoid(2) * 100 + sigmoid(-1) * 1000), 1e-3);
}

TEST(Moe, GroupLimitedRoutingRanksGroupsByTheirBestScores) {
  // scores [0.8, 0.79, 0.9, 0.1] in groups {0, 1} and {2, 3}, one group kept, top-2
  const std::vector<float> logits = {float(logit(0.8)), float(logit(0.79)), float(logit(0.9)), float(logit(0.1))};
  const std::string base = R"({"topK": 2, "scoring": "sigmoid", "nGroup": 2, "topKGroup": 1)";
  // group max (DeepSeek-V2): group {2, 3} wins with 0.9
  EXPECT_NEAR(route(base + "}", logits), silu1 * (0.9 * 100 + 0.1 * 1000), 1e-3);
  // sum of the best two (DeepSeek-V3): group {0, 1} wins with 1.59 against 1.0
  EXPECT_NEAR(route(base + R"(, "groupTopK": 2})", logits), silu1 * (0.8 * 1 + 0.79 * 10), 1e-4);
  // no groups: experts 2 and 0
  EXPECT_NEAR(route(R"({"topK": 2, "scoring": "sigmoid"})", logits), silu1 * (0.9 * 100 + 0.8 * 1), 1e-3);
}

TEST(Moe, GeluExpertsUseTheTanhApproximation) {
  // gelu_tanh(1) = 0.5 * (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.8411920
  const auto out = run_values("moe", R"({"topK": 1, "normalize": true, "activation": "gelu"})",
                              moe_inputs(decimal_experts(1), "separate", {t32({1, 1}, {1}), t32({1, 1}, {0})}));
  expect_close(out, {0.8411920f}, 1e-6, 1e-6);
}

TEST(Moe, SeparateFusedAndStackedLayoutsAgree) {
  const expert_set s = random_experts(4, 3, 5, 100);
  const tensor x = random_f32({3, 5}, 1), logits = random_f32({3, 4}, 2), bias = random_f32({4}, 3, 0.1f);
  for (std::string params : {R"({"topK": 2, "normalize": true})", R"({"topK": 3, "activation": "gelu", "scale": 1.5})",
                             R"({"topK": 2, "scoring": "sigmoid", "selectionBias": true, "nGroup": 2, "topKGroup": 1, "groupTopK": 2})"}) {
    const bool with_bias = params.find("selectionBias") != std::string::npos;
    std::vector<tensor> head = {x, logits};
    if (with_bias) head.push_back(bias);
    const auto separate = run_values("moe", params.substr(0, params.size() - 1) + R"(, "layout": "separate"})", moe_inputs(s, "separate", head));
    const auto fused = run_values("moe", params.substr(0, params.size() - 1) + R"(, "layout": "fused"})", moe_inputs(s, "fused", head));
    const auto stacked = run_values("moe", params.substr(0, params.size() - 1) + R"(, "layout": "stacked"})", moe_inputs(s, "stacked", head));
    EXPECT_EQ(separate.size(), 15u) << params;
    EXPECT_EQ(separate, fused) << params;
    EXPECT_EQ(separate, stacked) << params;
  }
}

TEST(Moe, MatchesADenseComputationOfTheChosenExperts) {
  // two tokens, top-1 of two experts with normalize: each token is exactly its expert's FFN
  const expert_set s = random_experts(2, 4, 3, 200);
  const tensor x = random_f32({2, 3}, 4);
  const tensor logits = t32({2, 2}, {5, -5, -5, 5});  // token 0 -> expert 0, token 1 -> expert 1
  const auto out = run_values("moe", R"({"topK": 1, "normalize": true})", moe_inputs(s, "separate", {x, logits}));
  ASSERT_EQ(out.size(), 6u);
  for (int t = 0; t < 2; ++t) {
    const tensor& g = s.gate[std::size_t(t)];
    const tensor& u = s.up[std::size_t(t)];
    const tensor& d = s.down[std::size_t(t)];
    std::vector<double> h(4);
    for (int j = 0; j < 4; ++j) {
      double gv = 0, uv = 0;
      for (int c = 0; c < 3; ++c) {
        gv += double(g.f32()[j * 3 + c]) * x.f32()[t * 3 + c];
        uv += double(u.f32()[j * 3 + c]) * x.f32()[t * 3 + c];
      }
      h[std::size_t(j)] = gv * sigmoid(gv) * uv;
    }
    for (int c = 0; c < 3; ++c) {
      double y = 0;
      for (int j = 0; j < 4; ++j) y += double(d.f32()[c * 4 + j]) * h[std::size_t(j)];
      EXPECT_NEAR(out[std::size_t(t * 3 + c)], y, 1e-5) << t << "," << c;
    }
  }
}

TEST(Moe, PackedExpertsEqualTheirWidenedValues) {
  const expert_set s = random_experts(3, 32, 32, 300);
  const tensor x = random_f32({2, 32}, 5), logits = random_f32({2, 3}, 6), bias = random_f32({3}, 7);
  for (dtype t : {dtype::bf16, dtype::f16, dtype::q8, dtype::q4}) {
    expert_set packed, widened;
    for (auto [from, to_packed, to_wide] : {std::tuple{&s.gate, &packed.gate, &widened.gate}, std::tuple{&s.up, &packed.up, &widened.up},
                                            std::tuple{&s.down, &packed.down, &widened.down}}) {
      for (const auto& w : *from) {
        to_packed->push_back(*convert_tensor(w, t));
        to_wide->push_back(*to_f32(to_packed->back()));
      }
    }
    for (std::string_view layout : {"separate"}) {
      const std::string params = R"({"topK": 2, "normalize": true, "selectionBias": true, "scoring": "sigmoid"})";
      expect_close(run_values("moe", params, moe_inputs(packed, layout, {x, logits, bias})),
                   run_values("moe", params, moe_inputs(widened, layout, {x, logits, bias})), 1e-6, 1e-6);
    }
    // stacked and fused 3-D tensors read row by row across experts
    const tensor stacked_gate = *convert_tensor(stack(s.gate), t), stacked_up = *convert_tensor(stack(s.up), t),
                 stacked_down = *convert_tensor(stack(s.down), t);
    expect_close(run_values("moe", R"({"topK": 2, "layout": "stacked"})", {x, logits, stacked_gate, stacked_up, stacked_down}),
                 run_values("moe", R"({"topK": 2, "layout": "stacked"})",
                            {x, logits, *to_f32(stacked_gate), *to_f32(stacked_up), *to_f32(stacked_down)}),
                 1e-6, 1e-6);
  }
}

TEST(Moe, RefusesBadParams) {
  const auto inputs = moe_inputs(decimal_experts(4), "separate", {t32({1, 1}, {1}), t32({1, 4}, {0, 0, 0, 0})});
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 5})", inputs), {"topK", "5", "4 experts"}));
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 0})", inputs), {"topK"}));
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 2, "scoring": "relu"})", inputs), {"scoring", "relu"}));
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 2, "layout": "packed"})", inputs), {"layout", "packed"}));
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 2, "activation": "relu"})", inputs), {"activation", "relu"}));
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 2, "nGroup": 3})", inputs), {"nGroup", "3"}));
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 2, "nGroup": 2, "topKGroup": 3})", inputs), {"topKGroup", "nGroup"}));
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 2, "nGroup": 2, "groupTopK": 3})", inputs), {"groupTopK", "2"}));
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 3, "nGroup": 2, "topKGroup": 1})", inputs), {"topK", "topKGroup"}));
  EXPECT_EQ(check_error("moe", R"({"topK": 2, "scale": 2.5})"), "");
}

TEST(Moe, RefusesBadShapesNamingTheInput) {
  const expert_set s = random_experts(2, 3, 4, 400);
  const tensor x = random_f32({2, 4}, 1), logits = random_f32({2, 2}, 2);
  auto bad = moe_inputs(s, "separate", {x, logits});
  bad[6] = random_f32({3, 5}, 3);  // up_1
  EXPECT_EQ(run_error("moe", R"({"topK": 1})", bad), "input up_1 (input 6) has shape [3, 5] but must be [I, C] = [3, 4]");
  bad = moe_inputs(s, "separate", {x, logits});
  bad.pop_back();
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 1})", bad), {"input count", "7", "separate", "8"}));
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 1, "selectionBias": true})", moe_inputs(s, "separate", {x, logits})),
                       {"input count", "selection bias", "9"}));
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 1, "selectionBias": true})", moe_inputs(s, "separate", {x, logits, random_f32({3}, 4)})),
                       {"input bias", "[3]", "[2]"}));
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 1})", moe_inputs(s, "separate", {x, random_f32({3, 2}, 5)})),
                       {"input logits", "[3, 2]", "2 rows"}));
  auto fused = moe_inputs(s, "fused", {x, logits});
  fused[3] = random_f32({2, 4, 4}, 6);  // down with I = 4
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 1, "layout": "fused"})", fused), {"input down (input 3)", "[2, 4, 4]", "[2, 4, 3]"}));
  auto stacked = moe_inputs(s, "stacked", {x, logits});
  stacked[2] = random_f32({3, 3, 4}, 7);  // gate for 3 experts
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 1, "layout": "stacked"})", stacked), {"input gate (input 2)", "[E, I, C]"}));
  stacked[2] = random_f32({6, 4}, 8);  // 2-D where [E, I, C] is needed
  EXPECT_TRUE(mentions(run_error("moe", R"({"topK": 1, "layout": "stacked"})", stacked), {"input gate (input 2)", "[6, 4]", "[E, I, C]"}));
}

TEST(Moe, OnlyScaleIsBindable) {
  auto pm = parse_params_text(R"({"topK": 2, "scale": 0})");
  const op_def* def = find_op_def("moe");
  auto p = def->parse(*pm);
  ASSERT_TRUE(p.ok());
  EXPECT_NE(def->bindable(**p, "scale"), nullptr);
  EXPECT_EQ(def->bindable(**p, "topK"), nullptr);
  EXPECT_EQ(def->bindable(**p, "nGroup"), nullptr);
  EXPECT_EQ(def->packed_from, 2);
  *def->bindable(**p, "scale") = INFINITY;  // a binding can carry what JSON cannot
  auto st = def->check(**p);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st.err().message, {"scale"}));
}

}  // namespace
}  // namespace mpakt
