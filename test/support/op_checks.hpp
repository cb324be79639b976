#pragma once
/// Helpers for kernel unit tests built on run_op: f32 tensors from literals, random
/// tensors, results as vectors, and the error text of a refused op.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "test/support/op_runner.hpp"

namespace mpakt::test {

/// An f32 tensor; fails the test (and returns an empty tensor) when sizes disagree.
inline tensor t32(shape_t shape, std::vector<float> values) {
  auto t = make_f32(std::move(shape), values);
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.err().message);
  return t.ok() ? std::move(*t) : tensor{};
}

/// Normally distributed values (mean 0, given spread), reproducible from `seed`.
inline tensor random_f32(shape_t shape, unsigned seed, float spread = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, spread);
  std::vector<float> v(std::size_t(shape_numel(shape)));
  for (auto& x : v) x = nd(rng);
  return t32(std::move(shape), std::move(v));
}

/// Uniformly distributed values in [lo, hi), reproducible from `seed`.
inline tensor random_tensor(shape_t shape, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  auto t = tensor::make(dtype::f32, std::move(shape));
  EXPECT_TRUE(t.ok());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (float& v : t->f32_span()) v = d(rng);
  return std::move(t).value();
}

/// The values of any tensor, widened to f32.
inline std::vector<float> values_of(const tensor& t) {
  auto w = to_f32(t);
  EXPECT_TRUE(w.ok());
  if (!w.ok()) return {};
  return std::vector<float>(w->f32(), w->f32() + w->numel());
}

/// Runs the op and returns its values; fails the test when the op is refused.
inline std::vector<float> run_values(std::string_view op, std::string_view params, std::vector<tensor> inputs,
                                     kernel_fn kernel = nullptr) {
  auto r = run_op(op, params, std::move(inputs), kernel);
  EXPECT_TRUE(r.ok()) << op << ": " << (r.ok() ? "" : r.err().message);
  return r.ok() ? values_of(*r) : std::vector<float>{};
}

/// The message of a refused op, or "" (and a test failure) when it succeeds.
inline std::string run_error(std::string_view op, std::string_view params, std::vector<tensor> inputs) {
  auto r = run_op(op, params, std::move(inputs));
  EXPECT_FALSE(r.ok()) << op << " " << params << " was accepted";
  return r.ok() ? std::string() : r.err().message;
}

/// True when `msg` contains every one of `parts`.
inline ::testing::AssertionResult mentions(const std::string& msg, std::initializer_list<std::string_view> parts) {
  for (auto p : parts)
    if (msg.find(p) == std::string::npos) return ::testing::AssertionFailure() << "\"" << msg << "\" does not mention \"" << p << "\"";
  return ::testing::AssertionSuccess();
}

/// Element-wise |got - want| <= abs + rel * |want| (infinities must match exactly).
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double abs_tol = 1e-6,
                         double rel_tol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) || std::isnan(want[i])) {
      if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
      else EXPECT_EQ(got[i], want[i]) << "at " << i;
      continue;
    }
    EXPECT_NEAR(got[i], want[i], abs_tol + rel_tol * std::fabs(want[i])) << "at " << i;
  }
}

/// The op_def's check() on params parsed from JSON text: its message, or "" when it passes.
inline std::string check_error(std::string_view op, std::string_view params_json) {
  const op_def* def = find_op_def(op);
  if (!def) return "no op_def";
  auto pm = parse_params_text(params_json);
  if (!pm) return pm.err().message;
  auto p = def->parse(*pm);
  if (!p) return p.err().message;
  if (!def->check) return "";
  auto st = def->check(**p);
  return st.ok() ? "" : st.err().message;
}

}  // namespace mpakt::test
