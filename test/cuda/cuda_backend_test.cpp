#include "backends/cuda/cuda_backend.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <ostream>
#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/context.hpp"
#include "backends/cuda/ops/registry.hpp"
#include "runtime/graph.hpp"
#include "runtime/schema.hpp"
#include "test/support/op_runner.hpp"

// Every CUDA kernel against the CPU reference kernel (cpu_backend::reference) on random
// inputs: one row per case in cuda_cases(). Adding a CUDA kernel adds its rows here.
//
// Suites:
//   CudaOps, CudaBackend   need a GPU; skipped when cuda_device_count() == 0.
//   CudaKernelSelection    which steps the CUDA backend claims (no device needed).
//   CudaNoDevice           behaviour without a GPU (skipped when there is one).

namespace mpakt {
namespace {

using test::run_op;

// ---- inputs ----

tensor random_tensor(shape_t shape, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  auto t = tensor::make(dtype::f32, std::move(shape));
  EXPECT_TRUE(t.ok());
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (float& v : t->f32_span()) v = d(rng);
  return std::move(t).value();
}

tensor values(shape_t shape, std::vector<float> v) {
  auto t = make_f32(std::move(shape), v);
  EXPECT_TRUE(t.ok());
  return std::move(t).value();
}

tensor packed(const tensor& t, dtype d) {
  auto p = convert_tensor(t, d);
  EXPECT_TRUE(p.ok());
  return std::move(p).value();
}

/// A whole-valued id tensor: `n` ids in [lo, hi).
tensor ids(std::int64_t n, unsigned seed, int lo, int hi) {
  auto t = tensor::make(dtype::f32, {n});
  EXPECT_TRUE(t.ok());
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi - 1);
  for (float& v : t->f32_span()) v = float(d(rng));
  return std::move(t).value();
}

// ---- the table ----

struct op_case {
  std::string label;  ///< test name suffix: letters, digits, underscores
  std::string op;
  std::string params;  ///< JSON object
  std::function<std::vector<tensor>()> inputs;  ///< called once per run: fresh tensors
  double tol = 1e-6;  ///< |got - want| <= tol * (1 + |want|)
};

/// gtest prints the label, not the struct's bytes.
void PrintTo(const op_case& c, std::ostream* os) { *os << c.op << " " << c.params; }

std::vector<op_case> cuda_cases() {
  std::vector<op_case> c;
  auto add = [&](std::string label, std::string op, std::string params, std::function<std::vector<tensor>()> in,
                 double tol = 1e-6) { c.push_back({std::move(label), std::move(op), std::move(params), std::move(in), tol}); };

  // Elementwise, with every broadcast of b; one case big enough for the grid-stride loops.
  for (const char* op : {"add", "sub", "mul"}) {
    const std::string o = op;
    add(o + "_full", o, "{}", [] { return std::vector{random_tensor({4, 37}, 1), random_tensor({4, 37}, 2)}; });
    add(o + "_row", o, "{}", [] { return std::vector{random_tensor({2, 5, 33}, 3), random_tensor({33}, 4)}; });
    add(o + "_scalar", o, "{}", [] { return std::vector{random_tensor({3, 7}, 5), random_tensor({1}, 6)}; });
    add(o + "_scalar_0d", o, "{}", [] { return std::vector{random_tensor({3, 7}, 7), random_tensor({}, 8)}; });
  }
  add("add_large", "add", "{}", [] { return std::vector{random_tensor({1000, 1031}, 9), random_tensor({1031}, 10)}; });
  add("scale", "scale", R"({"factor": 0.125})", [] { return std::vector{random_tensor({9, 65}, 11, -100, 100)}; });
  add("scale_negative", "scale", R"({"factor": -3.7})", [] { return std::vector{random_tensor({513}, 12)}; });
  add("silu", "silu", "{}", [] { return std::vector{random_tensor({17, 129}, 13, -30, 30)}; });
  add("gelu", "gelu", "{}", [] { return std::vector{random_tensor({17, 129}, 14, -10, 10)}; });
  add("swiglu", "swiglu", "{}", [] { return std::vector{random_tensor({6, 300}, 15, -8, 8), random_tensor({6, 300}, 16)}; });

  // Normalisations.
  add("softmax", "softmax", "{}", [] { return std::vector{random_tensor({7, 1000}, 17, -50, 50)}; });
  add("softmax_wide_row", "softmax", "{}", [] { return std::vector{random_tensor({32000}, 18, -20, 20)}; });
  add("softmax_one_column", "softmax", "{}", [] { return std::vector{random_tensor({5, 1}, 19)}; });
  add("softmax_masked", "softmax", "{}", [] {
    const float ninf = -std::numeric_limits<float>::infinity();
    return std::vector{values({2, 4}, {0.5f, ninf, 2.0f, ninf, ninf, ninf, ninf, 1.0f})};
  });
  add("rmsnorm", "rmsnorm", "{}", [] { return std::vector{random_tensor({6, 256}, 20, -4, 4), random_tensor({256}, 21)}; });
  add("rmsnorm_eps_offset", "rmsnorm", R"({"eps": 1e-5, "weightOffset": 1})",
      [] { return std::vector{random_tensor({3, 2, 100}, 22), random_tensor({100}, 23)}; });
  add("rmsnorm_groups", "rmsnorm", R"({"groupSize": 64})",
      [] { return std::vector{random_tensor({5, 4 * 64}, 24), random_tensor({64}, 25)}; });
  add("rmsnorm_wide", "rmsnorm", "{}", [] { return std::vector{random_tensor({3, 5000}, 26), random_tensor({5000}, 27)}; });

  // rope: every layout, partial rotation, and the frequency variants (shared with the CPU).
  auto q = [](unsigned seed) { return [seed] { return std::vector{random_tensor({7, 4 * 64}, seed)}; }; };
  add("rope_half", "rope", R"({"headDim": 64})", q(30));
  add("rope_offset_base", "rope", R"({"headDim": 64, "offset": 4093, "base": 500000})", q(31));
  add("rope_interleaved", "rope", R"({"headDim": 64, "interleaved": true, "offset": 17})", q(32));
  add("rope_partial", "rope", R"({"headDim": 64, "rotaryDim": 32, "offset": 3})", q(33));
  add("rope_partial_interleaved", "rope", R"({"headDim": 64, "rotaryDim": 16, "interleaved": true})", q(34));
  add("rope_linear", "rope", R"({"headDim": 64, "offset": 100, "scaling": {"rope_type": "linear", "factor": 4}})", q(35));
  add("rope_llama3", "rope",
      R"({"headDim": 64, "offset": 9000, "base": 500000, "scaling": {"rope_type": "llama3", "factor": 8,)"
      R"( "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 8192}})",
      q(36));
  add("rope_dynamic", "rope",
      R"({"headDim": 64, "offset": 40, "scaling": {"rope_type": "dynamic", "factor": 2, "max_position_embeddings": 16}})",
      q(37));
  add("rope_attention_factor", "rope", R"({"headDim": 64, "offset": 5, "attentionFactor": 0.75})", q(38));

  // matmul / linear: f32 through cuBLAS; bf16 and f16 through the few-rows kernel (<= 8 rows)
  // and the widen + SGEMM path (more rows); both weight layouts.
  for (bool tb : {false, true}) {
    const std::string t = tb ? "_transB" : "";
    const std::string p = tb ? R"({"transB": true})" : "{}";
    auto w_shape = [tb](std::int64_t k, std::int64_t n) { return tb ? shape_t{n, k} : shape_t{k, n}; };
    add("matmul_f32" + t, "matmul", p, [=] { return std::vector{random_tensor({5, 64}, 40), random_tensor(w_shape(64, 48), 41)}; }, 1e-5);
    add("matmul_f32_3d" + t, "matmul", p,
        [=] { return std::vector{random_tensor({2, 3, 96}, 42), random_tensor(w_shape(96, 33), 43)}; }, 1e-5);
    add("matmul_f32_big" + t, "matmul", p,
        [=] { return std::vector{random_tensor({67, 512}, 44), random_tensor(w_shape(512, 300), 45)}; }, 2e-5);
    for (dtype d : {dtype::bf16, dtype::f16}) {
      const std::string dn(dtype_name(d));
      for (std::int64_t rows : {1, 3, 8, 9, 40}) {
        add("matmul_" + dn + "_rows" + std::to_string(rows) + t, "matmul", p,
            [=] { return std::vector{random_tensor({rows, 200}, 46), packed(random_tensor(w_shape(200, 70), 47), d)}; },
            1e-5);
      }
    }
    add("linear_f32" + t, "linear", p,
        [=] { return std::vector{random_tensor({4, 80}, 48), random_tensor(w_shape(80, 24), 49), random_tensor({24}, 50)}; },
        1e-5);
    add("linear_bf16" + t, "linear", p,
        [=] {
          return std::vector{random_tensor({2, 80}, 51), packed(random_tensor(w_shape(80, 24), 52), dtype::bf16),
                             random_tensor({24}, 53)};
        },
        1e-5);
    add("linear_bf16_many_rows" + t, "linear", p,
        [=] {
          return std::vector{random_tensor({20, 80}, 54), packed(random_tensor(w_shape(80, 24), 55), dtype::bf16),
                             random_tensor({24}, 56)};
        },
        1e-5);
  }
  add("linear_empty_k", "linear", "{}",
      [] { return std::vector{random_tensor({3, 0}, 57), random_tensor({0, 5}, 58), random_tensor({5}, 59)}; });

  // embedding: in-range ids, out-of-range ids (zeros), packed tables, a non-whole id (error).
  add("embedding_f32", "embedding", "{}", [] { return std::vector{ids(20, 60, 0, 50), random_tensor({50, 40}, 61)}; });
  add("embedding_out_of_range", "embedding", "{}", [] {
    return std::vector{values({6}, {-1, 0, 49, 50, 1e9f, -0.0f}), random_tensor({50, 40}, 62)};
  });
  add("embedding_bf16", "embedding", "{}",
      [] { return std::vector{ids(9, 63, 0, 100), packed(random_tensor({100, 64}, 64), dtype::bf16)}; });
  add("embedding_f16", "embedding", "{}",
      [] { return std::vector{ids(9, 65, 0, 100), packed(random_tensor({100, 64}, 66), dtype::f16)}; });
  add("embedding_not_whole", "embedding", "{}",
      [] { return std::vector{values({3}, {1, 2.5f, 3}), random_tensor({10, 8}, 67)}; });

  // argmax: random rows, ties (lowest index wins), NaN (first NaN wins), -inf rows, 1-D.
  add("argmax", "argmax", "{}", [] { return std::vector{random_tensor({9, 1000}, 70)}; });
  add("argmax_wide_row", "argmax", "{}", [] { return std::vector{random_tensor({2, 151936}, 71)}; });
  add("argmax_one_d", "argmax", "{}", [] { return std::vector{random_tensor({777}, 72)}; });
  add("argmax_ties_nan_inf", "argmax", "{}", [] {
    const float nan = std::numeric_limits<float>::quiet_NaN(), ninf = -std::numeric_limits<float>::infinity();
    return std::vector{values({4, 5}, {1, 3, 2, 3, 3,  //
                                       0, 1, nan, 5, nan,
                                       ninf, ninf, ninf, ninf, ninf,
                                       nan, 1, 2, 3, 4})};
  });
  return c;
}

// ---- comparing ----

/// got matches want: same shape, and each value within tol * (1 + |want|) (NaN matches NaN).
void expect_close(const tensor& got, const tensor& want, double tol) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.type(), dtype::f32);
  const float* g = got.f32();
  const float* w = want.f32();
  std::int64_t bad = 0;
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const bool ok = std::isnan(w[i]) ? std::isnan(g[i])
                    : std::isinf(w[i]) ? g[i] == w[i]
                                       : std::abs(double(g[i]) - double(w[i])) <= tol * (1.0 + std::abs(double(w[i])));
    if (!ok && bad++ < 5) ADD_FAILURE() << "element " << i << ": cuda " << g[i] << ", reference " << w[i];
  }
  EXPECT_EQ(bad, 0) << "of " << want.numel() << " elements";
}

/// The parsed params of `op` (the test fails when they do not parse).
std::unique_ptr<op_params> parse(const std::string& op, const std::string& json) {
  const op_def* def = find_op_def(op);
  EXPECT_NE(def, nullptr) << op;
  if (!def) return nullptr;
  auto pm = parse_params_text(json);
  EXPECT_TRUE(pm.ok()) << json;
  if (!pm) return nullptr;
  auto p = def->parse(*pm);
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.err().message);
  if (!p) return nullptr;
  return std::move(p).value();
}

std::vector<tensor_desc> descs_of(const std::vector<tensor>& ts) {
  std::vector<tensor_desc> d;
  for (const auto& t : ts) d.push_back(t.desc());
  return d;
}

// ---- suites that need a GPU ----

class CudaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (cuda_device_count() == 0 || backend_) return;
    auto be = cuda_backend::create();
    if (be) backend_ = std::move(be).value().release();
    else create_error_ = be.err().message;
  }
  static void TearDownTestSuite() {
    delete backend_;
    backend_ = nullptr;
  }
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ASSERT_NE(backend_, nullptr) << "cuda_backend::create failed: " << create_error_;
  }

  /// Runs `c` on the CPU reference and on the CUDA kernel the backend picks; compares.
  void check_case(const op_case& c) {
    auto params = parse(c.op, c.params);
    ASSERT_NE(params, nullptr);
    kernel_fn fn = backend_->kernel(c.op, descs_of(c.inputs()), *params);
    ASSERT_NE(fn, nullptr) << "the CUDA backend did not claim this step";
    auto want = run_op(c.op, c.params, c.inputs());
    auto got = run_op(c.op, c.params, c.inputs(), fn);
    ASSERT_EQ(got.ok(), want.ok()) << (got.ok() ? "reference failed: " + want.err().message
                                                : "cuda failed: " + got.err().message);
    if (!want.ok()) {
      EXPECT_EQ(got.err().message, want.err().message);
      return;
    }
    expect_close(*got, *want, c.tol);
  }

  static cuda_backend* backend_;
  static std::string create_error_;
};

cuda_backend* CudaTest::backend_ = nullptr;
std::string CudaTest::create_error_;

class CudaOps : public CudaTest, public ::testing::WithParamInterface<op_case> {};

TEST_P(CudaOps, MatchesCpuReference) { check_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(All, CudaOps, ::testing::ValuesIn(cuda_cases()),
                         [](const ::testing::TestParamInfo<op_case>& i) { return i.param.label; });

using CudaBackend = CudaTest;

TEST_F(CudaBackend, NamesItselfAndItsDevice) {
  EXPECT_EQ(backend_->name(), "cuda");
  EXPECT_GE(backend_->device(), 0);
  EXPECT_FALSE(backend_->device_name().empty());
  EXPECT_FALSE(backend_->features().empty());
}

TEST_F(CudaBackend, ScratchGrowsAndShrinksBetweenCalls) {
  // Large, small, large again: scratch slots are reused and regrown, results stay right.
  const auto cases = cuda_cases();
  for (const char* label : {"add_large", "add_full", "add_large", "matmul_f32_big", "matmul_f32", "add_row"})
    for (const auto& c : cases)
      if (c.label == label) check_case(c);
}

TEST_F(CudaBackend, KernelsRunFromSeveralThreads) {
  // Calls lock the context: threads never share its stream or cuBLAS handle mid-call.
  const auto cases = cuda_cases();
  const op_case* mm = nullptr;
  for (const auto& c : cases)
    if (c.label == "matmul_f32_big_transB") mm = &c;
  ASSERT_NE(mm, nullptr);
  auto params = parse(mm->op, mm->params);
  kernel_fn fn = backend_->kernel(mm->op, descs_of(mm->inputs()), *params);
  ASSERT_NE(fn, nullptr);
  auto want = run_op(mm->op, mm->params, mm->inputs());
  ASSERT_TRUE(want.ok());
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        auto got = run_op(mm->op, mm->params, mm->inputs(), fn);
        if (!got.ok() || got->numel() != want->numel()) {
          ++failures[std::size_t(t)];
          continue;
        }
        for (std::int64_t j = 0; j < want->numel(); ++j)
          if (std::abs(got->f32()[j] - want->f32()[j]) > 2e-5 * (1 + std::abs(want->f32()[j]))) {
            ++failures[std::size_t(t)];
            break;
          }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

TEST_F(CudaBackend, AnotherBackendComesAndGoes) {
  // A second backend becomes current; once destroyed, the first one is current again.
  {
    auto second = cuda_backend::create();
    ASSERT_TRUE(second.ok()) << second.err().message;
    for (const auto& c : cuda_cases())
      if (c.label == "softmax") check_case(c);
  }
  for (const auto& c : cuda_cases())
    if (c.label == "rmsnorm") check_case(c);
}

TEST_F(CudaBackend, EachThreadRunsOnTheContextItsWorkerActivated) {
  // Two workers' backends (as `mpakt serve --backend cuda --workers 2` makes): the one created
  // last is current process-wide, yet a thread that activated the other runs there.
  auto first = cuda_backend::create();
  ASSERT_TRUE(first.ok()) << first.err().message;
  auto second = cuda_backend::create();
  ASSERT_TRUE(second.ok()) << second.err().message;
  EXPECT_EQ(cuda::current_context(), (*second)->context());
  std::thread([&] {
    (*first)->activate();
    EXPECT_EQ(cuda::current_context(), (*first)->context());
    for (const auto& c : cuda_cases())
      if (c.label == "rmsnorm") check_case(c);
    (*second)->activate();
    EXPECT_EQ(cuda::current_context(), (*second)->context());
  }).join();
  EXPECT_EQ(cuda::current_context(), (*second)->context());  // (the test's thread activated none)
}

kernel_fn selected(const std::string& op, const std::string& params, const std::vector<tensor_desc>& in);

TEST_F(CudaBackend, AWeightIsCopiedToTheDeviceOnceAndReadThereAfter) {
  // (issue: CUDA workers, residency) A call marking its weight immutable (as the executor does
  // for model weights) reads the device's kept copy: one copy for three calls, the right
  // numbers each time; another weight, wherever it lands, gets its own copy.
  auto ctx = cuda::current_context();
  ASSERT_NE(ctx, nullptr);
  auto stats = [&] {
    std::lock_guard lk(ctx->mutex());
    return std::pair{ctx->weights().uploads(), ctx->weights().hits()};
  };
  const tensor x = random_tensor({3, 64}, 91);
  auto check_weight = [&](const tensor& w) {
    const auto want = run_op("matmul", R"({"transB": true})", {x, w});
    ASSERT_TRUE(want.ok());
    kernel_fn fn = selected("matmul", R"({"transB": true})", {x.desc(), w.desc()});
    ASSERT_NE(fn, nullptr);
    for (int i = 0; i < 3; ++i) {
      auto got = run_op("matmul", R"({"transB": true})", {x, w}, fn, 0b10);
      ASSERT_TRUE(got.ok()) << got.err().message;
      for (std::int64_t j = 0; j < want->numel(); ++j)
        ASSERT_NEAR(got->f32()[j], want->f32()[j], 1e-4f * (1 + std::fabs(want->f32()[j]))) << "call " << i << " at " << j;
    }
  };
  const auto before = stats();
  check_weight(*convert_tensor(random_tensor({48, 64}, 92), dtype::bf16));
  auto after = stats();
  EXPECT_EQ(after.first, before.first + 1);
  EXPECT_EQ(after.second, before.second + 2);
  check_weight(*convert_tensor(random_tensor({48, 64}, 93), dtype::bf16));
  EXPECT_EQ(stats().first, before.first + 2);
}

TEST_F(CudaBackend, NoSuchDeviceIsUnavailable) {
  auto be = cuda_backend::create({.device = cuda_device_count()});
  ASSERT_FALSE(be.ok());
  EXPECT_EQ(be.err().code, errc::unavailable);
}

// ---- which steps the CUDA backend claims (no device needed) ----

/// The kernel cuda_backend::kernel would pick for these inputs.
kernel_fn selected(const std::string& op, const std::string& params, const std::vector<tensor_desc>& in) {
  auto p = parse(op, params);
  if (!p) return nullptr;
  return cuda::select_kernel(op, in, *p);
}

TEST(CudaKernelSelection, EveryCaseIsClaimed) {
  for (const auto& c : cuda_cases())
    EXPECT_NE(selected(c.op, c.params, descs_of(c.inputs())), nullptr) << c.label;
}

TEST(CudaKernelSelection, QuantizedWeightsFallBackToTheCpu) {
  const tensor_desc x{dtype::f32, {2, 64}};
  for (dtype d : {dtype::q8, dtype::q4}) {
    EXPECT_EQ(selected("matmul", R"({"transB": true})", {x, {d, {16, 64}}}), nullptr) << dtype_name(d);
    EXPECT_EQ(selected("linear", "{}", {x, {d, {64, 32}}, {dtype::f32, {32}}}), nullptr) << dtype_name(d);
    EXPECT_EQ(selected("embedding", "{}", {{dtype::f32, {3}}, {d, {10, 64}}}), nullptr) << dtype_name(d);
  }
  EXPECT_NE(selected("matmul", R"({"transB": true})", {x, {dtype::bf16, {16, 64}}}), nullptr);
}

TEST(CudaKernelSelection, OpsWithoutCudaKernelsFallBackToTheCpu) {
  const tensor_desc x{dtype::f32, {2, 8}};
  EXPECT_EQ(selected("relu", "{}", {x}), nullptr);
  EXPECT_EQ(selected("layernorm", "{}", {x, {dtype::f32, {8}}, {dtype::f32, {8}}}), nullptr);
  EXPECT_EQ(cuda::select_kernel("no_such_op", {}, no_params{}), nullptr);
}

// The ops a GPU worker declares it runs on the CPU (pool[].hostOps): exactly the catalogue's
// ops with no CUDA kernel, each once, sorted.
TEST(CudaKernelSelection, HostOpsAreTheCataloguesOpsWithoutACudaKernel) {
  const auto host = cuda::host_ops();
  EXPECT_TRUE(std::is_sorted(host.begin(), host.end()));
  std::set<std::string> with_kernel;
  for (const auto& k : cuda::cuda_kernels()) with_kernel.insert(std::string(k.op));
  std::set<std::string> all(host.begin(), host.end());
  EXPECT_EQ(all.size(), host.size());
  for (const auto& op : host) EXPECT_EQ(with_kernel.count(op), 0u) << op;
  all.insert(with_kernel.begin(), with_kernel.end());
  std::set<std::string> catalogue;
  for (const auto& op : schema::instance().ops()) catalogue.insert(op.name);
  EXPECT_EQ(all, catalogue);
  EXPECT_NE(std::find(host.begin(), host.end(), "attention"), host.end());
  EXPECT_EQ(std::find(host.begin(), host.end(), "matmul"), host.end());
}

TEST(CudaKernelSelection, DimensionsPastCublasRangeFallBackToTheCpu) {
  const std::int64_t big = std::int64_t(1) << 32;
  EXPECT_EQ(selected("matmul", "{}", {{dtype::f32, {2, 8}}, {dtype::f32, {8, big}}}), nullptr);
}

// ---- without a GPU ----

TEST(CudaNoDevice, CreateIsUnavailable) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  auto be = cuda_backend::create();
  ASSERT_FALSE(be.ok());
  EXPECT_EQ(be.err().code, errc::unavailable);
  EXPECT_NE(be.err().message.find("no usable CUDA device: "), std::string::npos) << be.err().message;
}

TEST(CudaNoDevice, ProbeSaysWhyInCudasWords) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  auto n = cuda_probe();
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.err().code, errc::unavailable);
  // CUDA's error name in parentheses (cudaErrorNoDevice, cudaErrorInsufficientDriver, ...),
  // or the driver's plain "none".
  const auto& m = n.err().message;
  EXPECT_TRUE(m.find("(cudaError") != std::string::npos || m.find("reports none") != std::string::npos) << m;
}

TEST(CudaNoDevice, KernelWithoutABackendIsAnError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  const std::vector<tensor> in{random_tensor({2, 3}, 1), random_tensor({2, 3}, 2)};
  kernel_fn fn = selected("add", "{}", descs_of(in));
  ASSERT_NE(fn, nullptr);
  auto r = run_op("add", "{}", in, fn);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::internal);
  EXPECT_NE(r.err().message.find("'add'"), std::string::npos) << r.err().message;
}

}  // namespace
}  // namespace mpakt
