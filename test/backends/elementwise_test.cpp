// Elementwise ops: shape rules (runtime/ops/elementwise.cpp) and reference kernels
// (backends/cpu/ref/elementwise.cpp). Expected values were computed independently
// (Python's math module) and are listed with the inputs they belong to.

#include "runtime/ops/elementwise_params.hpp"

#include <gtest/gtest.h>

#include <limits>

#include "test/support/op_checks.hpp"

namespace mpakt {
namespace {

using test::expect_close;
using test::mentions;
using test::run_error;
using test::run_values;
using test::t32;

TEST(Elementwise, AddSameShape) {
  expect_close(run_values("add", "{}", {t32({2, 2}, {1, 2, 3, 4}), t32({2, 2}, {10, 20, 30, 40})}), {11, 22, 33, 44});
}

TEST(Elementwise, AddBroadcastsARowOverEveryRow) {
  // leading dimensions fold into rows: [2, 2, 3] is four rows of three
  expect_close(run_values("add", "{}", {t32({2, 2, 3}, {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3}), t32({3}, {1, 2, 3})}),
               {1, 2, 3, 2, 3, 4, 3, 4, 5, 4, 5, 6});
}

TEST(Elementwise, AddBroadcastsASingleValue) {
  expect_close(run_values("add", "{}", {t32({3}, {1, 2, 3}), t32({1}, {0.5f})}), {1.5f, 2.5f, 3.5f});
  expect_close(run_values("add", "{}", {t32({2, 1}, {1, 2}), t32({}, {-1})}), {0, 1});
}

TEST(Elementwise, SubAndMulBroadcastLikeAdd) {
  expect_close(run_values("sub", "{}", {t32({2, 2}, {5, 6, 7, 8}), t32({2}, {1, 2})}), {4, 4, 6, 6});
  expect_close(run_values("sub", "{}", {t32({2}, {5, 6}), t32({2}, {6, 5})}), {-1, 1});
  expect_close(run_values("mul", "{}", {t32({2, 2}, {1, 2, 3, 4}), t32({2}, {10, -1})}), {10, -2, 30, -4});
  expect_close(run_values("mul", "{}", {t32({2}, {1, 2}), t32({1}, {3})}), {3, 6});
}

TEST(Elementwise, BinaryOutputHasTheShapeOfA) {
  auto r = test::run_op("add", "{}", {t32({2, 3}, {1, 2, 3, 4, 5, 6}), t32({3}, {1, 1, 1})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{2, 3}));
}

TEST(Elementwise, BinaryAcceptsASingleRowWithLeadingOnes) {
  // [1, C] is a single row too, and [1, 1] a single value
  expect_close(run_values("add", "{}", {t32({2, 3}, {1, 2, 3, 4, 5, 6}), t32({1, 3}, {10, 20, 30})}), {11, 22, 33, 14, 25, 36});
  expect_close(run_values("mul", "{}", {t32({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}), t32({1, 1, 2}, {1, -1})}),
               {1, -2, 3, -4, 5, -6, 7, -8});
  expect_close(run_values("sub", "{}", {t32({2, 2}, {1, 2, 3, 4}), t32({1, 1}, {1})}), {0, 1, 2, 3});
}

TEST(Elementwise, BinaryRefusesOtherShapes) {
  // a column, a wrong width, and a b with more dimensions than a are refused, naming b
  for (const char* op : {"add", "sub", "mul"}) {
    EXPECT_TRUE(mentions(run_error(op, "{}", {t32({2, 3}, {1, 2, 3, 4, 5, 6}), t32({2}, {1, 2})}), {"input b", "[2]", "[2, 3]"}));
    EXPECT_TRUE(mentions(run_error(op, "{}", {t32({2, 3}, {1, 2, 3, 4, 5, 6}), t32({2, 1}, {1, 2})}), {"input b", "[2, 1]"}));
    EXPECT_TRUE(mentions(run_error(op, "{}", {t32({2, 3}, {1, 2, 3, 4, 5, 6}), t32({1, 1, 3}, {1, 2, 3})}), {"input b", "[1, 1, 3]"}));
    EXPECT_TRUE(mentions(run_error(op, "{}", {t32({3}, {1, 2, 3}), t32({1, 3}, {1, 2, 3})}), {"input b"}));
  }
}

TEST(Elementwise, Scale) {
  expect_close(run_values("scale", R"({"factor": 2.5})", {t32({3}, {1, -2, 0})}), {2.5f, -5, 0});
  EXPECT_TRUE(mentions(run_error("scale", "{}", {t32({1}, {1})}), {"factor"}));
}

TEST(Elementwise, ScaleFactorIsBindableAndChecked) {
  const op_def* def = find_op_def("scale");
  ASSERT_NE(def, nullptr);
  auto pm = parse_params_text(R"({"factor": 0})");
  ASSERT_TRUE(pm.ok());
  auto p = def->parse(*pm);
  ASSERT_TRUE(p.ok());
  double* f = def->bindable(**p, "factor");
  ASSERT_NE(f, nullptr);
  *f = 3;
  EXPECT_EQ(static_cast<const ops::scale_params&>(**p).factor, 3);
  EXPECT_TRUE(def->check(**p).ok());
  *f = std::numeric_limits<double>::infinity();
  auto st = def->check(**p);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(mentions(st.err().message, {"factor"}));
}

TEST(Elementwise, Relu) {
  auto v = run_values("relu", "{}", {t32({4}, {-1, 0, 2, std::nanf("")})});
  expect_close({v[0], v[1], v[2]}, {0, 0, 2});
  EXPECT_TRUE(std::isnan(v[3]));
}

TEST(Elementwise, Activations) {
  const auto x = [] { return t32({4}, {1, -2, 0.5f, 3}); };
  expect_close(run_values("silu", "{}", {x()}), {0.7310585786f, -0.2384058440f, 0.3112296656f, 2.8577223805f});
  expect_close(run_values("tanh", "{}", {x()}), {0.7615941560f, -0.9640275801f, 0.4621171573f, 0.9950547537f});
  expect_close(run_values("sigmoid", "{}", {x()}), {0.7310585786f, 0.1192029220f, 0.6224593312f, 0.9525741268f});
  expect_close(run_values("gelu_quick", "{}", {x()}), {0.8457957659f, -0.0643413769f, 0.3503884366f, 2.9819286903f});
}

TEST(Elementwise, GeluIsTheTanhFormAndGeluExactTheErfForm) {
  const auto x = [] { return t32({4}, {1, -2, 0.5f, 3}); };
  // tanh form (HF gelu_new) and erf form (HF gelu) differ by ~1.5e-4 at x = 1
  expect_close(run_values("gelu", "{}", {x()}), {0.8411919906f, -0.0454023059f, 0.3457140098f, 2.9963626079f}, 1e-7);
  expect_close(run_values("gelu_exact", "{}", {x()}), {0.8413447461f, -0.0455002639f, 0.3457312306f, 2.9959503059f}, 1e-7);
}

TEST(Elementwise, ActivationsStayFiniteForLargeInputs) {
  auto v = run_values("silu", "{}", {t32({2}, {-1000, 1000})});
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[1], 1000.0f);
  v = run_values("sigmoid", "{}", {t32({2}, {-1000, 1000})});
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[1], 1.0f);
}

TEST(Elementwise, Softcap) {
  expect_close(run_values("softcap", R"({"cap": 2})", {t32({2}, {4, -1})}), {1.9280551602f, -0.9242343145f});
  // far beyond the cap the output approaches it
  expect_close(run_values("softcap", R"({"cap": 30})", {t32({1}, {1e6f})}), {30});
}

TEST(Elementwise, SoftcapCapMustBePositive) {
  EXPECT_TRUE(mentions(test::check_error("softcap", R"({"cap": 0})"), {"cap"}));
  EXPECT_TRUE(mentions(test::check_error("softcap", R"({"cap": -3})"), {"cap"}));
  EXPECT_EQ(test::check_error("softcap", R"({"cap": 50})"), "");
  const op_def* def = find_op_def("softcap");
  ASSERT_NE(def, nullptr);
  ops::softcap_params p;
  EXPECT_NE(def->bindable(p, "cap"), nullptr);
  EXPECT_EQ(def->bindable(p, "other"), nullptr);
}

TEST(Elementwise, GatedFeedForward) {
  // silu(1) * 2, silu(-2) * 3
  expect_close(run_values("swiglu", "{}", {t32({2}, {1, -2}), t32({2}, {2, 3})}), {1.4621171573f, -0.7152175321f});
  // gelu_tanh(1) * 2, gelu_tanh(0.5) * -1
  expect_close(run_values("geglu", "{}", {t32({1, 2}, {1, 0.5f}), t32({1, 2}, {2, -1})}), {1.6823839812f, -0.3457140098f});
}

TEST(Elementwise, GatedRefusesAnUpOfAnotherShape) {
  for (const char* op : {"swiglu", "geglu"})
    EXPECT_TRUE(mentions(run_error(op, "{}", {t32({2, 2}, {1, 2, 3, 4}), t32({2}, {1, 2})}), {"input up", "[2]", "[2, 2]"}));
}

TEST(Elementwise, EmptyTensorsAreFine) {
  auto r = test::run_op("silu", "{}", {t32({0, 4}, {})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), (shape_t{0, 4}));
  r = test::run_op("add", "{}", {t32({0, 4}, {}), t32({4}, {1, 2, 3, 4})});
  ASSERT_TRUE(r.ok());
}

TEST(Elementwise, FeaturesAreNone) {
  for (const char* op : {"add", "scale", "softcap", "gelu", "swiglu"}) {
    const op_def* def = find_op_def(op);
    ASSERT_NE(def, nullptr) << op;
    std::vector<std::string> f;
    auto pm = parse_params_text("{}");
    def->features(*pm, 1, f);
    EXPECT_TRUE(f.empty()) << op;
  }
}

}  // namespace
}  // namespace mpakt
