// conv1d and short_conv: shape rules (runtime/ops/conv.cpp) and reference kernels
// (backends/cpu/ref/conv.cpp).

#include <gtest/gtest.h>

#include <cstring>

#include "test/support/op_checks.hpp"

namespace mpakt {
namespace {

using test::expect_close;
using test::mentions;
using test::random_f32;
using test::run_error;
using test::run_values;
using test::t32;
using test::values_of;

tensor copy_of(const tensor& t) { return *to_f32(t); }

TEST(Conv1d, LastTapMultipliesTheCurrentRow) {
  // z = [10, 20, 1, 2] (state then x), w = [1, 2, 3]:
  // y0 = 1*10 + 2*20 + 3*1 = 53, y1 = 1*20 + 2*1 + 3*2 = 28
  expect_close(run_values("conv1d", "{}", {t32({2, 1}, {1, 2}), t32({1, 1, 3}, {1, 2, 3}), t32({2, 1}, {10, 20})}), {53, 28}, 0, 0);
}

TEST(Conv1d, ChannelsAreIndependentAndTheStateIsNotWritten) {
  // channel 0 kernel [0, 1] (identity), channel 1 kernel [1, 0] (previous row)
  const tensor state = t32({1, 2}, {7, 8});
  expect_close(run_values("conv1d", "{}", {t32({3, 2}, {1, 2, 3, 4, 5, 6}), t32({2, 1, 2}, {0, 1, 1, 0}), state}),
               {1, 8, 3, 2, 5, 4}, 0, 0);
  EXPECT_EQ(values_of(state), (std::vector<float>{7, 8}));
}

TEST(Conv1d, KernelOfOneNeedsAnEmptyState) {
  expect_close(run_values("conv1d", "{}", {t32({2, 2}, {1, 2, 3, 4}), t32({2, 1, 1}, {2, -1}), t32({0, 2}, {})}), {2, -2, 6, -4}, 0, 0);
}

TEST(Conv1d, DecodeRowsEqualOnePrefill) {
  // a prefill of 5 rows equals 5 one-row steps with the state carried by hand
  const tensor x = random_f32({5, 3}, 1), w = random_f32({3, 1, 4}, 2);
  std::vector<float> state(9, 0.0f);
  const auto full = run_values("conv1d", "{}", {x, w, t32({3, 3}, state)});
  for (int t = 0; t < 5; ++t) {
    const std::vector<float> row(x.f32() + t * 3, x.f32() + t * 3 + 3);
    expect_close(run_values("conv1d", "{}", {t32({1, 3}, row), w, t32({3, 3}, state)}),
                 std::vector<float>(full.begin() + t * 3, full.begin() + t * 3 + 3), 1e-7, 1e-7);
    state.erase(state.begin(), state.begin() + 3);
    state.insert(state.end(), row.begin(), row.end());
  }
}

TEST(Conv1d, PackedWeightEqualsItsWidenedValues) {
  const tensor x = random_f32({3, 2}, 3), state = random_f32({31, 2}, 4), w = random_f32({2, 1, 32}, 5);
  for (dtype t : {dtype::bf16, dtype::f16, dtype::q8, dtype::q4}) {
    const tensor packed = *convert_tensor(w, t);
    expect_close(run_values("conv1d", "{}", {x, packed, state}), run_values("conv1d", "{}", {x, *to_f32(packed), state}), 0, 0);
  }
}

TEST(Conv1d, RefusesBadShapesNamingTheInput) {
  const tensor x = random_f32({3, 2}, 6);
  EXPECT_TRUE(mentions(run_error("conv1d", "{}", {x, random_f32({2, 2, 3}, 7), random_f32({2, 2}, 8)}), {"input weight", "[2, 2, 3]", "[C, 1, K]"}));
  EXPECT_TRUE(mentions(run_error("conv1d", "{}", {x, random_f32({3, 1, 3}, 7), random_f32({2, 2}, 8)}), {"input weight", "C = 2"}));
  EXPECT_EQ(run_error("conv1d", "{}", {x, random_f32({2, 1, 3}, 7), random_f32({3, 2}, 8)}),
            "input state has shape [3, 2] but must be [K-1, C] = [2, 2]");
}

/// short_conv computed step by step: in_proj by hand, the conv with the conv1d op.
struct recipe_result {
  std::vector<float> out, state;
};

recipe_result short_conv_recipe(const tensor& x, const tensor& w_in, const tensor& w_conv, const tensor& w_out, const tensor& state) {
  const std::int64_t t_rows = x.rows(), c = x.cols(), k = w_conv.shape()[2];
  std::vector<float> b(std::size_t(t_rows * c)), g(b.size()), bx(b.size());
  for (std::int64_t t = 0; t < t_rows; ++t)
    for (std::int64_t o = 0; o < 3 * c; ++o) {
      double d = 0;
      for (std::int64_t i = 0; i < c; ++i) d += double(w_in.f32()[o * c + i]) * x.f32()[t * c + i];
      const std::size_t at = std::size_t(t * c + o % c);
      if (o < c) b[at] = float(d);
      else if (o < 2 * c) g[at] = float(d);
      else bx[at] = b[at] * float(d);  // B gates x before the conv
    }
  const auto conv = run_values("conv1d", "{}", {t32({t_rows, c}, bx), w_conv, state});
  std::vector<float> y(b.size());
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = g[i] * conv[i];  // C gates after the conv
  recipe_result r;
  for (std::int64_t t = 0; t < t_rows; ++t)
    for (std::int64_t o = 0; o < c; ++o) {
      double d = 0;
      for (std::int64_t i = 0; i < c; ++i) d += double(w_out.f32()[o * c + i]) * y[std::size_t(t * c + i)];
      r.out.push_back(float(d));
    }
  std::vector<float> all(state.f32(), state.f32() + state.numel());
  all.insert(all.end(), bx.begin(), bx.end());
  r.state.assign(all.end() - (k - 1) * c, all.end());
  return r;
}

struct conv_block {
  tensor w_in, w_conv, w_out;
};

conv_block random_block(std::int64_t c, std::int64_t k, unsigned seed) {
  return {random_f32({3 * c, c}, seed, 0.5f), random_f32({c, 1, k}, seed + 1), random_f32({c, c}, seed + 2, 0.5f)};
}

TEST(ShortConv, EqualsTheMultiOpRecipeAndAdvancesTheState) {
  for (std::int64_t t_rows : {1, 2, 5}) {  // T below, at and above K-1 = 3
    const conv_block blk = random_block(4, 4, 10);
    const tensor x = random_f32({t_rows, 4}, 11), state0 = random_f32({3, 4}, 12);
    const recipe_result want = short_conv_recipe(x, blk.w_in, blk.w_conv, blk.w_out, state0);
    const tensor state = copy_of(state0);
    expect_close(run_values("short_conv", "{}", {x, blk.w_in, blk.w_conv, blk.w_out, state}), want.out, 1e-6, 1e-5);
    expect_close(values_of(state), want.state, 0, 0);
  }
}

TEST(ShortConv, PrefillThenDecodeEqualsOneLongPrefill) {
  const conv_block blk = random_block(3, 3, 20);
  const tensor x = random_f32({6, 3}, 21);
  const tensor long_state = t32({2, 3}, std::vector<float>(6, 0.0f));
  const auto full = run_values("short_conv", "{}", {x, blk.w_in, blk.w_conv, blk.w_out, long_state});
  const tensor state = t32({2, 3}, std::vector<float>(6, 0.0f));
  std::vector<float> pieces;
  for (auto [first, count] : {std::pair{0, 1}, std::pair{1, 3}, std::pair{4, 1}, std::pair{5, 1}}) {
    const tensor part = t32({count, 3}, std::vector<float>(x.f32() + first * 3, x.f32() + (first + count) * 3));
    const auto y = run_values("short_conv", "{}", {part, blk.w_in, blk.w_conv, blk.w_out, state});
    pieces.insert(pieces.end(), y.begin(), y.end());
  }
  expect_close(pieces, full, 1e-6, 1e-6);
  expect_close(values_of(state), values_of(long_state), 0, 0);
}

TEST(ShortConv, KernelOfOneKeepsNoState) {
  const conv_block blk = random_block(2, 1, 30);
  const tensor x = random_f32({3, 2}, 31);
  const recipe_result want = short_conv_recipe(x, blk.w_in, blk.w_conv, blk.w_out, t32({0, 2}, {}));
  expect_close(run_values("short_conv", "{}", {x, blk.w_in, blk.w_conv, blk.w_out, t32({0, 2}, {})}), want.out, 1e-6, 1e-5);
}

TEST(ShortConv, PackedWeightsEqualTheirWidenedValues) {
  const std::int64_t c = 32;
  const conv_block blk = random_block(c, 32, 40);
  const tensor x = random_f32({2, c}, 41), state0 = random_f32({31, c}, 42);
  for (dtype t : {dtype::bf16, dtype::f16, dtype::q8, dtype::q4}) {
    const tensor pin = *convert_tensor(blk.w_in, t), pconv = *convert_tensor(blk.w_conv, t), pout = *convert_tensor(blk.w_out, t);
    const tensor s1 = copy_of(state0), s2 = copy_of(state0);
    expect_close(run_values("short_conv", "{}", {x, pin, pconv, pout, s1}),
                 run_values("short_conv", "{}", {x, *to_f32(pin), *to_f32(pconv), *to_f32(pout), s2}), 0, 0);
    expect_close(values_of(s1), values_of(s2), 0, 0);
  }
}

TEST(ShortConv, DeclaresItsInPlaceStateAndPackedWeights) {
  const op_def* def = find_op_def("short_conv");
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(def->writes_input, 4);
  EXPECT_EQ(def->aliases_input, -1);
  EXPECT_EQ(def->packed_inputs, 0b1110u);
  EXPECT_EQ(find_op_def("conv1d")->packed_inputs, 0b10u);
  EXPECT_EQ(find_op_def("conv1d")->writes_input, -1);
}

TEST(ShortConv, RefusesBadShapesNamingTheInput) {
  const conv_block blk = random_block(4, 3, 50);
  const tensor x = random_f32({2, 4}, 51), state = random_f32({2, 4}, 52);
  EXPECT_EQ(run_error("short_conv", "{}", {x, random_f32({8, 4}, 1), blk.w_conv, blk.w_out, state}),
            "input w_in has shape [8, 4] but must be [3C, C] = [12, 4]");
  EXPECT_TRUE(mentions(run_error("short_conv", "{}", {x, blk.w_in, random_f32({4, 3}, 1), blk.w_out, state}), {"input w_conv", "[4, 3]"}));
  EXPECT_TRUE(mentions(run_error("short_conv", "{}", {x, blk.w_in, blk.w_conv, random_f32({4, 5}, 1), state}), {"input w_out", "[4, 5]"}));
  EXPECT_TRUE(mentions(run_error("short_conv", "{}", {x, blk.w_in, blk.w_conv, blk.w_out, random_f32({3, 4}, 1)}), {"input state", "[2, 4]"}));
}

}  // namespace
}  // namespace mpakt
