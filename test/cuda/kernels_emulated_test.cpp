// The CUDA kernels' device code run on the CPU (test/cuda/emu/emu.hpp: blocks of std::threads,
// barriers, warp shuffles, poisoned shared memory), so the kernels are checked against the CPU
// reference on every machine, CI's included — mpakt_cuda_tests runs them on a GPU where one
// exists. Covered: attention (kernels/attention.cu with the launch ops/attention.cpp plans:
// ops/attention_plan.hpp) and the decode products and bf16 rounding (kernels/matmul.cu).
// Not covered: cuBLAS, timing, the GPU's own rounding of expf/tanhf.

#include "test/cuda/emu/emu.hpp"  // first: the generated files below are host code through it

#include "cuda_emu/attention.inc"
#include "cuda_emu/matmul.inc"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/ops/attention_plan.hpp"
#include "runtime/dtype.hpp"
#include "runtime/graph.hpp"
#include "test/support/op_checks.hpp"
#include "test/support/op_runner.hpp"

namespace mpakt {
namespace {

namespace emulated = cuda::k::emulated;

using test::random_tensor;

std::unique_ptr<op_params> parse_attention(const std::string& json) {
  auto pm = parse_params_text(json);
  EXPECT_TRUE(pm.ok()) << json;
  auto p = find_op_def("attention")->parse(*pm);
  EXPECT_TRUE(p.ok()) << json;
  return p ? std::move(p).value() : nullptr;
}

/// Attention through the emulated kernel, planned as the CUDA kernel_fn plans it; the device
/// buffers are host copies of exactly the bytes the plan says the device gets.
std::vector<float> emulated_attention(const std::string& params, const std::vector<tensor>& in) {
  auto pp = parse_attention(params);
  const auto& p = static_cast<const ops::attention_params&>(*pp);
  const tensor& q = in[0];
  const tensor& k = in[1];
  const tensor& v = in[2];
  const tensor* bias = in.size() > 3 ? &in[3] : nullptr;
  std::vector<tensor_desc> descs;
  for (const auto& t : in) descs.push_back(t.desc());
  auto out_desc = find_op_def("attention")->infer(shape_query{descs, p});
  EXPECT_TRUE(out_desc.ok());
  auto out = tensor::make(dtype::f32, out_desc->shape);
  cuda::attention_plan plan = cuda::plan_attention(p, q, k, v, bias, *out);
  auto& a = plan.args;
  std::vector<std::byte> k_rows(std::size_t(plan.held) * k.row_bytes()), v_rows(std::size_t(plan.held) * v.row_bytes());
  std::memcpy(k_rows.data(), k.data() + std::size_t(a.key_base) * k.row_bytes(), k_rows.size());
  std::memcpy(v_rows.data(), v.data() + std::size_t(a.key_base) * v.row_bytes(), v_rows.size());
  std::vector<float> slopes(std::size_t(p.heads));
  ops::alibi_slopes(p, slopes.data());
  std::vector<float> result(std::size_t(out->numel()), emu::poison());
  std::vector<float> partial(emulated::attention_partial_floats(a), emu::poison());
  a.q = q.f32();
  a.k = k_rows.data();
  a.v = v_rows.data();
  a.bias = bias ? bias->f32() : nullptr;
  a.slopes = p.alibi != ops::attention_params::alibi_kind::none ? slopes.data() : nullptr;
  a.out = result.data();
  emu::bad_launch = false;
  EXPECT_EQ(emulated::attention(a, partial.data(), nullptr), cudaSuccess) << params;
  return result;
}

void expect_close(const std::vector<float>& got, const tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(std::int64_t(got.size()), want.numel()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double w = want.f32()[i], g = got[i];
    const bool ok = std::isnan(w) ? std::isnan(g) : std::abs(g - w) <= tol * (1 + std::abs(w));
    if (!ok && bad++ < 3) ADD_FAILURE() << what << " [" << i << "]: emulated " << g << ", reference " << w;
  }
}

struct att_case {
  std::string name, params;
  std::int64_t rows, q_width, kv_rows, k_width, v_width, valid;
  dtype kv = dtype::f32;
};

std::vector<tensor> att_inputs(const att_case& c) {
  tensor k = random_tensor({c.kv_rows, c.k_width}, 81), v = random_tensor({c.kv_rows, c.v_width}, 82);
  for (tensor* t : {&k, &v})  // rows past the position: never read (a read would show)
    for (std::int64_t r = c.valid; r < c.kv_rows; ++r)
      for (std::int64_t i = 0; i < t->cols(); ++i) t->f32()[r * t->cols() + i] = c.kv == dtype::f16 ? 6e4f : 1e30f;
  if (c.kv != dtype::f32) {
    k = *convert_tensor(k, c.kv);
    v = *convert_tensor(v, c.kv);
  }
  return {random_tensor({c.rows, c.q_width}, 80), std::move(k), std::move(v)};
}

std::vector<att_case> att_cases() {
  return {
      {"decode_gqa", R"({"heads": 8, "headDim": 64, "kvHeads": 2, "posOffset": 30})", 1, 512, 40, 128, 128, 31},
      {"prefill", R"({"heads": 4, "headDim": 32})", 17, 128, 17, 128, 128, 17},
      {"chunks", R"({"heads": 2, "headDim": 64, "kvHeads": 1, "posOffset": 650})", 1, 128, 700, 64, 64, 651},
      {"chunks_verify", R"({"heads": 4, "headDim": 32, "kvHeads": 2, "posOffset": 700})", 5, 128, 720, 64, 64, 705},
      {"bf16_cache", R"({"heads": 8, "headDim": 64, "kvHeads": 2, "posOffset": 200})", 1, 512, 256, 128, 128, 201, dtype::bf16},
      {"f16_cache", R"({"heads": 4, "headDim": 64, "posOffset": 3})", 3, 256, 8, 256, 256, 6, dtype::f16},
      {"v_head_dim", R"({"heads": 4, "headDim": 48, "kvHeads": 2, "vHeadDim": 20})", 6, 192, 6, 96, 40, 6},
      {"scale_softcap", R"({"heads": 4, "headDim": 64, "scale": 0.3, "softcap": 5})", 9, 256, 9, 256, 256, 9},
      {"window", R"({"heads": 4, "headDim": 32, "kvHeads": 2, "window": 5, "posOffset": 100})", 7, 128, 120, 64, 64, 107},
      {"bidirectional_window", R"({"heads": 2, "headDim": 32, "causal": false, "window": 3})", 10, 64, 10, 64, 64, 10},
      {"alibi", R"({"heads": 6, "headDim": 32, "alibi": true})", 8, 192, 8, 192, 192, 8},
      {"alibi_slopes_long", R"({"heads": 2, "headDim": 32, "alibiSlopes": [0.5, 0.125], "posOffset": 400})", 2, 64, 402, 64,
       64, 402},
  };
}

TEST(CudaKernelsEmulated, AttentionMatchesTheReference) {
  for (const auto& c : att_cases()) {
    const auto in = att_inputs(c);
    auto want = test::run_op("attention", c.params, in);
    ASSERT_TRUE(want.ok()) << c.name << ": " << want.err().message;
    expect_close(emulated_attention(c.params, in), *want, 2e-5, c.name);
  }
  // grid-stride loops over rows and heads: the grid cut to 3 blocks
  emu::row_cap = 3;
  const auto c = att_cases()[1];
  const auto in = att_inputs(c);
  auto want = test::run_op("attention", c.params, in);
  expect_close(emulated_attention(c.params, in), *want, 2e-5, "prefill, 3 blocks");
  emu::row_cap = 0;
}

TEST(CudaKernelsEmulated, AttentionBiasMasksAndNaN) {
  for (bool per_head : {false, true}) {
    const std::int64_t t = 4, s = 700, h = 2;
    tensor bias = random_tensor(per_head ? shape_t{h, t, s} : shape_t{t, s}, 83, -2, 2);
    const float ninf = -std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (std::int64_t r = 0; r < bias.numel() / s; ++r)
      for (std::int64_t j = 0; j < s; ++j) {
        if (r % t == 1) bias.f32()[r * s + j] = ninf;               // a row that sees nothing: zeros
        if (r % t == 2 && j >= 64 && j < 200) bias.f32()[r * s + j] = nan;  // a NaN chunk: zeros, as the reference
      }
    const std::string params = R"({"heads": 2, "headDim": 32, "causal": false})";
    std::vector<tensor> in = {random_tensor({t, h * 32}, 84), random_tensor({s, h * 32}, 85), random_tensor({s, h * 32}, 86),
                              std::move(bias)};
    auto want = test::run_op("attention", params, in);
    ASSERT_TRUE(want.ok());
    expect_close(emulated_attention(params, in), *want, 2e-5, per_head ? "bias per head" : "bias");
  }
}

// A row of a verify pass gets the bits it gets alone (its keys chunked by its own count).
TEST(CudaKernelsEmulated, AttentionRowsGetTheirBitsAlone) {
  // At 2200, a row alone is split into 35 chunks; a pass of 2 rows of 8 heads would take 33 if
  // the launch's rows counted. At 62: 63-64 keys, one chunk or two.
  for (std::int64_t pos : {62, 2200}) {
    const std::string params = R"({"heads": 8, "headDim": 16, "kvHeads": 2, "posOffset": )" + std::to_string(pos) + "}";
    const tensor q = random_tensor({2, 128}, 87), k = random_tensor({2300, 32}, 88), v = random_tensor({2300, 32}, 89);
    const auto pass = emulated_attention(params, {q, k, v});
    for (std::int64_t t = 0; t < 2; ++t) {
      auto row = tensor::make(dtype::f32, {1, 128});
      std::memcpy(row->data(), q.row(t), q.row_bytes());
      const std::string one = R"({"heads": 8, "headDim": 16, "kvHeads": 2, "posOffset": )" + std::to_string(pos + t) + "}";
      const auto alone = emulated_attention(one, {*row, k, v});
      EXPECT_EQ(std::memcmp(alone.data(), pass.data() + t * 128, 128 * sizeof(float)), 0) << "row " << t << " at " << pos;
    }
  }
}

// ---- decode products ----

/// Weights of one dtype at a chosen byte offset from 16-byte alignment (scalar loads then).
struct weights {
  std::vector<unsigned char> storage;
  const void* ptr = nullptr;
};

weights make_weights(cuda::k::weight_type t, const std::vector<float>& w, std::size_t shift) {
  weights out;
  const std::size_t elem = t == cuda::k::weight_type::f32 ? 4 : 2;
  out.storage.assign(w.size() * elem + 64, 0);
  unsigned char* p = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(out.storage.data()) + 15) / 16 * 16) + shift;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (t == cuda::k::weight_type::f32) std::memcpy(p + 4 * i, &w[i], 4);
    else {
      const std::uint16_t b = t == cuda::k::weight_type::bf16 ? f32_to_bf16(w[i]) : f32_to_f16(w[i]);
      std::memcpy(p + 2 * i, &b, 2);
    }
  }
  out.ptr = p;
  return out;
}

float weight_at(cuda::k::weight_type t, const void* p, std::size_t i) {
  std::uint16_t b;
  switch (t) {
    case cuda::k::weight_type::f32: return static_cast<const float*>(p)[i];
    case cuda::k::weight_type::bf16: std::memcpy(&b, static_cast<const char*>(p) + 2 * i, 2); return bf16_to_f32(b);
    case cuda::k::weight_type::f16: std::memcpy(&b, static_cast<const char*>(p) + 2 * i, 2); return f16_to_f32(b);
  }
  return 0;
}

std::vector<float> product(cuda::k::weight_type t, bool trans_b, int rows, std::int64_t kd, std::int64_t nd,
                           const std::vector<float>& w, const std::vector<float>& x, std::size_t shift) {
  const weights wb = make_weights(t, w, shift);
  std::vector<float> out(std::size_t(rows * nd) + 8, 12345.0f);  // a canary past the end
  emu::bad_launch = false;
  EXPECT_EQ(emulated::matmul_few_rows(x.data(), wb.ptr, t, trans_b, rows, kd, nd, out.data(), nullptr), cudaSuccess);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[std::size_t(rows * nd) + i], 12345.0f) << "written past the output";
  out.resize(std::size_t(rows * nd));
  for (int m = 0; m < rows; ++m)
    for (std::int64_t n = 0; n < nd; ++n) {
      double want = 0;
      for (std::int64_t k = 0; k < kd; ++k)
        want += double(x[std::size_t(m * kd + k)]) * weight_at(t, wb.ptr, std::size_t(trans_b ? n * kd + k : k * nd + n));
      const double got = out[std::size_t(m * nd + n)];
      EXPECT_LE(std::abs(got - want), 1e-5 * (1 + std::abs(want)))
          << "dtype " << int(t) << (trans_b ? " transB" : "") << " rows " << rows << " K " << kd << " N " << nd << " at " << m << "," << n;
    }
  return out;
}

TEST(CudaKernelsEmulated, DecodeProductsMatchTheReferenceWithTheSameBitsAloneAndUnaligned) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  struct shape {
    int rows;
    std::int64_t kd, nd;
  };
  const long misaligned_before = emu::misaligned_loads;
  for (auto t : {cuda::k::weight_type::f32, cuda::k::weight_type::bf16, cuda::k::weight_type::f16})
    for (bool tb : {true, false})
      for (shape s : {shape{1, 8, 5}, shape{3, 7, 3}, shape{5, 203, 37}, shape{17, 264, 12}, shape{2, 0, 5}}) {
        std::vector<float> w(std::size_t(s.kd * s.nd)), x(std::size_t(s.rows * s.kd));
        for (auto& v : w) v = d(rng);
        for (auto& v : x) v = d(rng);
        const auto out = product(t, tb, s.rows, s.kd, s.nd, w, x, 0);
        const auto unaligned = product(t, tb, s.rows, s.kd, s.nd, w, x, t == cuda::k::weight_type::f32 ? 4 : 2);
        EXPECT_EQ(std::memcmp(out.data(), unaligned.data(), out.size() * 4), 0) << "scalar loads changed the bits";
        for (int m : {s.rows - 1}) {
          const std::vector<float> xm(x.begin() + m * s.kd, x.begin() + (m + 1) * s.kd);
          const auto alone = product(t, tb, 1, s.kd, s.nd, w, xm, 0);
          EXPECT_EQ(std::memcmp(alone.data(), out.data() + m * s.nd, std::size_t(s.nd) * 4), 0) << "row " << m << " alone";
        }
      }
  EXPECT_GT(emu::vector_loads.load(), 0);
  EXPECT_EQ(emu::misaligned_loads.load(), misaligned_before);
}

TEST(CudaKernelsEmulated, RoundingToBf16IsTheHostsNearestEven) {
  std::vector<std::uint32_t> bits = {0, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7fffffffu, 0xffffffffu,
                                     0x7f800001u, 0x7f7fffffu, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x00000001u};
  std::mt19937 rng(5);
  for (int i = 0; i < 20000; ++i) bits.push_back(rng());
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), bits.size() * 4);
  std::vector<std::uint16_t> out(x.size());
  ASSERT_EQ(emulated::round_to_bf16(x.data(), std::int64_t(x.size()), out.data(), nullptr), cudaSuccess);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) EXPECT_TRUE(std::isnan(bf16_to_f32(out[i]))) << std::hex << bits[i];
    else EXPECT_EQ(out[i], f32_to_bf16(x[i])) << std::hex << bits[i];
  }
}

}  // namespace
}  // namespace mpakt
