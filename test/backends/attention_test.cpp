// attention: params and shape rule (runtime/ops/attention.cpp) and the reference kernel
// (backends/cpu/ref/attention.cpp). Small cases are worked out by hand; larger ones are
// compared with a naive full-matrix softmax written here independently of the kernel's
// one-pass online softmax.

#include "runtime/ops/attention_params.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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

std::vector<std::string> features_of(std::string_view params, std::size_t n_inputs = 3) {
  std::vector<std::string> out;
  auto pm = parse_params_text(params);
  EXPECT_TRUE(pm.ok());
  find_op_def("attention")->features(*pm, n_inputs, out);
  return out;
}

/// Settings of the naive reference below.
struct naive_cfg {
  int heads = 1, kv_heads = 1, head_dim = 1, v_head_dim = 1;
  bool causal = true;
  int pos_offset = 0;
  int window = 0;  // 0 = none
  double scale = 0;  // 0 = 1/sqrt(headDim)
  double softcap = 0;
  std::vector<double> slopes;  // empty = no ALiBi
  const tensor* bias = nullptr;
};

/// Full score matrix per head, masked with -inf, softmax, times v.
std::vector<float> naive_attention(const naive_cfg& c, const tensor& q, const tensor& k, const tensor& v) {
  const std::int64_t t_rows = q.rows(), s_rows = k.rows();
  std::vector<float> out(std::size_t(t_rows * c.heads * c.v_head_dim), 0.0f);
  const double scale = c.scale ? c.scale : 1 / std::sqrt(double(c.head_dim));
  for (std::int64_t t = 0; t < t_rows; ++t) {
    const std::int64_t pos = c.pos_offset + t;
    for (int h = 0; h < c.heads; ++h) {
      const int kvh = h / (c.heads / c.kv_heads);
      std::vector<double> score(std::size_t(s_rows), -INFINITY);
      for (std::int64_t s = 0; s < s_rows; ++s) {
        bool visible = true;
        if (c.causal && s > pos) visible = false;
        if (c.window && c.causal && s <= pos - c.window) visible = false;
        if (c.window && !c.causal && std::llabs(pos - s) > c.window) visible = false;
        if (!visible) continue;
        double d = 0;
        for (int i = 0; i < c.head_dim; ++i)
          d += double(q.f32()[t * q.cols() + h * c.head_dim + i]) * k.f32()[s * k.cols() + kvh * c.head_dim + i];
        d *= scale;
        if (c.softcap) d = c.softcap * std::tanh(d / c.softcap);
        if (!c.slopes.empty()) d += c.slopes[std::size_t(h)] * double(s - pos);
        if (c.bias) d += c.bias->shape().size() == 3 ? c.bias->f32()[(h * t_rows + t) * s_rows + s] : c.bias->f32()[t * s_rows + s];
        score[std::size_t(s)] = d;
      }
      double m = -INFINITY, sum = 0;
      for (double d : score) m = std::max(m, d);
      if (m == -INFINITY) continue;
      for (double& d : score) sum += (d = std::exp(d - m));
      for (int i = 0; i < c.v_head_dim; ++i) {
        double acc = 0;
        for (std::int64_t s = 0; s < s_rows; ++s) acc += score[std::size_t(s)] * v.f32()[s * v.cols() + kvh * c.v_head_dim + i];
        out[std::size_t((t * c.heads + h) * c.v_head_dim + i)] = float(acc / sum);
      }
    }
  }
  return out;
}

std::vector<float> rows_of(const std::vector<float>& v, std::size_t width, std::size_t first, std::size_t count) {
  return std::vector<float>(v.begin() + std::ptrdiff_t(first * width), v.begin() + std::ptrdiff_t((first + count) * width));
}

tensor rows_tensor(const tensor& t, std::int64_t first, std::int64_t count) {
  return t32({count, t.cols()}, std::vector<float>(t.f32() + first * t.cols(), t.f32() + (first + count) * t.cols()));
}

TEST(Attention, HandCheckedCausalSoftmax) {
  // one head of width 1, scale 1: row 0 sees key 0 only; row 1 weighs keys 0 and 1 by
  // softmax(1*1, 1*2) = (0.2689414, 0.7310586)
  const auto got = run_values("attention", R"({"heads": 1, "headDim": 1})",
                              {t32({2, 1}, {1, 1}), t32({2, 1}, {1, 2}), t32({2, 1}, {10, 20})});
  expect_close(got, {10, float(10 * 0.2689414214 + 20 * 0.7310585786)}, 1e-5, 1e-6);
}

TEST(Attention, MatchesANaiveFullMatrixSoftmax) {
  const tensor q = random_f32({5, 4 * 8}, 1), k = random_f32({7, 2 * 8}, 2), v = random_f32({7, 2 * 6}, 3);
  naive_cfg c;
  c.heads = 4; c.kv_heads = 2; c.head_dim = 8; c.v_head_dim = 6; c.pos_offset = 2;
  expect_close(run_values("attention", R"({"heads": 4, "kvHeads": 2, "headDim": 8, "vHeadDim": 6, "posOffset": 2})", {q, k, v}),
               naive_attention(c, q, k, v), 1e-6, 1e-5);
  c.causal = false;
  expect_close(run_values("attention", R"({"heads": 4, "kvHeads": 2, "headDim": 8, "vHeadDim": 6, "causal": false})", {q, k, v}),
               naive_attention(c, q, k, v), 1e-6, 1e-5);
}

TEST(Attention, DecodeRowOverACacheEqualsTheLastRowOfTheFullPass) {
  // cache of 10 rows, 6 written: rows past the query position must never be read (NaN there)
  const tensor q = random_f32({6, 16}, 4);
  tensor k = random_f32({10, 16}, 5), v = random_f32({10, 16}, 6);
  for (std::int64_t r = 6; r < 10; ++r)
    for (std::int64_t i = 0; i < 16; ++i) k.f32()[r * 16 + i] = v.f32()[r * 16 + i] = NAN;
  const std::string params = R"({"heads": 2, "headDim": 8})";
  const auto full = run_values("attention", params, {q, k, v});
  const auto decode = run_values("attention", R"({"heads": 2, "headDim": 8, "posOffset": 5})", {rows_tensor(q, 5, 1), k, v});
  expect_close(decode, rows_of(full, 16, 5, 1), 1e-6, 1e-6);
}

TEST(Attention, PrefillThenDecodeEqualsOnePass) {
  const tensor q = random_f32({7, 32}, 7), k = random_f32({7, 16}, 8), v = random_f32({7, 16}, 9);
  const std::string p = R"({"heads": 4, "kvHeads": 2, "headDim": 8, "window": 4)";
  const auto full = run_values("attention", p + "}", {q, k, v});
  const auto pre = run_values("attention", p + "}", {rows_tensor(q, 0, 4), k, v});
  expect_close(pre, rows_of(full, 32, 0, 4), 1e-6, 1e-6);
  for (int t = 4; t < 7; ++t)
    expect_close(run_values("attention", p + R"(, "posOffset": )" + std::to_string(t) + "}", {rows_tensor(q, t, 1), k, v}),
                 rows_of(full, 32, std::size_t(t), 1), 1e-6, 1e-6);
}

TEST(Attention, GroupedQueryEqualsRepeatedKvHeads) {
  // kvHeads 2 for 4 heads: heads 0, 1 read kv head 0; heads 2, 3 read kv head 1
  const tensor q = random_f32({3, 4 * 4}, 10), k = random_f32({3, 2 * 4}, 11), v = random_f32({3, 2 * 4}, 12);
  std::vector<float> kr, vr;
  for (int s = 0; s < 3; ++s)
    for (int h = 0; h < 4; ++h)
      for (int i = 0; i < 4; ++i) {
        kr.push_back(k.f32()[s * 8 + (h / 2) * 4 + i]);
        vr.push_back(v.f32()[s * 8 + (h / 2) * 4 + i]);
      }
  expect_close(run_values("attention", R"({"heads": 4, "kvHeads": 2, "headDim": 4})", {q, k, v}),
               run_values("attention", R"({"heads": 4, "headDim": 4})", {q, t32({3, 16}, kr), t32({3, 16}, vr)}), 0, 0);
}

TEST(Attention, CausalWindowSeesTheLastWindowKeys) {
  // window 1: each row sees only its own key, so the output is v itself
  const tensor q = random_f32({4, 8}, 13), k = random_f32({4, 8}, 14), v = random_f32({4, 8}, 15);
  expect_close(run_values("attention", R"({"heads": 1, "headDim": 8, "window": 1})", {q, k, v}), test::values_of(v), 1e-6, 1e-6);
  naive_cfg c;
  c.head_dim = 8; c.v_head_dim = 8; c.window = 2;
  expect_close(run_values("attention", R"({"heads": 1, "headDim": 8, "window": 2})", {q, k, v}), naive_attention(c, q, k, v), 1e-6, 1e-5);
}

TEST(Attention, NonCausalWindowIsSymmetricAndInclusive) {
  // |pos - s| <= 1: row 0 sees keys 0, 1; keys with equal scores (q = 0) average their values
  const tensor q = t32({3, 1}, {0, 0, 0}), k = t32({3, 1}, {1, 2, 3}), v = t32({3, 1}, {3, 6, 12});
  expect_close(run_values("attention", R"({"heads": 1, "headDim": 1, "causal": false, "window": 1})", {q, k, v}),
               {4.5f, 7.0f, 9.0f}, 1e-6, 1e-6);
}

TEST(Attention, RowThatSeesNoKeyIsZero) {
  // query at position 10 with window 2 over a 4-row cache: keys 9 and 10 do not exist
  const auto got = run_values("attention", R"({"heads": 1, "headDim": 2, "window": 2, "posOffset": 10})",
                              {random_f32({1, 2}, 16), random_f32({4, 2}, 17), random_f32({4, 2}, 18)});
  expect_close(got, {0, 0}, 0, 0);
}

TEST(Attention, SoftcapScaleAlibiAndBiasMatchTheNaiveReference) {
  const tensor q = random_f32({4, 3 * 8}, 19, 3.0f), k = random_f32({6, 3 * 8}, 20), v = random_f32({6, 3 * 8}, 21);
  const tensor bias2 = random_f32({4, 6}, 22), bias3 = random_f32({3, 4, 6}, 23);
  naive_cfg c;
  c.heads = 3; c.kv_heads = 3; c.head_dim = 8; c.v_head_dim = 8; c.pos_offset = 2;
  c.scale = 0.3; c.softcap = 2.0; c.slopes = {0.5, 0.25, 0.125}; c.bias = &bias3;
  expect_close(run_values("attention", R"({"heads": 3, "headDim": 8, "posOffset": 2, "scale": 0.3, "softcap": 2,
                  "alibiSlopes": [0.5, 0.25, 0.125]})", {q, k, v, bias3}),
               naive_attention(c, q, k, v), 1e-6, 1e-5);
  c.causal = false; c.bias = &bias2; c.slopes.clear(); c.softcap = 0;
  expect_close(run_values("attention", R"({"heads": 3, "headDim": 8, "posOffset": 2, "scale": 0.3, "causal": false})", {q, k, v, bias2}),
               naive_attention(c, q, k, v), 1e-6, 1e-5);
}

TEST(Attention, LargeNegativeBiasMasksAKey) {
  // key 1 masked by -1e9: row 1 (sees keys 0 and 1) outputs v0
  const auto got = run_values("attention", R"({"heads": 1, "headDim": 1})",
                              {t32({2, 1}, {1, 1}), t32({2, 1}, {1, 5}), t32({2, 1}, {7, 9}), t32({2, 2}, {0, 0, 0, -1e9f})});
  expect_close(got, {7, 7}, 1e-6, 0);
}

TEST(Attention, AlibiSlopesFollowBloomAndMpt) {
  const auto slopes = [](std::string_view params, int heads) {
    auto pm = parse_params_text(params);
    auto p = find_op_def("attention")->parse(*pm);
    EXPECT_TRUE(p.ok());
    std::vector<float> s(static_cast<std::size_t>(heads), 0.0f);
    ops::alibi_slopes(static_cast<const ops::attention_params&>(**p), s.data());
    return s;
  };
  // BLOOM, 8 heads: 2^-1 .. 2^-8; 6 heads: 4 from 2^(-8/4), then odd powers of 2^(-8/8)
  expect_close(slopes(R"({"heads": 8, "headDim": 4, "alibi": true})", 8),
               {0.5f, 0.25f, 0.125f, 0.0625f, 0.03125f, 0.015625f, 0.0078125f, 0.00390625f}, 0, 0);
  expect_close(slopes(R"({"heads": 6, "headDim": 4, "alibi": true})", 6), {0.25f, 0.0625f, 0.015625f, 0.00390625f, 0.5f, 0.125f}, 0, 0);
  // MPT alibi_bias_max 8, 6 heads: 2^-i for i = 1..8, odd entries first (i even), cut to 6
  expect_close(slopes(R"({"heads": 6, "headDim": 4, "alibiMax": 8})", 6), {0.25f, 0.0625f, 0.015625f, 0.00390625f, 0.5f, 0.125f}, 0, 0);
  // MPT alibi_bias_max 4, 2 heads: 2^-(i*4/2)
  expect_close(slopes(R"({"heads": 2, "headDim": 4, "alibiMax": 4})", 2), {0.25f, 0.0625f}, 0, 0);
  // BLOOM 3 heads: 2 from 2^(-8/2) = 1/16, then 2^(-8/4)^1
  expect_close(slopes(R"({"heads": 3, "headDim": 4, "alibi": true})", 3), {0.0625f, 0.00390625f, 0.25f}, 0, 0);
}

TEST(Attention, AlibiShiftsTowardsRecentKeys) {
  // equal scores, slope 1: row 1 weighs key 0 by e^-1 and key 1 by 1
  const auto got = run_values("attention", R"({"heads": 1, "headDim": 1, "alibiSlopes": [1]})",
                              {t32({2, 1}, {0, 0}), t32({2, 1}, {1, 1}), t32({2, 1}, {0, 1})});
  expect_close(got, {0, float(1 / (1 + std::exp(-1.0)))}, 1e-6, 1e-6);
}

TEST(Attention, RefusesBadParams) {
  const tensor q = random_f32({2, 32}, 24), kv = random_f32({2, 32}, 25);
  EXPECT_EQ(run_error("attention", R"({"heads": 8, "headDim": 4, "kvHeads": 3})", {q, kv, kv}),
            "parameter kvHeads must divide heads (heads 8, kvHeads 3)");
  EXPECT_TRUE(mentions(run_error("attention", R"({"heads": 8, "headDim": 4, "alibiSlopes": [1, 2]})", {q, kv, kv}), {"alibiSlopes", "8"}));
  EXPECT_TRUE(mentions(run_error("attention", R"({"heads": 8, "headDim": 4, "alibi": true, "alibiMax": 8})", {q, kv, kv}),
                       {"alibi", "alibiMax"}));
  EXPECT_TRUE(mentions(run_error("attention", R"({"heads": 0, "headDim": 4})", {q, kv, kv}), {"heads"}));
  EXPECT_TRUE(mentions(check_error("attention", R"({"heads": 8, "headDim": 4, "window": 0})"), {"window"}));
  EXPECT_TRUE(mentions(check_error("attention", R"({"heads": 8, "headDim": 4, "window": 2.5})"), {"window"}));
  EXPECT_TRUE(mentions(check_error("attention", R"({"heads": 8, "headDim": 4, "softcap": -1})"), {"softcap"}));
  EXPECT_TRUE(mentions(check_error("attention", R"({"heads": 8, "headDim": 4, "scale": 0})"), {"scale"}));
  EXPECT_TRUE(mentions(check_error("attention", R"({"heads": 8, "headDim": 4, "posOffset": -3})"), {"posOffset"}));
  EXPECT_TRUE(mentions(check_error("attention", R"({"heads": 8, "headDim": 4, "alibiMax": -8})"), {"alibiMax"}));
  EXPECT_EQ(check_error("attention", R"({"heads": 8, "headDim": 4, "window": 4096, "softcap": 50, "posOffset": 7})"), "");
}

TEST(Attention, BoundParamsParseAsZeroAndAreBindable) {
  auto pm = parse_params_text(R"({"heads": 2, "headDim": 4, "posOffset": 0, "scale": 0, "softcap": 0, "window": 0, "alibiMax": 0})");
  const op_def* def = find_op_def("attention");
  auto p = def->parse(*pm);
  ASSERT_TRUE(p.ok());
  for (const char* name : {"posOffset", "scale", "softcap", "window", "alibiMax"}) EXPECT_NE(def->bindable(**p, name), nullptr) << name;
  for (const char* name : {"heads", "headDim", "kvHeads", "vHeadDim", "causal"}) EXPECT_EQ(def->bindable(**p, name), nullptr) << name;
}

TEST(Attention, RefusesBadShapesNamingTheInput) {
  const std::string p = R"({"heads": 2, "headDim": 4, "kvHeads": 1, "vHeadDim": 3})";
  EXPECT_EQ(run_error("attention", R"({"heads": 8, "headDim": 4})", {random_f32({5, 24}, 1), random_f32({5, 32}, 2), random_f32({5, 32}, 3)}),
            "input q has shape [5, 24] but heads*headDim is 32");
  EXPECT_TRUE(mentions(run_error("attention", p, {random_f32({2, 8}, 1), random_f32({3, 8}, 2), random_f32({3, 3}, 3)}),
                       {"input k", "[3, 8]", "kvHeads*headDim", "4"}));
  EXPECT_TRUE(mentions(run_error("attention", p, {random_f32({2, 8}, 1), random_f32({3, 4}, 2), random_f32({3, 4}, 3)}),
                       {"input v", "[3, 4]", "kvHeads*vHeadDim", "3"}));
  EXPECT_TRUE(mentions(run_error("attention", p, {random_f32({2, 8}, 1), random_f32({3, 4}, 2), random_f32({4, 3}, 3)}),
                       {"input v", "4 rows", "k has 3"}));
  EXPECT_TRUE(mentions(run_error("attention", p, {random_f32({2, 8}, 1), random_f32({3, 4}, 2), random_f32({3, 3}, 3), random_f32({3, 2}, 4)}),
                       {"input bias", "[3, 2]", "[2, 3]", "[2, 2, 3]"}));
}

TEST(Attention, OutputShapeFollowsVHeadDim) {
  auto r = test::run_op("attention", R"({"heads": 2, "headDim": 4, "vHeadDim": 3})",
                        {random_f32({5, 8}, 1), random_f32({6, 8}, 2), random_f32({6, 6}, 3)});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{5, 6}));
}

TEST(Attention, ReportsFeatures) {
  EXPECT_TRUE(features_of(R"({"heads": 2, "headDim": 4, "causal": false, "kvHeads": 1, "posOffset": 3})").empty());
  EXPECT_TRUE(features_of(R"({"heads": 2, "headDim": 4, "alibi": false})").empty());
  EXPECT_EQ(features_of(R"({"heads": 2, "headDim": 4, "window": 3})"), std::vector<std::string>{"attention.window"});
  EXPECT_EQ(features_of(R"({"heads": 2, "headDim": 4, "softcap": 3})"), std::vector<std::string>{"attention.softcap"});
  EXPECT_EQ(features_of(R"({"heads": 2, "headDim": 4, "scale": 3})"), std::vector<std::string>{"attention.scale"});
  EXPECT_EQ(features_of(R"({"heads": 2, "headDim": 4, "alibi": true})"), std::vector<std::string>{"attention.alibi"});
  EXPECT_EQ(features_of(R"({"heads": 2, "headDim": 4, "alibiMax": 8})"), std::vector<std::string>{"attention.alibi"});
  EXPECT_EQ(features_of(R"({"heads": 2, "headDim": 4, "alibiSlopes": [1, 2]})"), std::vector<std::string>{"attention.alibi"});
  EXPECT_EQ(features_of(R"({"heads": 2, "headDim": 4})", 4), std::vector<std::string>{"attention.bias"});
}

}  // namespace
}  // namespace mpakt
