// argmax, reduce_max, reduce_sum, reduce_mean: shape rules (runtime/ops/reduce.cpp) and
// reference kernels (backends/cpu/ref/reduce.cpp).

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "test/support/op_checks.hpp"

namespace mpakt {
namespace {

using test::expect_close;
using test::mentions;
using test::run_error;
using test::run_values;
using test::t32;

shape_t out_shape(std::string_view op, tensor x) {
  auto r = test::run_op(op, "{}", {std::move(x)});
  EXPECT_TRUE(r.ok());
  return r.ok() ? r->shape() : shape_t{};
}

TEST(Argmax, PicksTheLargestPerRowAndTiesGoToTheLowestIndex) {
  expect_close(run_values("argmax", "{}", {t32({3, 4}, {1, 5, 2, 5, -1, -2, -3, -4, 0, 0, 0, 7})}), {1, 0, 3});
}

TEST(Argmax, ShapesDropTheLastAxis) {
  EXPECT_EQ(out_shape("argmax", t32({4}, {1, 2, 3, 0})), (shape_t{1}));
  EXPECT_EQ(out_shape("argmax", t32({2, 3, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})), (shape_t{2, 3}));
  expect_close(run_values("argmax", "{}", {t32({4}, {1, 2, 3, 0})}), {2});
}

TEST(Argmax, NanCountsAsTheLargest) {
  expect_close(run_values("argmax", "{}", {t32({1, 3}, {1, std::nanf(""), 3})}), {1});
}

TEST(Argmax, HandlesHugeRowsExactly) {
  std::vector<float> v(100000, 0.0f);
  v[77777] = 1;
  expect_close(run_values("argmax", "{}", {t32({1, 100000}, v)}), {77777});
}

TEST(ReduceMax, LargestPerRow) {
  expect_close(run_values("reduce_max", "{}", {t32({2, 3}, {1, 9, 2, -5, -1, -3})}), {9, -1});
  EXPECT_EQ(out_shape("reduce_max", t32({3}, {1, 2, 3})), (shape_t{1}));
  expect_close(run_values("reduce_max", "{}", {t32({3}, {-std::numeric_limits<float>::infinity(), -2, -7})}), {-2});
}

TEST(ArgmaxAndReduceMax, RefuseScalarsAndEmptyRows) {
  for (const char* op : {"argmax", "reduce_max"}) {
    EXPECT_TRUE(mentions(run_error(op, "{}", {t32({}, {1})}), {"input x"}));
    EXPECT_TRUE(mentions(run_error(op, "{}", {t32({2, 0}, {})}), {"input x", "[2, 0]"}));
  }
}

TEST(ReduceSumAndMean, CoverEveryElement) {
  expect_close(run_values("reduce_sum", "{}", {t32({2, 2}, {1, 2, 3, 4})}), {10});
  expect_close(run_values("reduce_mean", "{}", {t32({2, 2}, {1, 2, 3, 4})}), {2.5f});
  EXPECT_EQ(out_shape("reduce_sum", t32({2, 3, 1}, {1, 2, 3, 4, 5, 6})), (shape_t{1}));
  EXPECT_EQ(out_shape("reduce_mean", t32({}, {5})), (shape_t{1}));
}

TEST(ReduceSumAndMean, AccumulateInDouble) {
  // 1e8 followed by a million ones: f32 accumulation would lose every one of them
  std::vector<float> v(1000001, 1.0f);
  v[0] = 1e8f;
  expect_close(run_values("reduce_sum", "{}", {t32({1000001}, v)}), {101000000.0f}, 0, 0);
  expect_close(run_values("reduce_mean", "{}", {t32({1000001}, v)}), {float(101000000.0 / 1000001.0)}, 0, 0);
}

TEST(ReduceSumAndMean, EmptyInputs) {
  expect_close(run_values("reduce_sum", "{}", {t32({0, 3}, {})}), {0});
  auto v = run_values("reduce_mean", "{}", {t32({0}, {})});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_TRUE(std::isnan(v[0]));  // as torch.mean of an empty tensor
}

}  // namespace
}  // namespace mpakt
