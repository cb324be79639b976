#include "backends/cuda/cuda_backend.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <ostream>
#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cuda/context.hpp"
#include "backends/cuda/ops/registry.hpp"
#include "runtime/executor.hpp"
#include "runtime/graph.hpp"
#include "runtime/schema.hpp"
#include "runtime/tensor_store.hpp"
#include "test/support/device_chain.hpp"
#include "test/support/files.hpp"
#include "test/support/op_fixtures.hpp"
#include "test/support/op_checks.hpp"
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

using test::random_tensor;

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

  // matmul / linear. Up to 32 rows, every weight type: the few-rows kernel (one launch per 16
  // rows), its vector loads where K (transB) or N (plain) and the pointers allow, scalar loads
  // otherwise (K = 203, odd N); more rows: SGEMM (f32), widen + SGEMM (f16) or bf16 tensor
  // cores (bf16). Both weight layouts; grids smaller than the columns (grid-stride loops).
  //
  // bf16 weights with more than 32 rows round their activations to bf16 (docs/decisions.md,
  // "bf16 weights in a prefill meet bf16 activations"); the reference does not. Those cases get
  // activations that are bf16 values already (`bf16_acts`), which the rounding must leave as
  // they are, so the product still matches the reference to f32 sums; one case
  // (`_unrounded`) keeps f32 activations, within what the rounding explains.
  auto bf16_acts = [](tensor t) {
    auto back = to_f32(packed(t, dtype::bf16));
    EXPECT_TRUE(back.ok());
    return std::move(back).value();
  };
  auto acts = [=](std::int64_t rows, std::int64_t k, unsigned seed, dtype d) {
    tensor x = random_tensor({rows, k}, seed);
    return d == dtype::bf16 && rows > 32 ? bf16_acts(std::move(x)) : x;
  };
  auto weight = [](shape_t shape, unsigned seed, dtype d) {
    tensor w = random_tensor(std::move(shape), seed);
    return d == dtype::f32 ? w : packed(w, d);
  };
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
      // 16 | 17: one launch | two; 32 | 33: the few-rows kernel | cuBLAS.
      for (std::int64_t rows : {1, 3, 8, 9, 16, 17, 32, 33, 40}) {
        add("matmul_" + dn + "_rows" + std::to_string(rows) + t, "matmul", p,
            [=] { return std::vector{acts(rows, 200, 46, d), weight(w_shape(200, 70), 47, d)}; }, 1e-5);
      }
    }
    for (dtype d : {dtype::f32, dtype::bf16, dtype::f16}) {
      const std::string dn(dtype_name(d));
      // K = 203 (no vector loads: rows of w and a not 16-byte aligned, a cut last run), odd N.
      for (std::int64_t rows : {1, 5, 17, 40}) {
        add("matmul_" + dn + "_k203_rows" + std::to_string(rows) + t, "matmul", p,
            [=] { return std::vector{acts(rows, 203, 100, d), weight(w_shape(203, 37), 101, d)}; }, 1e-5);
      }
      // K and N multiples of 8: vector loads in both layouts.
      add("matmul_" + dn + "_aligned_rows20" + t, "matmul", p,
          [=] { return std::vector{acts(20, 256, 102, d), weight(w_shape(256, 72), 103, d)}; }, 1e-5);
    }
    // A decode step of a model's size (each warp's loads: several runs of a row).
    add("matmul_bf16_decode_k4096" + t, "matmul", p,
        [=] { return std::vector{acts(1, 4096, 104, dtype::bf16), weight(w_shape(4096, 1000), 105, dtype::bf16)}; },
        1e-5);
    // More columns than the grid's blocks take at once (a vocabulary-sized head).
    add("matmul_bf16_wide_n" + t, "matmul", p,
        [=] { return std::vector{acts(2, 24, 106, dtype::bf16), weight(w_shape(24, 140000), 107, dtype::bf16)}; }, 1e-5);
    add("matmul_f16_wide_odd_n" + t, "matmul", p,
        [=] { return std::vector{acts(3, 8, 108, dtype::f16), weight(w_shape(8, 140001), 109, dtype::f16)}; }, 1e-5);
    // NaN activations stay NaN (the whole row), through the rounding too: payloads whose
    // rounding would carry into the sign bit if NaN were rounded like a number.
    for (std::int64_t rows : {5, 40}) {
      add("matmul_bf16_nan_rows" + std::to_string(rows) + t, "matmul", p,
          [=] {
            tensor x = acts(rows, 64, 110, dtype::bf16);
            const std::uint32_t nans[] = {0x7fffffffu, 0xffffffffu, 0x7fc00000u};
            for (int i = 0; i < 3; ++i) std::memcpy(&x.f32()[(2 * i * rows / 6) * 64 + 5 * i], &nans[i], 4);
            return std::vector{std::move(x), weight(w_shape(64, 24), 111, dtype::bf16)};
          },
          1e-5);
    }
    // f32 activations in a bf16 prefill: each moves by at most 2^-9 of itself when rounded,
    // so an output by at most 2^-9 * sum |x w| (< 0.19 here); with random signs the moves
    // mostly cancel, about 2^-9 * sqrt(sum (x w)^2 / 3) (4e-3 at K = 96). The largest
    // difference these inputs give is 1.3e-2 * (1 + |want|), against 2e-2 allowed; a wrong
    // layout or a rounding that mangles the activations is off by far more.
    add("matmul_bf16_rows48_unrounded" + t, "matmul", p,
        [=] { return std::vector{random_tensor({48, 96}, 112), weight(w_shape(96, 40), 113, dtype::bf16)}; }, 2e-2);
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
    add("linear_bf16_prefill" + t, "linear", p,
        [=] {
          return std::vector{acts(40, 80, 57, dtype::bf16), weight(w_shape(80, 24), 58, dtype::bf16), random_tensor({24}, 59)};
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

  // attention: decode and prefill rows, grouped-query heads, KV caches longer than the
  // positions seen (rows past them hold huge values: reading one would show), half-width
  // caches, every parameter, chunked keys (long contexts) merged, rows that see no key.
  auto cache = [](std::int64_t rows, std::int64_t width, std::int64_t valid, unsigned seed) {
    tensor t = random_tensor({rows, width}, seed);
    for (std::int64_t r = valid; r < rows; ++r)
      for (std::int64_t i = 0; i < width; ++i) t.f32()[r * width + i] = 1e30f;
    return t;
  };
  auto att = [&](std::string label, std::string params, std::int64_t rows, std::int64_t q_width, std::int64_t kv_rows,
                 std::int64_t k_width, std::int64_t v_width, std::int64_t valid, dtype kv = dtype::f32, double tol = 2e-5) {
    add("attention_" + label, "attention", params, [=] {
      tensor k = cache(kv_rows, k_width, valid, 81), v = cache(kv_rows, v_width, valid, 82);
      if (kv != dtype::f32) {
        // (the garbage rows must stay finite at half width: f16 holds no 1e30)
        for (tensor* t : {&k, &v})
          for (float& x : t->f32_span()) x = std::abs(x) > 1e20f ? 6e4f : x;
        return std::vector{random_tensor({rows, q_width}, 80), packed(k, kv), packed(v, kv)};
      }
      return std::vector{random_tensor({rows, q_width}, 80), std::move(k), std::move(v)};
    }, tol);
  };
  att("decode_gqa", R"({"heads": 8, "headDim": 64, "kvHeads": 2, "posOffset": 30})", 1, 8 * 64, 40, 2 * 64, 2 * 64, 31);
  att("prefill", R"({"heads": 4, "headDim": 32})", 17, 4 * 32, 17, 4 * 32, 4 * 32, 17);
  att("prefill_at_offset", R"({"heads": 4, "headDim": 32, "kvHeads": 1, "posOffset": 9})", 5, 4 * 32, 64, 32, 32, 14);
  att("long_chunks", R"({"heads": 2, "headDim": 64, "kvHeads": 1, "posOffset": 650})", 1, 2 * 64, 700, 64, 64, 651);
  att("long_chunks_gqa", R"({"heads": 16, "headDim": 128, "kvHeads": 8, "posOffset": 1500})", 1, 16 * 128, 1600,
      8 * 128, 8 * 128, 1501);
  att("bf16_cache", R"({"heads": 8, "headDim": 64, "kvHeads": 2, "posOffset": 200})", 1, 8 * 64, 256, 2 * 64, 2 * 64, 201,
      dtype::bf16);
  att("f16_cache", R"({"heads": 4, "headDim": 64, "kvHeads": 4, "posOffset": 3})", 3, 4 * 64, 8, 4 * 64, 4 * 64, 6,
      dtype::f16);
  att("v_head_dim", R"({"heads": 4, "headDim": 48, "kvHeads": 2, "vHeadDim": 32})", 6, 4 * 48, 6, 2 * 48, 2 * 32, 6);
  att("scale_softcap", R"({"heads": 4, "headDim": 64, "scale": 0.3, "softcap": 5})", 9, 4 * 64, 9, 4 * 64, 4 * 64, 9);
  att("window_causal", R"({"heads": 4, "headDim": 32, "kvHeads": 2, "window": 5, "posOffset": 100})", 7, 4 * 32, 120,
      2 * 32, 2 * 32, 107);
  att("window_bidirectional", R"({"heads": 2, "headDim": 32, "causal": false, "window": 3})", 10, 2 * 32, 10, 2 * 32,
      2 * 32, 10);
  att("not_causal", R"({"heads": 2, "headDim": 32, "causal": false})", 5, 2 * 32, 12, 2 * 32, 2 * 32, 12);
  att("alibi_bloom", R"({"heads": 6, "headDim": 32, "alibi": true})", 8, 6 * 32, 8, 6 * 32, 6 * 32, 8);
  att("alibi_mpt", R"({"heads": 4, "headDim": 32, "alibiMax": 8})", 8, 4 * 32, 8, 4 * 32, 4 * 32, 8);
  att("alibi_slopes", R"({"heads": 2, "headDim": 32, "alibiSlopes": [0.5, 0.125], "posOffset": 4})", 3, 2 * 32, 7,
      2 * 32, 2 * 32, 7);
  att("head_dim_256", R"({"heads": 2, "headDim": 256, "posOffset": 80})", 2, 2 * 256, 82, 2 * 256, 2 * 256, 82);
  // a bias masking every key of some rows (they output zeros) and some keys of others
  for (bool per_head : {false, true}) {
    add(std::string("attention_bias") + (per_head ? "_per_head" : ""), "attention", R"({"heads": 2, "headDim": 32})",
        [per_head] {
          const std::int64_t t = 4, s = 4, h = 2;
          tensor bias = random_tensor(per_head ? shape_t{h, t, s} : shape_t{t, s}, 83, -2, 2);
          const float ninf = -std::numeric_limits<float>::infinity();
          for (std::int64_t r = 0; r < bias.numel() / s; ++r)
            for (std::int64_t j = 0; j < s; ++j)
              if (r % t == 1 || (r % t == 3 && j == 0)) bias.f32()[r * s + j] = ninf;
          return std::vector{random_tensor({t, h * 32}, 84), random_tensor({s, h * 32}, 85), random_tensor({s, h * 32}, 86),
                             std::move(bias)};
        },
        2e-5);
  }
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

// The op table's golden fixtures (PyTorch and transformers, test/fixtures/ops) through the
// real parser, validator and executor on the CUDA backend: its kernels where they claim a
// step, the CPU's kernels for the rest, every case within its fixture's tolerance.
class CudaOpTable : public CudaTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(CudaOpTable, MatchesGoldens) {
  const std::string& op = GetParam();
  rapidjson::Document doc;
  const std::string text = test::read_file((test::op_fixtures_dir() / (op + ".json")).string());
  doc.Parse(text.c_str());
  ASSERT_FALSE(doc.HasParseError()) << op << ".json is not valid JSON";
  int n = 0;
  for (const auto& c : doc["cases"].GetArray()) {
    EXPECT_EQ(test::run_case(c, *backend_), "") << op << " on cuda";
    ++n;
  }
  EXPECT_GT(n, 0) << op << " has no cases";
}

INSTANTIATE_TEST_SUITE_P(ops, CudaOpTable, ::testing::ValuesIn(test::fixture_ops()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(CudaOpTableFixtures, AreFound) { EXPECT_GE(test::fixture_ops().size(), 30u) << test::op_fixtures_dir(); }

using CudaBackend = CudaTest;

// The chain graph of test/support/device_chain.hpp with its values kept on the GPU between
// CUDA kernels (device_values.hpp): everything equals the same graph on the CPU backend
// (reference kernels) within f32 rounding, after one run and after two of the same plan.
TEST_F(CudaBackend, ValuesStayOnTheDeviceBetweenKernelsAndComeBackWhenRead) {
  cpu_backend reference(cpu_backend::config{true});
  const auto want = test::run_chain(reference, 1).values;
  ASSERT_EQ(want.size(), 8u);
  for (int runs : {1, 2}) {
    const auto got = test::run_chain(*backend_, runs).values;
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, w] : want) {
      const auto& v = got.at(name);
      ASSERT_EQ(v.size(), w.size()) << name;
      std::int64_t bad = 0;
      for (std::size_t i = 0; i < w.size(); ++i)
        if (!(std::abs(double(v[i]) - double(w[i])) <= 1e-4 * (1.0 + std::abs(double(w[i])))) && bad++ < 3)
          ADD_FAILURE() << name << "[" << i << "]: cuda " << v[i] << ", reference " << w[i] << " (runs " << runs << ")";
    }
  }
}

TEST_F(CudaBackend, NamesItselfAndItsDevice) {
  EXPECT_EQ(backend_->name(), "cuda");
  EXPECT_GE(backend_->device(), 0);
  EXPECT_FALSE(backend_->device_name().empty());
  EXPECT_FALSE(backend_->features().empty());
}

// docs/decisions.md, "A row is the same bits alone, batched or verified": a row of a verify
// pass or of a batch gets the bits it gets alone, on the GPU as on the CPU — attention (each
// row's keys split into chunks by its own key count) and the decode products (sums in an
// order that depends on K and N only).
TEST_F(CudaBackend, RowsGetTheirBitsAloneInAVerifyPassOrBatch) {
  auto row_of = [](const tensor& t, std::int64_t r) {
    auto one = tensor::make(dtype::f32, {1, t.cols()});
    EXPECT_TRUE(one.ok());
    std::memcpy(one->data(), t.row(r), t.row_bytes());
    return std::move(*one);
  };
  auto same_row = [](const tensor& batch, std::int64_t r, const tensor& alone, const std::string& what) {
    EXPECT_EQ(std::memcmp(batch.row(r), alone.data(), alone.nbytes()), 0) << what << ": row " << r;
  };
  // attention: 5 rows at positions 1000..1004 and 60..64 (chunk counts change at 64 keys)
  for (std::int64_t pos : {1000, 60}) {
    const std::string params = R"({"heads": 8, "headDim": 64, "kvHeads": 2, "posOffset": )" + std::to_string(pos) + "}";
    const tensor q = random_tensor({5, 8 * 64}, 95), k = random_tensor({1100, 2 * 64}, 96), v = random_tensor({1100, 2 * 64}, 97);
    auto p = parse("attention", params);
    ASSERT_NE(p, nullptr);
    kernel_fn fn = backend_->kernel("attention", descs_of({q, k, v}), *p);
    ASSERT_NE(fn, nullptr);
    auto pass = run_op("attention", params, {q, k, v}, fn);
    ASSERT_TRUE(pass.ok()) << pass.err().message;
    for (std::int64_t t = 0; t < 5; ++t) {
      const std::string one = R"({"heads": 8, "headDim": 64, "kvHeads": 2, "posOffset": )" + std::to_string(pos + t) + "}";
      auto alone = run_op("attention", one, {row_of(q, t), k, v}, fn);
      ASSERT_TRUE(alone.ok()) << alone.err().message;
      same_row(*pass, t, *alone, "attention at " + std::to_string(pos));
    }
  }
  // products: a row alone and in batches of 3, 16, 20 and 32 rows, bf16 and f32, both layouts
  for (dtype d : {dtype::bf16, dtype::f32})
    for (bool tb : {false, true}) {
      const std::string params = tb ? R"({"transB": true})" : "{}";
      const tensor w = packed(random_tensor(tb ? shape_t{300, 256} : shape_t{256, 300}, 98), d);
      for (std::int64_t rows : {3, 16, 20, 32}) {
        const tensor x = random_tensor({rows, 256}, 99);
        auto p = parse("matmul", params);
        ASSERT_NE(p, nullptr);
        kernel_fn fn = backend_->kernel("matmul", descs_of({x, w}), *p);
        ASSERT_NE(fn, nullptr);
        auto batch = run_op("matmul", params, {x, w}, fn);
        ASSERT_TRUE(batch.ok()) << batch.err().message;
        for (std::int64_t r : {std::int64_t(0), rows - 1}) {
          auto alone = run_op("matmul", params, {row_of(x, r), w}, fn);
          ASSERT_TRUE(alone.ok()) << alone.err().message;
          same_row(*batch, r, *alone, std::string(dtype_name(d)) + (tb ? " transB" : "") + " batch of " + std::to_string(rows));
        }
      }
    }
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
  EXPECT_NE(std::find(host.begin(), host.end(), "moe"), host.end());
  for (const char* op : {"matmul", "attention"}) EXPECT_EQ(std::find(host.begin(), host.end(), op), host.end()) << op;
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
