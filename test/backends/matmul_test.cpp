// matmul, linear, embedding: shape rules (runtime/ops/matmul.cpp), reference kernels
// (backends/cpu/ref/matmul.cpp) on every weight dtype, and the fast transB kernel
// (backends/cpu/fast/matmul.cpp) against the reference.

#include "runtime/ops/matmul_params.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "test/support/levels.hpp"
#include "test/support/op_checks.hpp"

namespace mpakt {
namespace {

using test::expect_close;
using test::mentions;
using test::random_f32;
using test::run_error;
using test::run_values;
using test::t32;

constexpr dtype packed_types[] = {dtype::bf16, dtype::f16, dtype::q8, dtype::q4};

tensor packed(const tensor& w, dtype t) {
  auto p = convert_tensor(w, t);
  EXPECT_TRUE(p.ok());
  return p.ok() ? std::move(*p) : tensor{};
}

/// The f32 weight a packed weight stands for: what the reference must agree with.
tensor dequantized(const tensor& w, dtype t) {
  auto f = to_f32(packed(w, t));
  EXPECT_TRUE(f.ok());
  return f.ok() ? std::move(*f) : tensor{};
}

/// x [rows, K] times w ([N, K] when trans_b, else [K, N]) (+ bias), in double.
std::vector<float> naive(const tensor& x, const tensor& w, bool trans_b, const float* bias = nullptr) {
  const std::int64_t rows = x.rows(), k = x.cols(), n = trans_b ? w.shape()[0] : w.shape()[1];
  std::vector<float> out(std::size_t(rows * n));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = bias ? bias[j] : 0;
      for (std::int64_t i = 0; i < k; ++i)
        acc += double(x.f32()[r * k + i]) * double(trans_b ? w.f32()[j * k + i] : w.f32()[i * n + j]);
      out[std::size_t(r * n + j)] = float(acc);
    }
  return out;
}

/// The fast kernel this CPU's level gets (the first registered that it can run).
/// The general kernel of the CPU's level: the first that takes a one-row f32 product (the
/// integer-only and many-row kernels registered ahead of it do not).
kernel_fn fast_kernel(std::string_view op) {
  ops::matmul_params p;
  p.trans_b = true;
  const std::vector<tensor_desc> plain = {{dtype::f32, {1, 64}}, {dtype::f32, {32, 64}}};
  for (const auto& k : cpu_fast_kernels())
    if (k.op == op && k.min_level <= cpu_isa::current() && k.accepts(plain, p)) return k.fn;
  return nullptr;
}

// ---- matmul / linear: hand-checked ----

TEST(Matmul, HandChecked) {
  // [[1, 2, 3], [4, 5, 6]] x [[1, 0], [0, 1], [1, 1]]
  expect_close(run_values("matmul", "{}", {t32({2, 3}, {1, 2, 3, 4, 5, 6}), t32({3, 2}, {1, 0, 0, 1, 1, 1})}), {4, 5, 10, 11});
  // the same weight stored [N, K]
  expect_close(run_values("matmul", R"({"transB": true})", {t32({2, 3}, {1, 2, 3, 4, 5, 6}), t32({2, 3}, {1, 0, 1, 0, 1, 1})}),
               {4, 5, 10, 11});
}

TEST(Matmul, LeadingDimensionsFoldIntoRows) {
  auto r = test::run_op("matmul", "{}", {t32({2, 1, 3}, {1, 2, 3, 4, 5, 6}), t32({3, 2}, {1, 0, 0, 1, 1, 1})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{2, 1, 2}));
  expect_close(test::values_of(*r), {4, 5, 10, 11});
  r = test::run_op("matmul", "{}", {t32({3}, {1, 2, 3}), t32({3, 2}, {1, 0, 0, 1, 1, 1})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{2}));
  expect_close(test::values_of(*r), {4, 5});
}

TEST(Linear, AddsBiasToEveryRow) {
  expect_close(run_values("linear", "{}", {t32({2, 3}, {1, 2, 3, 4, 5, 6}), t32({3, 2}, {1, 0, 0, 1, 1, 1}), t32({2}, {10, 20})}),
               {14, 25, 20, 31});
  expect_close(run_values("linear", R"({"transB": true})",
                          {t32({2, 3}, {1, 2, 3, 4, 5, 6}), t32({2, 3}, {1, 0, 1, 0, 1, 1}), t32({2}, {10, 20})}),
               {14, 25, 20, 31});
}

TEST(Matmul, EmptyKGivesZerosOrBias) {
  expect_close(run_values("linear", R"({"transB": true})", {t32({2, 0}, {}), t32({2, 0}, {}), t32({2}, {1, 2})}), {1, 2, 1, 2});
  expect_close(run_values("matmul", "{}", {t32({1, 0}, {}), t32({0, 3}, {})}), {0, 0, 0});
}

TEST(Matmul, KMismatchNamesBAndHintsAtTransB) {
  const std::string msg = run_error("matmul", "{}", {t32({1, 3}, {1, 2, 3}), t32({2, 3}, {1, 2, 3, 4, 5, 6})});
  EXPECT_TRUE(mentions(msg, {"input b", "[2, 3]", "K = 3", "transB: false", "with transB: true it would match"}));
  const std::string msg2 = run_error("matmul", R"({"transB": true})", {t32({1, 2}, {1, 2}), t32({2, 3}, {1, 2, 3, 4, 5, 6})});
  EXPECT_TRUE(mentions(msg2, {"input b", "K = 2", "transB: true", "with transB: false it would match"}));
  // no hint when neither layout fits
  const std::string msg3 = run_error("matmul", "{}", {t32({1, 4}, {1, 2, 3, 4}), t32({2, 3}, {1, 2, 3, 4, 5, 6})});
  EXPECT_TRUE(mentions(msg3, {"input b", "K = 4"}));
  EXPECT_EQ(msg3.find("would match"), std::string::npos);
}

TEST(Matmul, RefusesBadShapes) {
  EXPECT_TRUE(mentions(run_error("matmul", "{}", {t32({1, 2}, {1, 2}), t32({1, 2, 1}, {1, 2})}), {"input b", "two-dimensional"}));
  EXPECT_TRUE(mentions(run_error("matmul", "{}", {t32({}, {1}), t32({1, 1}, {1})}), {"input a"}));
  EXPECT_TRUE(mentions(run_error("linear", "{}", {t32({1, 2}, {1, 2}), t32({2, 2}, {1, 2, 3, 4}), t32({3}, {1, 2, 3})}),
                       {"input bias", "[3]", "[2]"}));
  EXPECT_TRUE(mentions(run_error("linear", "{}", {t32({1, 2}, {1, 2}), t32({3, 2}, {1, 2, 3, 4, 5, 6}), t32({2}, {1, 2})}),
                       {"input w", "K = 2"}));
}

TEST(Matmul, OnlyTheWeightMayArrivePacked) {
  EXPECT_EQ(find_op_def("matmul")->packed_inputs, 2u);
  EXPECT_EQ(find_op_def("linear")->packed_inputs, 2u);
  EXPECT_EQ(find_op_def("embedding")->packed_inputs, 2u);
}

// ---- matmul / linear: every weight dtype on the reference ----

TEST(Matmul, ReferenceMatchesNaiveProductOnF32) {
  for (bool tb : {false, true}) {
    const tensor x = random_f32({5, 37}, 1);
    const tensor w = random_f32(tb ? shape_t{11, 37} : shape_t{37, 11}, 2);
    const tensor bias = random_f32({11}, 3);
    const std::string params = tb ? R"({"transB": true})" : "{}";
    expect_close(run_values("matmul", params, {x, w}), naive(x, w, tb), 1e-5, 1e-6);
    expect_close(run_values("linear", params, {x, w, bias}), naive(x, w, tb, bias.f32()), 1e-5, 1e-6);
  }
}

TEST(Matmul, ReferenceReadsEveryPackedDtypeInPlace) {
  for (dtype t : packed_types) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (tb ? " transB" : ""));
      // q8/q4 blocks run along the stored last dimension: K when transB, N otherwise
      const tensor x = random_f32({3, 64}, 4);
      const tensor w = random_f32(tb ? shape_t{33, 64} : shape_t{64, 96}, 5);
      const tensor bias = random_f32({tb ? 33 : 96}, 6);
      const std::string params = tb ? R"({"transB": true})" : "{}";
      const tensor wide = dequantized(w, t);
      expect_close(run_values("matmul", params, {x, packed(w, t)}), naive(x, wide, tb), 1e-5, 1e-6);
      expect_close(run_values("linear", params, {x, packed(w, t), bias}), naive(x, wide, tb, bias.f32()), 1e-5, 1e-6);
    }
  }
}

// ---- the fast transB kernel ----

TEST(FastMatmul, ClaimsTransBOnly) {
  const test::bf16_pairs_guard pairs(true);  // (AVX512-BF16's pairs claim what they can, below)
  bool found = false;
  for (const auto& k : cpu_fast_kernels()) {
    if (k.op != "matmul" && k.op != "linear") continue;
    found = true;
    ASSERT_NE(k.accepts, nullptr);
    ops::matmul_params p;
    std::vector<tensor_desc> in = {{dtype::f32, {4, 64}}, {dtype::q4, {32, 64}}};
    p.trans_b = false;
    EXPECT_FALSE(k.accepts(in, p));
    p.trans_b = true;
    std::vector<tensor_desc> many = {{dtype::f32, {33, 64}}, {dtype::q4, {32, 64}}};
    std::vector<tensor_desc> f32_w = {{dtype::f32, {4, 64}}, {dtype::f32, {32, 64}}};
    if (k.accepts(in, p) && !k.accepts(f32_w, p)) {
      // VNNI's integer pairs: q8 and q4 weights only, any number of rows, K a multiple of 32
      SCOPED_TRACE(k.variant);
      EXPECT_TRUE(k.accepts(many, p));
      in[1].type = dtype::q8;
      EXPECT_TRUE(k.accepts(in, p));
      for (dtype t : {dtype::bf16, dtype::f16}) {
        in[1].type = t;
        EXPECT_FALSE(k.accepts(in, p));
      }
      std::vector<tensor_desc> odd_k = {{dtype::f32, {1, 48}}, {dtype::q8, {32, 48}}};
      EXPECT_FALSE(k.accepts(odd_k, p));
      in[1].type = dtype::q4;
      continue;
    }
    std::vector<tensor_desc> many_bf16 = {{dtype::f32, {33, 64}}, {dtype::bf16, {32, 64}}};
    std::vector<tensor_desc> many_f16 = {{dtype::f32, {33, 64}}, {dtype::f16, {32, 64}}};
    if (!k.accepts(in, p) && k.accepts(many_bf16, p) && !k.accepts(many_f16, p) && !k.accepts(many, p)) {
      // AVX512-BF16's pairs: bf16 weights only, any K, from 16 rows (which, below 33 rows, run
      // a call's rows on the vector kernels unless it frees them: runtime/row_bits.hpp)
      SCOPED_TRACE(k.variant);
      EXPECT_EQ(k.variant, "avx512_bf16");
      many_bf16[0].shape = {33, 7};
      many_bf16[1].shape = {32, 7};
      EXPECT_TRUE(k.accepts(many_bf16, p));
      many_bf16[0].shape = {16, 7};
      EXPECT_TRUE(k.accepts(many_bf16, p));
      many_bf16[0].shape = {15, 7};
      EXPECT_FALSE(k.accepts(many_bf16, p));
      continue;
    }
    if (!k.accepts(in, p)) {
      // a many-row kernel (prefill): only its weight types — float ones (the blocked float
      // products) or quantized ones (AMX also takes bf16) — and more than 32 rows, or from 16
      // rows for the AMX tiles and the integer lanes (which, below 33 rows, run a call's rows
      // on the vector kernels unless it frees them: runtime/row_bits.hpp); never 15
      SCOPED_TRACE(k.variant);
      const bool floats = k.accepts(many_f16, p);
      EXPECT_NE(floats, k.accepts(many, p));
      auto& mine = floats ? many_f16 : many;
      mine[0].shape = {32, 64};
      EXPECT_EQ(k.accepts(mine, p), !floats);
      mine[0].shape = {15, 64};
      EXPECT_FALSE(k.accepts(mine, p));
      continue;
    }
    for (dtype t : {dtype::f32, dtype::bf16, dtype::f16, dtype::q8}) {
      in[1].type = t;
      EXPECT_TRUE(k.accepts(in, p));
    }
  }
  EXPECT_TRUE(found);
}

/// The fast kernel the CPU picks against the reference on random shapes: 1..17 rows, the
/// float dtypes, K a multiple of 32 and not. (Every level, and q8/q4 with their int8
/// activations: test/backends/fast_kernels_test.cpp.)
TEST(FastMatmul, AgreesWithTheReference) {
  kernel_fn fast_mm = fast_kernel("matmul");
  kernel_fn fast_lin = fast_kernel("linear");
  ASSERT_NE(fast_mm, nullptr);
  ASSERT_NE(fast_lin, nullptr);
  unsigned seed = 100;
  for (dtype t : {dtype::f32, dtype::bf16, dtype::f16}) {
    std::vector<std::int64_t> ks = {32, 64, 96, 256, 1024};
    if (!is_quantized(t)) ks.insert(ks.end(), {1, 5, 16, 17, 31, 33, 47, 100, 1000});
    for (std::int64_t k : ks) {
      for (std::int64_t rows = 1; rows <= 17; ++rows) {
        const std::int64_t n = 1 + (rows * 7 + k) % 13;  // 1..13: every tail of the column tiles
        SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(rows) + " K " + std::to_string(k) + " N " +
                     std::to_string(n));
        const tensor x = random_f32({rows, k}, ++seed);
        const tensor w = random_f32({n, k}, ++seed, 0.5f);
        const tensor bias = random_f32({n}, ++seed);
        const tensor wp = t == dtype::f32 ? w : packed(w, t);
        const double tol = 1e-6 * double(k) + 1e-5;
        const auto want = run_values("matmul", R"({"transB": true})", {x, wp});
        expect_close(run_values("matmul", R"({"transB": true})", {x, wp}, fast_mm), want, tol, 1e-5);
        const auto want_lin = run_values("linear", R"({"transB": true})", {x, wp, bias});
        expect_close(run_values("linear", R"({"transB": true})", {x, wp, bias}, fast_lin), want_lin, tol, 1e-5);
      }
    }
  }
}

TEST(FastMatmul, LeadingDimensionsAndEmptyShapes) {
  kernel_fn fast = fast_kernel("linear");
  ASSERT_NE(fast, nullptr);
  const tensor x = random_f32({2, 3, 40}, 7);
  const tensor w = random_f32({6, 40}, 8);
  const tensor bias = random_f32({6}, 9);
  auto r = test::run_op("linear", R"({"transB": true})", {x, w, bias}, fast);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{2, 3, 6}));
  expect_close(test::values_of(*r), naive(x, w, true, bias.f32()), 1e-4, 1e-5);
  expect_close(run_values("linear", R"({"transB": true})", {t32({2, 0}, {}), t32({2, 0}, {}), t32({2}, {1, 2})}, fast),
               {1, 2, 1, 2});
  expect_close(run_values("matmul", R"({"transB": true})", {t32({0, 4}, {}), t32({3, 4}, std::vector<float>(12, 1))}, fast), {});
}

TEST(FastMatmul, ExactOnSmallIntegers) {
  // integers small enough that every product and sum is exact in f32, bf16 and f16
  kernel_fn fast = fast_kernel("matmul");
  std::vector<float> xv(4 * 64), wv(5 * 64);
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = float(int(i % 7) - 3);
  for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = float(int(i % 5) - 2);
  const tensor x = t32({4, 64}, xv), w = t32({5, 64}, wv);
  const auto want = naive(x, w, true);
  for (dtype t : {dtype::f32, dtype::bf16, dtype::f16}) {
    const tensor wp = t == dtype::f32 ? w : packed(w, t);
    expect_close(run_values("matmul", R"({"transB": true})", {x, wp}, fast), want, 0, 0);
    expect_close(run_values("matmul", R"({"transB": true})", {x, wp}), want, 0, 0);
  }
}

// ---- embedding ----

TEST(Embedding, LooksUpRowsAndZerosOutOfRangeIds) {
  const tensor table = t32({4, 3}, {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32});
  auto r = test::run_op("embedding", "{}", {t32({5}, {2, 0, -1, 4, 3}), table});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{5, 3}));
  expect_close(test::values_of(*r), {20, 21, 22, 0, 1, 2, 0, 0, 0, 0, 0, 0, 30, 31, 32});
  expect_close(run_values("embedding", "{}", {t32({1}, {1e9f}), table}), {0, 0, 0});
}

TEST(Embedding, NonIntegerIdIsARunTimeErrorNamingTheRow) {
  const tensor table = t32({4, 1}, {0, 1, 2, 3});
  EXPECT_TRUE(mentions(run_error("embedding", "{}", {t32({3}, {0, 1.5f, 2}), table}), {"ids[1]", "1.5"}));
  EXPECT_TRUE(mentions(run_error("embedding", "{}", {t32({2}, {0, std::nanf("")}), table}), {"ids[1]"}));
}

TEST(Embedding, EveryPackedDtype) {
  const tensor table = random_f32({6, 64}, 11);
  const tensor ids = t32({4}, {5, 0, 6, 3});
  for (dtype t : packed_types) {
    SCOPED_TRACE(dtype_name(t));
    const auto got = run_values("embedding", "{}", {ids, packed(table, t)});
    const auto want = run_values("embedding", "{}", {ids, dequantized(table, t)});
    expect_close(got, want, 0, 0);
  }
}

TEST(Embedding, RefusesBadShapes) {
  EXPECT_TRUE(mentions(run_error("embedding", "{}", {t32({1, 2}, {0, 1}), t32({2, 2}, {1, 2, 3, 4})}), {"input ids", "[1, 2]"}));
  EXPECT_TRUE(mentions(run_error("embedding", "{}", {t32({2}, {0, 1}), t32({4}, {1, 2, 3, 4})}), {"input table", "[4]"}));
}

}  // namespace
}  // namespace mpakt
