// reshape, transpose, slice, concat, zeros, cache_write: shape rules
// (runtime/ops/layout.cpp) and reference kernels (backends/cpu/ref/layout.cpp).

#include "runtime/ops/layout_params.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>

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

/// Parses params, infers the output, and runs the reference kernel into `out` (which the
/// caller chose: a separate buffer, a view, or the aliased input). Binds `bound` first.
result<tensor> run_into(std::string_view op, std::string_view params_json, std::vector<tensor> inputs,
                        std::optional<tensor> out, std::string_view bound_name = {}, double bound_value = 0) {
  const op_def* def = find_op_def(op);
  auto pm = parse_params_text(params_json);
  if (!pm) return std::move(pm).err();
  auto params = def->parse(*pm);
  if (!params) return std::move(params).err();
  std::vector<tensor_desc> descs;
  for (const auto& t : inputs) descs.push_back(t.desc());
  auto desc = def->infer(shape_query{descs, **params});
  if (!desc) return std::move(desc).err();
  if (!bound_name.empty()) {
    *def->bindable(**params, bound_name) = bound_value;
    MPAKT_TRY(def->check(**params));
  }
  if (!out) {
    auto t = tensor::make(desc->type, desc->shape);
    if (!t) return std::move(t).err();
    out = std::move(*t);
  }
  std::vector<tensor*> ptrs;
  for (auto& t : inputs) ptrs.push_back(&t);
  workspace ws;
  kernel_call call{params->get(), ptrs, &*out, &ws};
  MPAKT_TRY(cpu_backend::reference(op)(call));
  return *out;
}

// ---- reshape ----

TEST(Reshape, KeepsValuesAndTakesTheNewShape) {
  auto r = test::run_op("reshape", R"({"shape": [3, 2]})", {t32({2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{3, 2}));
  expect_close(test::values_of(*r), {1, 2, 3, 4, 5, 6});
  r = test::run_op("reshape", R"({"shape": []})", {t32({1}, {7})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{}));
}

TEST(Reshape, InfersOneMinusOne) {
  auto r = test::run_op("reshape", R"({"shape": [-1, 4]})", {t32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{2, 4}));
  EXPECT_TRUE(mentions(run_error("reshape", R"({"shape": [-1, 3]})", {t32({4}, {1, 2, 3, 4})}), {"parameter shape", "[-1, 3]"}));
  EXPECT_TRUE(mentions(run_error("reshape", R"({"shape": [-1, -1]})", {t32({4}, {1, 2, 3, 4})}), {"shape", "-1"}));
}

TEST(Reshape, ElementCountMustMatch) {
  EXPECT_TRUE(mentions(run_error("reshape", R"({"shape": [2, 2]})", {t32({2, 3}, {1, 2, 3, 4, 5, 6})}),
                       {"parameter shape", "[2, 2]", "4", "[2, 3]", "6"}));
  EXPECT_TRUE(mentions(run_error("reshape", R"({"shape": [2.5, 2]})", {t32({5}, {1, 2, 3, 4, 5})}), {"shape[0]"}));
  EXPECT_TRUE(mentions(run_error("reshape", R"({"shape": [-2, -3]})", {t32({6}, {1, 2, 3, 4, 5, 6})}), {"shape[0]"}));
}

TEST(Reshape, IsAViewButCopiesIntoASeparateOutput) {
  EXPECT_TRUE(find_op_def("reshape")->view_of_input0);
  const tensor a = t32({2, 2}, {1, 2, 3, 4});
  // a view of the input: nothing to do
  auto r = run_into("reshape", R"({"shape": [4]})", {a}, a.reshaped({4}));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->same_storage(a));
  expect_close(test::values_of(*r), {1, 2, 3, 4});
  // a separate buffer: the values are copied
  r = run_into("reshape", R"({"shape": [4]})", {a}, std::nullopt);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->same_storage(a));
  expect_close(test::values_of(*r), {1, 2, 3, 4});
}

// ---- transpose ----

TEST(Transpose, SwapsRowsAndColumns) {
  auto r = test::run_op("transpose", "{}", {t32({2, 3}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{3, 2}));
  expect_close(test::values_of(*r), {1, 4, 2, 5, 3, 6});
  EXPECT_TRUE(mentions(run_error("transpose", "{}", {t32({1, 2, 1}, {1, 2})}), {"input a", "[1, 2, 1]"}));
}

// ---- slice ----

TEST(Slice, AlongAxisZero) {
  auto r = test::run_op("slice", R"({"start": 1, "length": 2})", {t32({4, 2}, {0, 1, 10, 11, 20, 21, 30, 31})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{2, 2}));
  expect_close(test::values_of(*r), {10, 11, 20, 21});
  // on [2, 2, 2], axis 0 takes whole [2, 2] blocks
  r = test::run_op("slice", R"({"start": 1, "length": 1, "axis": 0})", {t32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{1, 2, 2}));
  expect_close(test::values_of(*r), {5, 6, 7, 8});
}

TEST(Slice, AlongTheLastAxis) {
  for (const char* axis : {"-1", "1"}) {
    auto r = test::run_op("slice", std::string(R"({"start": 1, "length": 2, "axis": )") + axis + "}",
                          {t32({2, 4}, {0, 1, 2, 3, 10, 11, 12, 13})});
    ASSERT_TRUE(r.ok()) << axis;
    EXPECT_EQ(r->shape(), (shape_t{2, 2}));
    expect_close(test::values_of(*r), {1, 2, 11, 12});
  }
  // the MLA partial-rope split: [T*heads, 192] into 128 + 64
  const tensor x = random_f32({3, 192}, 1);
  const auto tail = run_values("slice", R"({"start": 128, "length": 64, "axis": 1})", {x});
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 64; ++j) EXPECT_EQ(tail[std::size_t(r * 64 + j)], x.f32()[r * 192 + 128 + j]);
}

TEST(Slice, RefusesMiddleAxesAndRangesPastTheEnd) {
  const auto x = [] { return t32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}); };
  EXPECT_TRUE(mentions(run_error("slice", R"({"start": 0, "length": 1, "axis": 1})", {x()}), {"parameter axis", "1"}));
  EXPECT_TRUE(mentions(run_error("slice", R"({"start": 0, "length": 1, "axis": -2})", {x()}), {"axis"}));
  EXPECT_TRUE(mentions(run_error("slice", R"({"start": 1, "length": 2})", {x()}), {"start", "length", "[2, 2, 2]"}));
  EXPECT_TRUE(mentions(run_error("slice", R"({"start": 0, "length": -1})", {x()}), {"length"}));
  EXPECT_TRUE(mentions(run_error("slice", R"({"start": 0})", {x()}), {"length"}));
  EXPECT_TRUE(mentions(check_error("slice", R"({"start": -1, "length": 1})"), {"start"}));
  EXPECT_TRUE(mentions(check_error("slice", R"({"start": 0.5, "length": 1})"), {"start"}));
  EXPECT_EQ(check_error("slice", R"({"start": 3, "length": 1})"), "");
}

TEST(Slice, ABoundStartPastTheEndIsARunTimeError) {
  const tensor a = t32({4, 1}, {0, 1, 2, 3});
  // validated with start 0 (a bound parameter), bound to 3 afterwards: 3 + 2 > 4
  auto r = run_into("slice", R"({"start": 0, "length": 2})", {a}, std::nullopt, "start", 3);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(mentions(r.err().message, {"parameter start", "3"}));
  r = run_into("slice", R"({"start": 0, "length": 2})", {a}, std::nullopt, "start", 2);
  ASSERT_TRUE(r.ok());
  expect_close(test::values_of(*r), {2, 3});
  ops::slice_params p;
  EXPECT_EQ(find_op_def("slice")->bindable(p, "start"), &p.start);
  EXPECT_EQ(find_op_def("slice")->bindable(p, "length"), nullptr);
  EXPECT_EQ(find_op_def("slice")->bindable(p, "axis"), nullptr);
}

TEST(Slice, PackedRowsKeepTheirDtypeAlongAxisZero) {
  EXPECT_EQ(find_op_def("slice")->packed_inputs, 1u);
  const tensor w = random_f32({5, 64}, 2);
  for (dtype t : {dtype::bf16, dtype::f16, dtype::q8, dtype::q4}) {
    SCOPED_TRACE(dtype_name(t));
    const tensor p = *convert_tensor(w, t);
    auto r = test::run_op("slice", R"({"start": 1, "length": 3})", {p});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->type(), t);
    EXPECT_EQ(r->shape(), (shape_t{3, 64}));
    const auto all = test::values_of(p);
    const auto got = test::values_of(*r);
    expect_close(got, std::vector<float>(all.begin() + 64, all.begin() + 4 * 64), 0, 0);
  }
}

TEST(Slice, PackedAlongTheLastAxisWidensOnlyTheSlice) {
  const tensor w = random_f32({3, 96}, 3);
  for (dtype t : {dtype::bf16, dtype::f16, dtype::q8, dtype::q4}) {
    SCOPED_TRACE(dtype_name(t));
    const tensor p = *convert_tensor(w, t);
    // 5..45 crosses a block boundary and starts and ends inside blocks
    auto r = test::run_op("slice", R"({"start": 5, "length": 40, "axis": -1})", {p});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->type(), dtype::f32);
    EXPECT_EQ(r->shape(), (shape_t{3, 40}));
    const auto all = test::values_of(p);
    std::vector<float> want;
    for (int row = 0; row < 3; ++row) want.insert(want.end(), all.begin() + row * 96 + 5, all.begin() + row * 96 + 45);
    expect_close(test::values_of(*r), want, 0, 0);
  }
  // a 1-D packed tensor: axis 0 is its last axis, so the slice is widened too
  auto r = test::run_op("slice", R"({"start": 2, "length": 3})", {*convert_tensor(t32({8}, {0, 1, 2, 3, 4, 5, 6, 7}), dtype::bf16)});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type(), dtype::f32);
  expect_close(test::values_of(*r), {2, 3, 4});
}

// ---- concat ----

TEST(Concat, AlongAxisZeroAndTheLastAxis) {
  auto r = test::run_op("concat", "{}", {t32({1, 2}, {1, 2}), t32({2, 2}, {3, 4, 5, 6})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{3, 2}));
  expect_close(test::values_of(*r), {1, 2, 3, 4, 5, 6});
  for (const char* axis : {"-1", "1"}) {
    r = test::run_op("concat", std::string(R"({"axis": )") + axis + "}", {t32({2, 1}, {1, 2}), t32({2, 2}, {3, 4, 5, 6})});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->shape(), (shape_t{2, 3}));
    expect_close(test::values_of(*r), {1, 3, 4, 2, 5, 6});
  }
  r = test::run_op("concat", R"({"axis": -1})", {t32({2}, {1, 2}), t32({1}, {3})});
  ASSERT_TRUE(r.ok());
  expect_close(test::values_of(*r), {1, 2, 3});
}

TEST(Concat, RefusesMismatchesAndMiddleAxes) {
  EXPECT_TRUE(mentions(run_error("concat", "{}", {t32({1, 2}, {1, 2}), t32({1, 3}, {1, 2, 3})}), {"input b", "[1, 3]", "[1, 2]"}));
  EXPECT_TRUE(mentions(run_error("concat", R"({"axis": -1})", {t32({1, 2}, {1, 2}), t32({2, 2}, {1, 2, 3, 4})}), {"input b"}));
  EXPECT_TRUE(mentions(run_error("concat", "{}", {t32({2}, {1, 2}), t32({1, 2}, {1, 2})}), {"input b", "rank"}));
  EXPECT_TRUE(mentions(run_error("concat", R"({"axis": 1})", {t32({1, 1, 1}, {1}), t32({1, 1, 1}, {2})}), {"parameter axis"}));
}

// ---- zeros ----

TEST(Zeros, MakesZerosOfTheShape) {
  auto r = test::run_op("zeros", R"({"shape": [2, 3]})", {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{2, 3}));
  expect_close(test::values_of(*r), std::vector<float>(6, 0));
  // a reused buffer is cleared
  tensor dirty = t32({2}, {5, 6});
  r = run_into("zeros", R"({"shape": [2]})", {}, dirty);
  ASSERT_TRUE(r.ok());
  expect_close(test::values_of(dirty), {0, 0});
}

TEST(Zeros, RefusesBadShapes) {
  EXPECT_TRUE(mentions(run_error("zeros", R"({"shape": [2, -1]})", {}), {"shape[1]"}));
  // Graph limits: shapes have at most 8 dimensions, the op's parameter included
  EXPECT_TRUE(mentions(run_error("zeros", R"({"shape": [1, 1, 1, 1, 1, 1, 1, 1, 2]})", {}), {"shape", "9 dimensions", "8"}));
  EXPECT_TRUE(test::run_op("zeros", R"({"shape": [1, 1, 1, 1, 1, 1, 1, 2]})", {}).ok());
  EXPECT_TRUE(mentions(run_error("reshape", R"({"shape": [1, 1, 1, 1, 1, 1, 1, 1, -1]})", {t32({2}, {1, 2})}),
                       {"shape", "9 dimensions"}));
  EXPECT_TRUE(mentions(run_error("zeros", R"({"shape": [1.5]})", {}), {"shape[0]"}));
  EXPECT_TRUE(mentions(run_error("zeros", R"({"shape": [4294967296, 4294967296, 4294967296]})", {}), {"shape"}));
}

// ---- cache_write ----

TEST(CacheWrite, WritesRowsInPlaceAndReturnsTheCache) {
  EXPECT_EQ(find_op_def("cache_write")->aliases_input, 0);
  tensor cache = t32({4, 2}, std::vector<float>(8, 0));
  auto r = test::run_op("cache_write", R"({"offset": 1})", {cache, t32({2, 2}, {1, 2, 3, 4})});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->same_storage(cache));
  expect_close(test::values_of(cache), {0, 0, 1, 2, 3, 4, 0, 0});
  // leading dimensions of values fold into rows; the last row of the cache is writable
  r = test::run_op("cache_write", R"({"offset": 3})", {cache, t32({1, 1, 2}, {9, 9})});
  ASSERT_TRUE(r.ok());
  expect_close(test::values_of(cache), {0, 0, 1, 2, 3, 4, 9, 9});
}

TEST(CacheWrite, ASeparateOutputGetsTheCacheAndTheRows) {
  const tensor cache = t32({3, 1}, {7, 8, 9});
  auto r = run_into("cache_write", R"({"offset": 2})", {cache, t32({1, 1}, {5})}, std::nullopt);
  ASSERT_TRUE(r.ok());
  expect_close(test::values_of(*r), {7, 8, 5});
  expect_close(test::values_of(cache), {7, 8, 9});
}

TEST(CacheWrite, RefusesRowsPastTheEnd) {
  const auto cache = [] { return t32({4, 2}, std::vector<float>(8, 0)); };
  EXPECT_TRUE(mentions(run_error("cache_write", R"({"offset": 3})", {cache(), t32({2, 2}, {1, 2, 3, 4})}), {"offset", "3", "4"}));
  // a bound offset is only known per call: a run-time error naming it
  auto r = run_into("cache_write", R"({"offset": 0})", {cache(), t32({2, 2}, {1, 2, 3, 4})}, std::nullopt, "offset", 3);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(mentions(r.err().message, {"parameter offset", "3", "4"}));
  EXPECT_TRUE(mentions(check_error("cache_write", R"({"offset": -1})"), {"offset"}));
  EXPECT_TRUE(mentions(check_error("cache_write", R"({"offset": 1.5})"), {"offset"}));
}

TEST(CacheWrite, RefusesBadShapes) {
  EXPECT_TRUE(mentions(run_error("cache_write", R"({"offset": 0})", {t32({4, 2}, std::vector<float>(8)), t32({1, 3}, {1, 2, 3})}),
                       {"input values", "[1, 3]"}));
  EXPECT_TRUE(mentions(run_error("cache_write", R"({"offset": 0})", {t32({8}, std::vector<float>(8)), t32({1, 8}, std::vector<float>(8))}),
                       {"input cache", "[8]"}));
}

}  // namespace
}  // namespace mpakt
