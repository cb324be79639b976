// The fast CPU kernels on every instruction-set level this machine supports
// (backends/cpu/isa.hpp), against the reference kernels: matmul/linear for every weight dtype
// (float weights to f32 rounding; q8/q4 within the bound their int16 activations allow) and
// attention (to f32 rounding), on one thread and split over two.

#include "backends/cpu/isa.hpp"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/fast/isa_kernels.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "runtime/executor.hpp"
#include "runtime/ops/matmul_params.hpp"
#include "runtime/row_bits.hpp"
#include "runtime/tensor_store.hpp"
#include "test/support/levels.hpp"
#include "test/support/op_checks.hpp"

namespace mpakt {
namespace {

using test::random_f32;
using test::run_values;

/// Restores one kernel thread after a test that used two.
struct threads_guard {
  ~threads_guard() { cpu_fast::set_kernel_threads(1); }
};

/// A graph compiled on the CPU backend over an empty store, its inputs bound from `in`; null
/// (and a test failure) when it does not build or bind.
struct compiled_graph {
  tensor_store store;
  tensor_store::source src{store, std::vector<std::string>{}};
  cpu_backend be;
  std::unique_ptr<executable_graph> g;
};
std::unique_ptr<compiled_graph> compile_on_cpu(const std::string& text, const std::map<std::string, tensor>& in) {
  auto decl = parse_graph_text(text, true);
  EXPECT_TRUE(decl.ok()) << decl.err().message;
  if (!decl) return nullptr;
  auto c = std::make_unique<compiled_graph>();
  build_options o;
  o.compiled = true;
  auto g = executable_graph::build(std::move(*decl), c->src, c->be, o);
  EXPECT_TRUE(g.ok()) << g.err().message;
  if (!g) return nullptr;
  c->g = std::move(*g);
  for (const auto& [name, t] : in) {
    auto bound = c->g->bind_input(name, std::span<const float>(t.f32(), t.numel()));
    EXPECT_TRUE(bound.ok()) << name;
    if (!bound) return nullptr;
  }
  return c;
}

TEST(CpuIsa, LevelsFollowTheFeatures) {
  const auto& f = cpu_isa::detected();
  const auto best = cpu_isa::best();
  if (best >= cpu_isa::level::avx2) {
    EXPECT_TRUE(f.avx2 && f.fma && f.f16c);
  }
  if (best >= cpu_isa::level::avx512) {
    EXPECT_TRUE(f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq);
  }
  if (best >= cpu_isa::level::avx512_vnni) {
    EXPECT_TRUE(f.avx512_vnni);
  }
  if (best >= cpu_isa::level::avx512_bf16) {
    EXPECT_TRUE(f.avx512_bf16);
  }
  if (best >= cpu_isa::level::amx) {
    EXPECT_TRUE(f.amx_tile && f.amx_bf16 && f.amx_int8 && f.amx_granted);
  }
  EXPECT_LE(cpu_isa::current(), best);
  EXPECT_EQ(cpu_isa::supported_levels().back(), best);
  EXPECT_FALSE(cpu_isa::describe().empty());
}

// The kernels string a worker reports ends with the arithmetic revision, so spot-checks demand
// equal bits only between workers whose kernels compute the same bits (checked_worker.hpp).
TEST(CpuIsa, TheKernelsLineNamesLevelFeaturesAndArithmetic) {
  const std::string d = cpu_isa::describe();
  EXPECT_EQ(d.rfind(std::string(cpu_isa::level_name(cpu_isa::current())) + " (", 0), 0u) << d;
  const std::string tail = ", arithmetic " + std::to_string(cpu_isa::arithmetic_revision) + ")";
  ASSERT_GE(d.size(), tail.size());
  EXPECT_EQ(d.substr(d.size() - tail.size()), tail) << d;
  // and says when quantized matrices are held in lanes (every level from AVX2), on every level
  test::level_guard g;
  for (auto l : cpu_isa::supported_levels()) {
    ASSERT_TRUE(cpu_isa::set_level(l));
    const bool lanes = l >= cpu_isa::level::avx2;
    EXPECT_EQ(cpu_isa::describe().find(", q8/q4 in lanes") != std::string::npos, lanes) << cpu_isa::describe();
    EXPECT_EQ(cpu_backend{}.holds_in_lanes(), lanes) << cpu_isa::level_name(l);
  }
}

TEST(CpuIsa, LevelCanBeLoweredNotRaised) {
  test::level_guard g;
  EXPECT_TRUE(cpu_isa::set_level(cpu_isa::level::scalar));
  EXPECT_EQ(cpu_isa::current(), cpu_isa::level::scalar);
  if (cpu_isa::best() < cpu_isa::level::amx) {
    EXPECT_FALSE(cpu_isa::set_level(cpu_isa::level::amx));
  }
  for (auto l : cpu_isa::supported_levels()) {
    EXPECT_EQ(cpu_isa::level_from_name(cpu_isa::level_name(l)), l);
    EXPECT_TRUE(cpu_isa::set_level(l));
  }
  EXPECT_FALSE(cpu_isa::level_from_name("avx1024").has_value());
}

/// A kernel setting of the environment that names nothing known is reported (the banners print
/// these lines), not silently ignored.
TEST(CpuIsa, MistypedKernelSettingsAreNamed) {
  // (destroyed last, once the environment is back: the choices it made are made again)
  struct choose_again {
    ~choose_again() {
      cpu_isa::prefer_avx_vnni(std::nullopt);
      cpu_isa::prefer_bf16_pairs(std::nullopt);
    }
  } again;
  struct env_guard {
    const char* name;
    std::optional<std::string> old;
    explicit env_guard(const char* n) : name(n) {
      if (const char* v = std::getenv(n)) old = v;
      ::unsetenv(n);
    }
    ~env_guard() {
      if (old) ::setenv(name, old->c_str(), 1);
      else ::unsetenv(name);
    }
  } level("MPAKT_CPU_LEVEL"), pairs("MPAKT_BF16_PAIRS"), vnni("MPAKT_AVX_VNNI");
  EXPECT_TRUE(cpu_isa::setting_problems().empty());
  ::setenv("MPAKT_CPU_LEVEL", "avx3", 1);
  auto p = cpu_isa::setting_problems();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_NE(p[0].find("MPAKT_CPU_LEVEL=avx3 names no kernel level (scalar, avx2"), std::string::npos) << p[0];
  ::setenv("MPAKT_CPU_LEVEL", "scalar", 1);
  EXPECT_TRUE(cpu_isa::setting_problems().empty());
  if (cpu_isa::best() < cpu_isa::level::amx) {
    ::setenv("MPAKT_CPU_LEVEL", "amx", 1);
    p = cpu_isa::setting_problems();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_NE(p[0].find("above what this CPU has"), std::string::npos) << p[0];
  }
  ::unsetenv("MPAKT_CPU_LEVEL");
  ::setenv("MPAKT_BF16_PAIRS", "yes", 1);
  ::setenv("MPAKT_AVX_VNNI", "off", 1);
  p = cpu_isa::setting_problems();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "MPAKT_BF16_PAIRS=yes is neither on nor off; the default is used");
  ::setenv("MPAKT_AVX_VNNI", "0", 1);
  EXPECT_EQ(cpu_isa::setting_problems().size(), 2u);
  // a test's choice given back returns to the environment's
  if (cpu_isa::detected().avx_vnni && cpu_isa::best() >= cpu_isa::level::avx2) {
    test::level_guard g;
    ASSERT_TRUE(cpu_isa::set_level(cpu_isa::level::avx2));
    ::setenv("MPAKT_AVX_VNNI", "off", 1);
    cpu_isa::prefer_avx_vnni(true);
    EXPECT_TRUE(cpu_isa::avx_vnni_dots());
    cpu_isa::prefer_avx_vnni(std::nullopt);
    EXPECT_FALSE(cpu_isa::avx_vnni_dots());
  }
}

TEST(CpuIsa, BackendPicksKernelsOfTheCurrentLevel) {
  test::level_guard g;
  cpu_backend be;
  auto params = find_op_def("matmul")->parse(*parse_params_text(R"({"transB": true})"));
  std::vector<tensor_desc> in{{dtype::f32, {1, 64}}, {dtype::q8, {32, 64}}};
  for (auto l : cpu_isa::supported_levels()) {
    cpu_isa::set_level(l);
    const std::string_view v = be.variant("matmul", in, **params);
    // the kernel chosen never needs more than the level allows
    auto picked = cpu_isa::level_from_name(v);
    ASSERT_TRUE(picked.has_value()) << v;
    EXPECT_LE(*picked, l);
  }
}

/// x [rows, k] with every value rounded to bf16 (nearest even) and widened again: the
/// activations a bf16 product with the many-row numbers takes.
tensor rounded_to_bf16(const tensor& x) {
  std::vector<float> v(x.f32(), x.f32() + x.numel());
  for (float& e : v) e = bf16_to_f32(f32_to_bf16(e));
  return test::t32(x.shape(), std::move(v));
}

/// |fast − ref| for a product whose activations were quantized to int16 per block of 32:
/// each block's rounding moves a value by at most s/2 (s = max|x|/32639), so the product
/// moves by at most Σ|w|·s/2 over the block; plus f32 rounding of the sums.
std::vector<double> int_bounds(const tensor& x, const tensor& w_f32, double levels) {
  const std::int64_t rows = x.rows(), k = x.cols(), n = w_f32.shape()[0];
  std::vector<double> out(std::size_t(rows * n));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < n; ++j) {
      double bound = 0, mag = 0;
      for (std::int64_t b = 0; b < k / 32; ++b) {
        double amax = 0, wsum = 0;
        for (int i = 0; i < 32; ++i) {
          amax = std::max(amax, double(std::fabs(x.f32()[r * k + b * 32 + i])));
          wsum += std::fabs(w_f32.f32()[j * k + b * 32 + i]);
          mag += std::fabs(double(x.f32()[r * k + b * 32 + i]) * w_f32.f32()[j * k + b * 32 + i]);
        }
        bound += wsum * amax / levels / 2.0;
      }
      out[std::size_t(r * n + j)] = bound * 1.001 + 1e-5 * mag + 1e-6;
    }
  return out;
}

TEST(FastMatmul, EveryLevelAgreesWithTheReference) {
  threads_guard tg;
  const auto levels = test::fast_kernels_on_this_cpu("matmul");
  ASSERT_FALSE(levels.empty());
  unsigned seed = 500;
  for (int threads : {1, 2}) {
    cpu_fast::set_kernel_threads(threads);
    for (const auto& lk : levels)
      for (dtype t : {dtype::f32, dtype::bf16, dtype::f16, dtype::q8, dtype::q4}) {
        // (q4's VNNI kernel takes blocks four at a time: a last quad of 1, 2, 3 or 4 blocks)
        std::vector<std::int64_t> ks = {32, 64, 96, 128, 160, 576};
        if (!is_quantized(t)) ks.insert(ks.end(), {1, 5, 17, 33, 100});
        for (std::int64_t k : ks)
          for (std::int64_t rows : {1, 2, 3, 4, 5, 7, 9, 16, 17}) {
            const std::int64_t n = 1 + (rows * 7 + k) % 13 + (rows == 16 ? 1536 : 0);
            SCOPED_TRACE(lk.level + " " + std::string(dtype_name(t)) + " rows " + std::to_string(rows) + " K " +
                         std::to_string(k) + " N " + std::to_string(n) + " threads " + std::to_string(threads));
            const tensor x = random_f32({rows, k}, ++seed);
            const tensor w = random_f32({n, k}, ++seed, 0.5f);
            const tensor bias = random_f32({n}, ++seed);
            const tensor wp = t == dtype::f32 ? w : *convert_tensor(w, t);
            // (AMX has its own bound: AmxProductsAgreeWithinTheirSplitBound)
            if (lk.level == "amx" || !lk.claims({x, wp, bias}, R"({"transB": true})")) continue;
            const auto want = run_values("linear", R"({"transB": true})", {x, wp, bias});
            const auto got = run_values("linear", R"({"transB": true})", {x, wp, bias}, lk.fn);
            ASSERT_EQ(got.size(), want.size());
            if (is_quantized(t)) {
              const auto bounds = int_bounds(x, *to_f32(wp), cpu_fast::int16_levels);
              for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], bounds[i]) << "at " << i;
            } else {
              test::expect_close(got, want, 1e-6 * double(k) + 1e-5, 1e-5);
            }
          }
      }
  }
}

/// The kernels' rounding of activations to bf16 (AVX2's, as f32; AVX512-BF16's, as pairs) is
/// the converter's (runtime/dtype.hpp): nearest even, ties included, overflow to infinity, NaN
/// kept and quiet, subnormals rounded like any value — at every length (vector tails).
TEST(FastMatmul, Bf16RoundingOfActivationsIsTheConvertersOnEveryLevel) {
  if (cpu_isa::best() < cpu_isa::level::avx2) GTEST_SKIP() << "no vector level here";
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.5f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                          std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xff812345u),  // signalling NaNs
                          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::bit_cast<float>(0x3f808000u), std::bit_cast<float>(0x3f818000u),  // ties: down, up
                          std::bit_cast<float>(0x3f808001u), std::bit_cast<float>(0x00008000u),  // above a tie; subnormal tie
                          std::bit_cast<float>(0x0001ffffu), std::bit_cast<float>(0x807fffffu)};
  const tensor noise = random_f32({1, 300}, 77, 1e3f);
  v.insert(v.end(), noise.f32(), noise.f32() + 300);
  for (std::size_t count : {std::size_t(1), std::size_t(7), std::size_t(16), std::size_t(17), v.size()}) {
    SCOPED_TRACE("count " + std::to_string(count));
    std::vector<float> out(count, 7.0f);
    cpu_fast::avx2::round_to_bf16(v.data(), 1, std::int64_t(count), out.data(), false);
    for (std::size_t i = 0; i < count; ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(out[i]), std::uint32_t(f32_to_bf16(v[i])) << 16) << "value " << i;
    // in a panel's order: two rows of `count`, each row's pairs swapped (a last value alone stays)
    std::vector<float> swapped(2 * count, 7.0f);
    cpu_fast::avx2::round_to_bf16(v.data(), 2, std::int64_t(count / 2), swapped.data(), true);
    const std::size_t half = count / 2;
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t i = 0; i < half; ++i) {
        const std::size_t from = (i ^ 1) < half ? i ^ 1 : i;
        ASSERT_EQ(std::bit_cast<std::uint32_t>(swapped[r * half + i]), std::uint32_t(f32_to_bf16(v[r * half + from])) << 16)
            << "row " << r << " value " << i;
      }
    if (cpu_isa::best() < cpu_isa::level::avx512_bf16) continue;
    // as pairs: two rows of `count` values each, the odd row's last pair padded with zero
    std::vector<float> two(v.begin(), v.begin() + std::ptrdiff_t(count));
    two.insert(two.end(), v.rbegin(), v.rbegin() + std::ptrdiff_t(count));
    const std::size_t kp = (count + 1) / 2;
    std::vector<std::uint32_t> pairs(2 * kp, 0xdeadbeefu);
    cpu_fast::avx512_bf16::round_pairs(two.data(), std::int64_t(count), 0, 2, pairs.data());
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t i = 0; i < 2 * kp; ++i) {
        const std::uint32_t word = pairs[r * kp + i / 2];
        const std::uint16_t half = std::uint16_t(i % 2 ? word >> 16 : word & 0xffffu);
        ASSERT_EQ(half, i < count ? f32_to_bf16(two[r * count + i]) : 0) << "row " << r << " value " << i;
      }
  }
}

/// The AMX product (bf16 weights, many rows) takes the activations rounded to bf16, as every
/// bf16 product with the many-row numbers does: within f32 sums of the reference's product of
/// the rounded activations, and within Σ|x·w|·2⁻⁸ of the reference's on the activations given.
TEST(FastMatmul, AmxProductsTakeBf16RoundedActivations) {
  threads_guard tg;
  if (cpu_isa::best() < cpu_isa::level::amx) GTEST_SKIP() << "no AMX here";
  kernel_fn amx = nullptr;
  for (const auto& lk : test::fast_kernels_on_this_cpu("linear"))
    if (lk.level == "amx") amx = lk.fn;
  ASSERT_NE(amx, nullptr);
  unsigned seed = 700;
  for (int threads : {1, 2}) {
    cpu_fast::set_kernel_threads(threads);
    for (std::int64_t rows : {33, 47, 64, 128, 130})
      for (std::int64_t k : {32, 64, 576})
        for (std::int64_t n : {16, 17, 48, 100, 576}) {
          SCOPED_TRACE("rows " + std::to_string(rows) + " K " + std::to_string(k) + " N " + std::to_string(n) +
                       " threads " + std::to_string(threads));
          const tensor x = random_f32({rows, k}, ++seed);
          const tensor rounded = rounded_to_bf16(x);
          const tensor w = *convert_tensor(random_f32({n, k}, ++seed, 0.5f), dtype::bf16);
          const tensor bias = random_f32({n}, ++seed);
          const auto want = run_values("linear", R"({"transB": true})", {x, w, bias});
          const auto want_rounded = run_values("linear", R"({"transB": true})", {rounded, w, bias});
          const auto got = run_values("linear", R"({"transB": true})", {x, w, bias}, amx);
          ASSERT_EQ(got.size(), want.size());
          const tensor wf = *to_f32(w);
          for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t j = 0; j < n; ++j) {
              double mag = std::fabs(bias.f32()[j]);
              for (std::int64_t i = 0; i < k; ++i) mag += std::fabs(double(x.f32()[r * k + i]) * wf.f32()[j * k + i]);
              const std::size_t at = std::size_t(r * n + j);
              ASSERT_NEAR(got[at], want_rounded[at], mag * 1e-5 + 1e-6) << "row " << r << " col " << j;
              ASSERT_NEAR(got[at], want[at], mag * (1.0 / 256 + 1e-5) + 1e-6) << "row " << r << " col " << j;
            }
        }
  }
}

/// q8/q4 products with many rows (prefill) — on AMX-INT8 tiles, VNNI's int8 pairs where
/// there are no tiles, or AVX2's eight-column lanes — quantize activations to int8 per block
/// of 32 (s = max|x|/127): within Σ|w|·s/2 per block of the reference. Each is checked
/// wherever the CPU has it.
TEST(FastMatmul, ManyRowIntegerProductsAgreeWithinTheirInt8Bound) {
  threads_guard tg;
  // the kernels that claim a 33-row q8 product but not an f32 one: AMX's tiles, VNNI's pairs
  // and AVX2's lanes, all with int8 activations from 33 rows on
  const tensor probe_w = *convert_tensor(random_f32({16, 64}, 1), dtype::q8);
  std::vector<test::level_kernel> kernels;
  for (const auto& lk : test::fast_kernels_on_this_cpu("linear"))
    if (lk.claims({random_f32({33, 64}, 2), probe_w}, R"({"transB": true})") &&
        !lk.claims({random_f32({33, 64}, 3), random_f32({16, 64}, 4)}, R"({"transB": true})"))
      kernels.push_back(lk);
  if (kernels.empty()) GTEST_SKIP() << "no many-row integer kernel here";
  unsigned seed = 800;
  for (const auto& lk : kernels)
    for (int threads : {1, 2}) {
      cpu_fast::set_kernel_threads(threads);
      for (dtype t : {dtype::q8, dtype::q4})
        for (std::int64_t rows : {33, 35, 38, 40, 128})
          for (std::int64_t k : {32, 96, 576})
            for (std::int64_t n : {5, 16, 33, 64}) {
              SCOPED_TRACE(lk.level + " " + std::string(dtype_name(t)) + " rows " + std::to_string(rows) + " K " +
                           std::to_string(k) + " N " + std::to_string(n) + " threads " + std::to_string(threads));
              const tensor x = random_f32({rows, k}, ++seed);
              const tensor w = *convert_tensor(random_f32({n, k}, ++seed, 0.5f), t);
              const tensor bias = random_f32({n}, ++seed);
              const auto want = run_values("linear", R"({"transB": true})", {x, w, bias});
              const auto got = run_values("linear", R"({"transB": true})", {x, w, bias}, lk.fn);
              ASSERT_EQ(got.size(), want.size());
              // AMX's tail columns (N mod 16) take the int16 path, whose bound is smaller still
              const auto bounds = int_bounds(x, *to_f32(w), 127);
              for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], bounds[i]) << "at " << i;
            }
    }
}

/// The fast kernels here that take a 33-row product of `t` weights but not a 16-row one: the
/// blocked products (AMX aside), and AVX512-BF16's pairs for bf16.
std::vector<test::level_kernel> many_row_float_kernels(dtype t) {
  std::vector<test::level_kernel> kernels;
  const tensor w16 = t == dtype::f32 ? random_f32({16, 64}, 4) : *convert_tensor(random_f32({16, 64}, 4), t);
  for (const auto& lk : test::fast_kernels_on_this_cpu("linear"))
    if (lk.level != "amx" && lk.claims({random_f32({33, 64}, 2), w16}, R"({"transB": true})") &&
        !lk.claims({random_f32({16, 64}, 3), w16}, R"({"transB": true})"))
      kernels.push_back(lk);
  return kernels;
}

/// Float products with many rows (prefill) run as blocked products with the columns in the
/// lanes: each output sums in order of k in runs of 64, so it stays within f32 rounding of the
/// reference for long rows too. The order is pinned bit for bit on every level the machine
/// has, against a scalar model — a fused multiply-add chain over each run from +0, the runs'
/// sums added in order, then the bias — so any panel or tile shape, prefetching or thread
/// split keeps it, and AVX2's and AVX-512's prefill rows are the same bits without a machine
/// that has both to compare them. bf16 weights meet their activations rounded to bf16 (nearest
/// even) and take k in pairs, a pair's second value first — the order of AVX512-BF16's dot
/// product, whose kernel is pinned to the same model: within Σ|x·w|·2⁻⁸ of the reference (each
/// activation moves by at most 2⁻⁸ of itself), and exactly the bits of an f32 product on the
/// rounded activations (every product is exact).
TEST(FastMatmul, ManyRowFloatProductsAgreeAndAddInRunsOf64) {
  threads_guard tg;
  const test::bf16_pairs_guard pairs(true);  // (the pairs kernel pinned too, whatever this core prefers)
  unsigned seed = 1000;
  int checked = 0;
  for (int threads : {1, 2}) {
    cpu_fast::set_kernel_threads(threads);
    for (dtype t : {dtype::f32, dtype::bf16, dtype::f16}) {
      const auto kernels = many_row_float_kernels(t);
      for (std::int64_t rows : {33, 38, 128, 530})  // (530: two blocks of rows)
        for (std::int64_t k : {1, 7, 64, 100, 576, 1536, 4160, 4161})  // (4160: two chunks of k; 4161 an odd one)
          for (std::int64_t n : {5, 16, 33, 70}) {
            if (rows * k > 128 * 1536 && (n != 33 || t != dtype::bf16)) continue;  // (the long ones once)
            SCOPED_TRACE(std::string(dtype_name(t)) + " rows " + std::to_string(rows) + " K " + std::to_string(k) + " N " +
                         std::to_string(n) + " threads " + std::to_string(threads));
            const tensor x = random_f32({rows, k}, ++seed);
            const tensor w0 = random_f32({n, k}, ++seed, 0.5f);
            const tensor w = t == dtype::f32 ? w0 : *convert_tensor(w0, t);
            const tensor bias = random_f32({n}, ++seed);
            const auto want = run_values("linear", R"({"transB": true})", {x, w, bias});
            const auto wf = test::values_of(w);  // (the stored values, widened exactly)
            const bool pairs = t == dtype::bf16;
            const tensor xa = pairs ? rounded_to_bf16(x) : x;  // (the activations the kernels take)
            const float* xr = xa.f32();
            std::vector<float> runs(want.size());
            for (std::int64_t r = 0; r < rows; ++r)
              for (std::int64_t j = 0; j < n; ++j) {
                auto term = [&](std::int64_t i, float acc) { return std::fma(xr[std::size_t(r * k + i)], wf[std::size_t(j * k + i)], acc); };
                float tot = 0;
                for (std::int64_t c0 = 0; c0 < k; c0 += 64) {
                  const std::int64_t c1 = std::min<std::int64_t>(k, c0 + 64);
                  float run = 0;
                  std::int64_t i = c0;
                  if (pairs)
                    for (; i + 1 < c1; i += 2) run = term(i, term(i + 1, run));
                  for (; i < c1; ++i) run = term(i, run);
                  tot = c0 == 0 ? run : tot + run;
                }
                runs[std::size_t(r * n + j)] = tot + bias.f32()[j];
              }
            for (const auto& lk : kernels) {
              const auto got = run_values("linear", R"({"transB": true})", {x, w, bias}, lk.fn);
              ASSERT_EQ(got.size(), want.size());
              ++checked;
              for (std::size_t e = 0; e < runs.size(); ++e)
                ASSERT_EQ(std::bit_cast<std::uint32_t>(got[e]), std::bit_cast<std::uint32_t>(runs[e]))
                    << lk.level << " at " << e << ": " << got[e] << " against the runs' " << runs[e];
              for (std::int64_t r = 0; r < rows; ++r)
                for (std::int64_t j = 0; j < n; ++j) {
                  double mag = std::fabs(bias.f32()[j]);
                  for (std::int64_t i = 0; i < k; ++i) mag += std::fabs(double(x.f32()[r * k + i]) * wf[std::size_t(j * k + i)]);
                  const std::size_t at = std::size_t(r * n + j);
                  ASSERT_NEAR(got[at], want[at], mag * ((pairs ? 1.0 / 256 : 0.0) + 1e-5) + 1e-6)
                      << lk.level << " row " << r << " col " << j;
                }
            }
          }
    }
  }
  if (cpu_isa::best() >= cpu_isa::level::avx2) {
    EXPECT_GT(checked, 0);
  }
}

/// Where vdpbf16ps issues below the FMA rate (a Sapphire Rapids: 0.62–0.72 of it), the level
/// without tiles takes a bf16 prefill's products on the f32 panels: the pairs kernel then
/// claims nothing, and the product the backend picks gives the pairs' bits (both multiply the
/// rounded activations exactly, in the same order). The measured rate is 0 without
/// AVX512-BF16 and positive with it.
TEST(FastMatmul, Bf16PrefillTakesThePanelsWherePairsIssueSlowly) {
  threads_guard tg;
  test::level_guard lg;
  if (cpu_isa::best() < cpu_isa::level::avx512_bf16) {
    EXPECT_EQ(cpu_isa::bf16_dot_rate(), 0.0);
    GTEST_SKIP() << "no AVX512-BF16 here";
  }
  EXPECT_GT(cpu_isa::bf16_dot_rate(), 0.0);
  ASSERT_TRUE(cpu_isa::set_level(cpu_isa::level::avx512_bf16));
  const tensor x = random_f32({40, 576}, 71);
  const tensor w = *convert_tensor(random_f32({70, 576}, 72, 0.1f), dtype::bf16);
  const std::vector<tensor_desc> d{x.desc(), w.desc()};
  ops::matmul_params p;
  p.trans_b = true;
  std::vector<float> by_pairs;
  for (bool on : {true, false}) {
    const test::bf16_pairs_guard pairs(on);
    int pair_kernels = 0;
    for (const auto& k : cpu_fast_kernels())
      if ((k.op == "matmul" || k.op == "linear") && k.variant == "avx512_bf16" && k.accepts(d, p)) ++pair_kernels;
    EXPECT_EQ(pair_kernels, on ? 2 : 0) << (on ? "pairs on" : "pairs off");
    for (int threads : {1, 2}) {
      cpu_fast::set_kernel_threads(threads);
      const auto got = run_values("matmul", R"({"transB": true})", {x, w});
      if (by_pairs.empty()) by_pairs = got;
      ASSERT_EQ(got.size(), by_pairs.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(by_pairs[i]))
            << (on ? "pairs" : "panels") << " threads " << threads << " at " << i;
    }
  }
}

/// VNNI's many-row product (sixteen columns in the lanes, vpdpbusd) computes AVX2's lanes
/// kernel's integers and applies the scales in the same order: the same bits, so a prefill
/// gives the same caches on either kind of machine without tiles.
TEST(FastMatmul, VnniLanesGiveTheBitsOfAvx2Lanes) {
  if (cpu_isa::best() < cpu_isa::level::avx512_vnni) GTEST_SKIP() << "no VNNI here";
  unsigned seed = 900;
  for (auto t : {cpu_fast::wtype::q8, cpu_fast::wtype::q4})
    for (std::int64_t rows : {1, 7, 8, 33, 45})
      for (std::int64_t k : {32, 96, 576})
        for (std::int64_t n : {5, 16, 17, 40}) {
          SCOPED_TRACE(std::string(t == cpu_fast::wtype::q8 ? "q8" : "q4") + " rows " + std::to_string(rows) + " K " +
                       std::to_string(k) + " N " + std::to_string(n));
          const tensor x = random_f32({rows, k}, ++seed, 2.0f);
          const tensor w = *convert_tensor(random_f32({n, k}, ++seed, 0.5f), t == cpu_fast::wtype::q8 ? dtype::q8 : dtype::q4);
          const tensor bias = random_f32({n}, ++seed);
          const std::int64_t blocks = k / 32;
          std::vector<std::int8_t> q(std::size_t(rows * k));
          std::vector<float> scale(std::size_t(rows * blocks)), sums(scale.size());
          std::vector<std::int32_t> qsums(scale.size());
          cpu_fast::avx2::int8_quantize_rows(x.f32(), k, 0, rows, q.data(), scale.data(), sums.data(), qsums.data());
          cpu_fast::int8_lanes_product p;
          p.x = cpu_fast::int8_plain_rows{q.data(), scale.data(), sums.data(), rows, k, qsums.data()};
          p.w = reinterpret_cast<const std::uint8_t*>(w.data());
          p.w_row_bytes = std::int64_t(w.nbytes()) / n;
          p.type = t;
          p.bias = bias.f32();
          p.n = n;
          std::vector<float> a(std::size_t(rows * n), -1.0f), b(a.size(), -2.0f);
          p.y = a.data();
          cpu_fast::avx2::int8_lanes_range(p, 0, n);
          p.y = b.data();
          // in two column ranges, as threads would split it (a group of sixteen, then the rest)
          const std::int64_t cut = n > 16 ? 16 : n;
          cpu_fast::avx512_vnni::int8_lanes_range(p, 0, cut);
          if (cut < n) cpu_fast::avx512_vnni::int8_lanes_range(p, cut, n);
          for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(std::bit_cast<std::uint32_t>(a[i]), std::bit_cast<std::uint32_t>(b[i])) << "at " << i << ": " << a[i] << " vs " << b[i];
        }
}

TEST(FastMatmul, AmxActivationPackingMatchesItsOneValueAtATimeForm) {
  if (cpu_isa::best() < cpu_isa::level::amx) GTEST_SKIP() << "no AMX here";
  for (std::int64_t rows : {1, 16, 37}) {
    tensor x = random_f32({rows, 96}, unsigned(rows) + 3, 3.0f);
    // rounding's edges: a tie (to even), subnormals (one rounding up to the least normal), a
    // NaN made quiet, infinities, the largest float (rounding to infinity)
    const std::uint32_t edges[] = {0x3f808000u, 0x3f818000u, 0x00000001u, 0x807fffffu, 0x007fffffu,
                                   0x7f800001u, 0xff800000u, 0x7f800000u, 0x7f7fffffu, 0x80000000u};
    for (std::size_t i = 0; i < std::size(edges); ++i) x.f32()[i * 7 % std::size_t(rows * 96)] = std::bit_cast<float>(edges[i]);
    const std::int64_t n = cpu_fast::amx::packed_halves(rows, 96);
    const auto size = static_cast<std::size_t>(n);
    std::vector<std::uint16_t> hv(size), lv(size), hr(size), lr(size);
    const std::int64_t blocks = (rows + 15) / 16;
    cpu_fast::amx::pack_activations(x.f32(), rows, 96, 0, blocks, hv.data(), lv.data());
    cpu_fast::amx::pack_activations_reference(x.f32(), rows, 96, 0, blocks, hr.data(), lr.data());
    EXPECT_EQ(hv, hr) << rows;
    EXPECT_EQ(lv, lr) << rows;
    std::vector<std::uint16_t> alone(size);  // (hi alone: no lo asked for)
    cpu_fast::amx::pack_activations(x.f32(), rows, 96, 0, blocks, alone.data(), nullptr);
    EXPECT_EQ(alone, hr) << rows;
  }
}

TEST(FastMatmul, QuantizedProductsUseInt16ActivationsAndStillPropagateNaN) {
  // The integer path really runs: an activation below half its block's quantization step is
  // lost (the float path would keep it), and a NaN activation still gives NaN outputs.
  for (const auto& lk : test::fast_kernels_on_this_cpu("matmul")) {
    if (lk.level == "scalar" || lk.level == "amx") continue;
    SCOPED_TRACE(lk.level);
    std::vector<float> xv(32, 0.0f), wv(4 * 32, 0.0f);
    xv[0] = 1.0f;
    xv[1] = 1e-6f;  // below half of 1/32639: quantizes to 0
    for (int j = 0; j < 4; ++j) wv[std::size_t(j * 32 + 1)] = 1.0f;
    for (dtype t : {dtype::q8, dtype::q4}) {
      const tensor x = test::t32({1, 32}, xv), w = *convert_tensor(test::t32({4, 32}, wv), t);
      if (!lk.claims({x, w}, R"({"transB": true})")) continue;  // (the many-row kernels)
      const auto wf = test::values_of(w);
      const auto got = run_values("matmul", R"({"transB": true})", {x, w}, lk.fn);
      const auto ref = run_values("matmul", R"({"transB": true})", {x, w});
      for (int j = 0; j < 4; ++j) {
        // what the weights give for x[0] alone, and what the reference adds for x[1]
        EXPECT_FLOAT_EQ(got[std::size_t(j)], wf[std::size_t(j * 32)]) << dtype_name(t);
        EXPECT_NE(got[std::size_t(j)], ref[std::size_t(j)]) << dtype_name(t);
      }
      auto nan_x = xv;
      nan_x[5] = NAN;
      const auto nan = run_values("matmul", R"({"transB": true})", {test::t32({1, 32}, nan_x), w}, lk.fn);
      for (float v : nan) EXPECT_TRUE(std::isnan(v)) << dtype_name(t);
    }
  }
}

TEST(FastMatmul, ActivationQuantizationIsTheSameOnEveryLevel) {
  // so a volunteer's tokens do not depend on which vector unit it has
  if (cpu_isa::best() < cpu_isa::level::avx512) GTEST_SKIP() << "one integer level only";
  const tensor x = random_f32({3, 96}, 77);
  std::vector<std::int16_t> qa(3 * 96), qb(3 * 96);
  std::vector<float> sa(9), sb(9), ua(9), ub(9);
  cpu_fast::avx2::quantize_rows(x.f32(), 96, 0, 3, qa.data(), sa.data(), ua.data());
  cpu_fast::avx512::quantize_rows(x.f32(), 96, 0, 3, qb.data(), sb.data(), ub.data());
  EXPECT_EQ(qa, qb);
  EXPECT_EQ(sa, sb);
  EXPECT_EQ(ua, ub);
  if (cpu_isa::best() < cpu_isa::level::avx512_vnni) return;
  // VNNI's two int8 planes hold exactly those values: q = 256·hi + lo, in the pair (q8) and
  // quad (q4) layouts; 5 blocks of 160 values: q8 two full pairs and a lone block, q4 a full
  // quad and a quad of one block
  const tensor x5 = random_f32({3, 160}, 78);
  std::vector<std::int16_t> q5(3 * 160);
  std::vector<float> s5(15), u5(15);
  cpu_fast::avx512::quantize_rows(x5.f32(), 160, 0, 3, q5.data(), s5.data(), u5.data());
  for (cpu_fast::wtype t : {cpu_fast::wtype::q8, cpu_fast::wtype::q4}) {
    const std::int64_t plane = cpu_fast::int8_rows_plane_bytes(t, 160), per_row = cpu_fast::int8_rows_scales(t, 160);
    EXPECT_EQ(plane, t == cpu_fast::wtype::q8 ? 3 * 64 : 2 * 128);
    std::vector<std::uint8_t> hi(std::size_t(3 * plane), 0xAB), lo(hi.size(), 0xAB);
    std::vector<float> sc(std::size_t(3 * per_row), 7.0f);
    cpu_fast::avx512_vnni::int16_split_quantize_rows(x5.f32(), 160, 0, 3, t, hi.data(), lo.data(), sc.data());
    for (std::int64_t r = 0; r < 3; ++r) {
      for (std::int64_t b = 0; b < 5; ++b) {
        for (std::int64_t i = 0; i < 32; ++i) {
          // q8: natural order, hi offset by 128, lo unsigned; q4: a quad's even values, then its odd ones
          const std::size_t at = t == cpu_fast::wtype::q8
                                     ? std::size_t(r * plane + (b / 2) * 64 + (b % 2) * 32 + i)
                                     : std::size_t(r * plane + (b / 4) * 128 + (i % 2) * 64 + (b % 4) * 16 + i / 2);
          const int h = t == cpu_fast::wtype::q8 ? int(hi[at]) - 128 : int(std::int8_t(hi[at]));
          const int l = t == cpu_fast::wtype::q8 ? int(lo[at]) : int(std::int8_t(lo[at]));
          EXPECT_EQ(256 * h + l, q5[std::size_t(r * 160 + b * 32 + i)]) << "row " << r << " block " << b << " value " << i;
        }
        // q8: the scale in the block's eight lanes; q4: [s0, Σq·s0, …, s3, Σq·s3] per quad
        const std::int64_t at = t == cpu_fast::wtype::q8 ? r * per_row + (b / 2) * cpu_fast::q8_pair_scales + (b % 2) * 8
                                                         : r * per_row + (b / 4) * cpu_fast::q4_quad_scales + (b % 4) * 2;
        EXPECT_EQ(sc[std::size_t(at)], s5[std::size_t(r * 5 + b)]);
        if (t == cpu_fast::wtype::q4) {
          EXPECT_FLOAT_EQ(sc[std::size_t(at + 1)], u5[std::size_t(r * 5 + b)]);
        }
      }
      // the blocks the last group lacks are zero, values and scales
      const std::int64_t first_missing = t == cpu_fast::wtype::q8 ? 2 * 64 + 32 : 128;
      for (std::int64_t at = first_missing; at < plane; ++at) {
        const bool even_half = t == cpu_fast::wtype::q4 && (at - 128) % 64 < 16;  // block 4's own bytes
        if (even_half) continue;
        EXPECT_EQ(hi[std::size_t(r * plane + at)], 0) << "row " << r << " byte " << at;
        EXPECT_EQ(lo[std::size_t(r * plane + at)], 0) << "row " << r << " byte " << at;
      }
      const std::int64_t used = t == cpu_fast::wtype::q8 ? 2 * 16 + 8 : 8 + 2;
      for (std::int64_t l = used; l < per_row; ++l) EXPECT_EQ(sc[std::size_t(r * per_row + l)], 0.0f) << "row " << r;
    }
  }
}

TEST(FastMatmul, VnniDecodeProductsReadNothingPastTheWeight) {
  // q4's quads read a row 80 bytes at a time, a last partial quad by masked loads: a weight
  // ending at a page no one may read must give the same results as one that does not
  if (cpu_isa::best() < cpu_isa::level::avx512_vnni) GTEST_SKIP() << "no VNNI here";
  const long page = sysconf(_SC_PAGESIZE);
  void* mem = mmap(nullptr, std::size_t(2 * page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  ASSERT_EQ(mprotect(static_cast<char*>(mem) + page, std::size_t(page), PROT_NONE), 0);
  for (dtype t : {dtype::q8, dtype::q4})
    for (std::int64_t k : {32, 64, 96, 128, 160}) {
      const std::int64_t n = 3;
      const tensor x = random_f32({2, k}, 41);
      const tensor w = *convert_tensor(random_f32({n, k}, 42, 0.5f), t);
      std::uint8_t* at = static_cast<std::uint8_t*>(mem) + page - std::int64_t(w.nbytes());
      std::memcpy(at, w.data(), w.nbytes());
      const cpu_fast::wtype wt = t == dtype::q8 ? cpu_fast::wtype::q8 : cpu_fast::wtype::q4;
      const std::int64_t plane = cpu_fast::int8_rows_plane_bytes(wt, k);
      std::vector<std::uint8_t> hi(std::size_t(2 * plane)), lo(hi.size());
      std::vector<float> sc(std::size_t(2 * cpu_fast::int8_rows_scales(wt, k)));
      cpu_fast::avx512_vnni::int16_split_quantize_rows(x.f32(), k, 0, 2, wt, hi.data(), lo.data(), sc.data());
      std::vector<float> edge(std::size_t(2 * n)), inside(edge.size());
      cpu_fast::int8_pairs_product p;
      p.x = cpu_fast::int8_rows{hi.data(), sc.data(), 2, k, lo.data()};
      p.w = at;
      p.w_row_bytes = std::int64_t(w.nbytes()) / n;
      p.type = wt;
      p.y = edge.data();
      p.n = n;
      cpu_fast::avx512_vnni::int8_pairs_range(p, 0, n);
      p.w = reinterpret_cast<const std::uint8_t*>(w.data());
      p.y = inside.data();
      cpu_fast::avx512_vnni::int8_pairs_range(p, 0, n);
      EXPECT_EQ(edge, inside) << dtype_name(t) << " K " << k;
      const auto want = run_values("matmul", R"({"transB": true})", {x, w});
      const auto bounds = int_bounds(x, *to_f32(w), cpu_fast::int16_levels);
      for (std::size_t i = 0; i < edge.size(); ++i) EXPECT_NEAR(edge[i], want[i], bounds[i]) << dtype_name(t) << " K " << k;
    }
  munmap(mem, std::size_t(2 * page));
}

// ---- attention ----

struct attention_case {
  std::string name;
  int heads, kv_heads, head_dim, v_head_dim;
  std::int64_t rows, keys, pos;
  std::string extra;  ///< more params (JSON members, with a leading comma)
  int bias = 0;       ///< 0 none, 2 [T, S], 3 [heads, T, S]
};

TEST(FastAttention, EveryLevelAgreesWithTheReference) {
  threads_guard tg;
  const auto levels = test::fast_kernels_on_this_cpu("attention");
  ASSERT_FALSE(levels.empty());
  const std::vector<attention_case> cases = {
      {"prefill gqa", 9, 3, 64, 64, 37, 37, 0, "", 0},
      {"decode over a long cache", 9, 3, 64, 64, 1, 900, 700, "", 0},
      {"decode at position 0", 4, 2, 64, 64, 1, 300, 0, "", 0},
      {"decode over a cache mostly ahead", 16, 8, 128, 128, 1, 1100, 90, "", 0},
      {"verify rows", 16, 8, 128, 128, 5, 600, 500, "", 0},
      {"window", 4, 4, 32, 32, 20, 64, 30, R"(,"window":7)", 0},
      {"non-causal window", 4, 2, 32, 32, 6, 40, 3, R"(,"causal":false,"window":5)", 0},
      {"non-causal", 2, 1, 16, 48, 7, 29, 0, R"(,"causal":false)", 0},
      {"softcap and scale", 4, 2, 64, 64, 9, 40, 10, R"(,"softcap":20,"scale":0.3)", 0},
      {"alibi", 8, 8, 32, 32, 5, 50, 20, R"(,"alibi":true)", 0},
      {"bias per row", 4, 2, 32, 32, 6, 6, 0, "", 2},
      {"bias per head", 4, 2, 32, 32, 6, 6, 0, "", 3},
      {"decode with bias", 4, 2, 32, 32, 1, 400, 390, "", 3},
  };
  unsigned seed = 900;
  for (int threads : {1, 2}) {
    cpu_fast::set_kernel_threads(threads);
    for (const auto& lk : levels)
      for (const auto& c : cases) {
        SCOPED_TRACE(lk.level + " " + c.name + " threads " + std::to_string(threads));
        const tensor q = random_f32({c.rows, c.heads * c.head_dim}, ++seed);
        const tensor k = random_f32({c.keys, c.kv_heads * c.head_dim}, ++seed);
        const tensor v = random_f32({c.keys, c.kv_heads * c.v_head_dim}, ++seed);
        std::vector<tensor> in = {q, k, v};
        if (c.bias == 2) in.push_back(random_f32({c.rows, c.keys}, ++seed, 2.0f));
        if (c.bias == 3) in.push_back(random_f32({c.heads, c.rows, c.keys}, ++seed, 2.0f));
        const std::string params = "{\"heads\":" + std::to_string(c.heads) + ",\"kvHeads\":" + std::to_string(c.kv_heads) +
                                   ",\"headDim\":" + std::to_string(c.head_dim) + ",\"vHeadDim\":" +
                                   std::to_string(c.v_head_dim) + ",\"posOffset\":" + std::to_string(c.pos) + c.extra + "}";
        const auto want = run_values("attention", params, in);
        const auto got = run_values("attention", params, in, lk.fn);
        test::expect_close(got, want, 2e-5, 1e-4);
      }
  }
}

/// A row's attention is the same bits whatever else the pass holds and however the work is
/// split: the last row of a 40-row pass equals that row decoded alone, on one thread or two —
/// so verify passes and batched steps decide exactly as one-token steps.
TEST(FastAttention, ARowIsTheSameBitsInEveryPassAndThreadCount) {
  threads_guard tg;
  const tensor k = random_f32({700, 3 * 64}, 41), v = random_f32({700, 3 * 64}, 42);
  const tensor q = random_f32({40, 9 * 64}, 43);
  std::vector<float> last_row(q.f32() + 39 * 9 * 64, q.f32() + 40 * 9 * 64);
  const tensor q1 = test::t32({1, 9 * 64}, last_row);
  for (const auto& lk : test::fast_kernels_on_this_cpu("attention")) {
    SCOPED_TRACE(lk.level);
    cpu_fast::set_kernel_threads(1);
    const auto all = run_values("attention", R"({"heads":9,"kvHeads":3,"headDim":64,"posOffset":600})", {q, k, v}, lk.fn);
    const std::vector<float> want(all.end() - 9 * 64, all.end());
    // every row — first, last, either side of a tile's edge — is the bits it gets alone
    for (int row : {0, 1, 4, 5, 6, 17, 38}) {
      const std::vector<float> own(q.f32() + row * 9 * 64, q.f32() + (row + 1) * 9 * 64);
      const auto alone = run_values("attention", "{\"heads\":9,\"kvHeads\":3,\"headDim\":64,\"posOffset\":" +
                                                     std::to_string(600 + row) + "}",
                                    {test::t32({1, 9 * 64}, own), k, v}, lk.fn);
      EXPECT_EQ(alone, std::vector<float>(all.begin() + row * 9 * 64, all.begin() + (row + 1) * 9 * 64)) << "row " << row;
    }
    for (int threads : {1, 2}) {
      cpu_fast::set_kernel_threads(threads);
      EXPECT_EQ(run_values("attention", R"({"heads":9,"kvHeads":3,"headDim":64,"posOffset":639})", {q1, k, v}, lk.fn), want)
          << threads << " threads";
      const auto again = run_values("attention", R"({"heads":9,"kvHeads":3,"headDim":64,"posOffset":600})", {q, k, v}, lk.fn);
      EXPECT_EQ(again, all) << threads << " threads";
    }
  }
}

/// A few rows over fewer keys than one chunk split over the threads two ways: kv heads that
/// divide among the threads (four on two) go a slice of them a thread, the cache read in row
/// order; kv heads that do not (three on two) split their query heads instead, a kv head's
/// heads across two. Each row is still the bits it gets in a long pass on one thread (which
/// takes a kv head at a time) — groups of 1 to 3, heads of 64 and 128, f32 and half-width
/// caches, one row and a verify pass of 5.
TEST(FastAttention, FewRowsSplitTheirHeadsOverTheThreadsWithTheSameBits) {
  threads_guard tg;
  unsigned seed = 6100;
  for (const auto& lk : test::fast_kernels_on_this_cpu("attention"))
    for (int kv_heads : {3, 4})
      for (int group : {1, 2, 3})
        for (int dim : {64, 128})
          for (dtype kv : {dtype::f32, dtype::bf16}) {
            SCOPED_TRACE(lk.level + " kvHeads " + std::to_string(kv_heads) + " group " + std::to_string(group) +
                         " headDim " + std::to_string(dim) + " " + std::string(dtype_name(kv)));
            const int heads = kv_heads * group, keys = 200, rows = 40, pos = keys - rows;
            auto cache = [&](const tensor& t) { return kv == dtype::f32 ? t : *convert_tensor(t, kv); };
            const tensor k = cache(random_f32({keys, kv_heads * dim}, ++seed));
            const tensor v = cache(random_f32({keys, kv_heads * dim}, ++seed));
            const tensor q = random_f32({rows, heads * dim}, ++seed);
            const std::string common = "{\"heads\":" + std::to_string(heads) + ",\"kvHeads\":" + std::to_string(kv_heads) +
                                       ",\"headDim\":" + std::to_string(dim) + ",\"posOffset\":";
            cpu_fast::set_kernel_threads(1);
            const auto all = run_values("attention", common + std::to_string(pos) + "}", {q, k, v}, lk.fn);
            const std::size_t width = std::size_t(heads * dim);
            for (int threads : {1, 2}) {
              cpu_fast::set_kernel_threads(threads);
              for (int first : {rows - 1, rows - 5}) {
                const int n = rows - first;
                const std::vector<float> own(q.f32() + first * width, q.f32() + rows * width);
                const auto few = run_values("attention", common + std::to_string(pos + first) + "}",
                                            {test::t32({n, std::int64_t(width)}, own), k, v}, lk.fn);
                EXPECT_EQ(few, std::vector<float>(all.begin() + first * width, all.end()))
                    << n << " rows, " << threads << " threads";
              }
            }
          }
}

/// Without grouped queries (kvHeads = heads), a prefill takes a head of up to four consecutive
/// rows through the keys together, each row with its own last key; every row is still the
/// bits it gets decoded alone (one head of one row a pass): heads of 64 and 128, f32 and
/// half-width caches, rows whose keys end either side of a 256-key chunk, one and two threads.
TEST(FastAttention, RowsOfAHeadTogetherGiveEachRowsBitsAlone) {
  threads_guard tg;
  unsigned seed = 5200;
  for (const auto& lk : test::fast_kernels_on_this_cpu("attention"))
    for (int dim : {64, 128})
      for (dtype kv : {dtype::f32, dtype::bf16, dtype::f16}) {
        SCOPED_TRACE(lk.level + " headDim " + std::to_string(dim) + " " + std::string(dtype_name(kv)));
        const int heads = 3, keys = 300, rows = 9, pos = keys - rows;  // rows see 292 … 300 keys
        auto cache = [&](const tensor& t) { return kv == dtype::f32 ? t : *convert_tensor(t, kv); };
        const tensor k = cache(random_f32({keys, heads * dim}, ++seed)), v = cache(random_f32({keys, heads * dim}, ++seed));
        const tensor q = random_f32({rows, heads * dim}, ++seed);
        const std::string common = "{\"heads\":3,\"kvHeads\":3,\"headDim\":" + std::to_string(dim) + ",\"posOffset\":";
        for (int threads : {1, 2}) {
          cpu_fast::set_kernel_threads(threads);
          const auto all = run_values("attention", common + std::to_string(pos) + "}", {q, k, v}, lk.fn);
          ASSERT_EQ(all.size(), std::size_t(rows * heads * dim));
          for (int r = 0; r < rows; ++r) {
            const std::vector<float> own(q.f32() + r * heads * dim, q.f32() + (r + 1) * heads * dim);
            const auto alone =
                run_values("attention", common + std::to_string(pos + r) + "}", {test::t32({1, heads * dim}, own), k, v}, lk.fn);
            EXPECT_EQ(alone, std::vector<float>(all.begin() + r * heads * dim, all.begin() + (r + 1) * heads * dim))
                << "row " << r << ", " << threads << " threads";
          }
        }
      }
}

/// Consecutive attention steps of different sessions (a batched pass's layer) run as one call
/// (attention's group kernel) and give each step exactly the bits of its own call, on every
/// level and thread count: decode rows over caches shorter than one 256-key chunk and longer
/// (partials folded after), a verify pass of 5 rows, a 20-row pass (run alone inside the
/// group), half-width caches, ALiBi (slopes in each step's own scratch), and an empty step;
/// and a group of two one-chunk decode rows with eight kv heads of 128, whose kv heads the
/// group splits into slices over two threads.
TEST(FastAttention, AGroupOfStepsIsTheBitsOfEachAlone) {
  threads_guard tg;
  struct one {
    std::int64_t rows, keys, pos;
    dtype kv;
    std::string extra;
    int heads = 9, kv_heads = 3, dim = 64;
  };
  const std::vector<std::vector<one>> groups = {
      {{1, 100, 99, dtype::f32, ""},
       {1, 700, 650, dtype::f32, ""},
       {5, 600, 590, dtype::bf16, ""},
       {1, 40, 39, dtype::f16, ""},
       {20, 300, 280, dtype::f32, ""},
       {1, 520, 519, dtype::f32, R"(,"alibi":true)"},
       {0, 64, 0, dtype::f32, ""},
       {2, 257, 255, dtype::f32, ""}},
      {{1, 100, 99, dtype::f32, "", 16, 8, 128}, {1, 200, 199, dtype::bf16, "", 16, 8, 128}}};
  unsigned seed = 6100;
  int grouped = 0;
  for (const auto& steps : groups)
    for (const auto& lk : test::fast_kernels_on_this_cpu("attention"))
      for (int threads : {1, 2}) {
        cpu_fast::set_kernel_threads(threads);
        SCOPED_TRACE(lk.level + " threads " + std::to_string(threads) + ", a group of " + std::to_string(steps.size()));
        ASSERT_NE(lk.group, nullptr);
        std::vector<std::vector<tensor>> ins;
        std::vector<std::string> params;
        std::vector<std::vector<float>> alone;
        for (const auto& st : steps) {
          const tensor k = random_f32({st.keys, st.kv_heads * st.dim}, ++seed);
          const tensor v = random_f32({st.keys, st.kv_heads * st.dim}, ++seed);
          auto cache = [&](const tensor& t) { return st.kv == dtype::f32 ? t : *convert_tensor(t, st.kv); };
          ins.push_back({random_f32({st.rows, st.heads * st.dim}, ++seed), cache(k), cache(v)});
          params.push_back("{\"heads\":" + std::to_string(st.heads) + ",\"kvHeads\":" + std::to_string(st.kv_heads) +
                           ",\"headDim\":" + std::to_string(st.dim) + ",\"posOffset\":" + std::to_string(st.pos) + st.extra +
                           "}");
          alone.push_back(run_values("attention", params.back(), ins.back(), lk.fn));
        }
        const op_def* def = find_op_def("attention");
        std::vector<std::unique_ptr<op_params>> parsed;
        std::vector<tensor> outs;
        std::vector<std::vector<tensor*>> ptrs(steps.size());
        std::vector<kernel_call> calls;
        workspace scratch;
        for (std::size_t i = 0; i < steps.size(); ++i) {
          auto p = def->parse(*parse_params_text(params[i]));
          ASSERT_TRUE(p.ok());
          parsed.push_back(std::move(*p));
          outs.push_back(*tensor::make(dtype::f32, {steps[i].rows, std::int64_t(steps[i].heads) * steps[i].dim}));
        }
        for (std::size_t i = 0; i < steps.size(); ++i) {
          ptrs[i] = {&ins[i][0], &ins[i][1], &ins[i][2]};
          calls.push_back(kernel_call{parsed[i].get(), ptrs[i], &outs[i], &scratch});
        }
        ASSERT_TRUE(lk.group(calls).ok());
        for (std::size_t i = 0; i < steps.size(); ++i) {
          const auto got = test::values_of(outs[i]);
          ASSERT_EQ(got.size(), alone[i].size()) << "step " << i;
          for (std::size_t e = 0; e < got.size(); ++e)
            ASSERT_EQ(std::bit_cast<std::uint32_t>(got[e]), std::bit_cast<std::uint32_t>(alone[i][e]))
                << "step " << i << " at " << e;
        }
        ++grouped;
      }
  EXPECT_GT(grouped, 0);
}

/// The executor runs consecutive attention steps over different inputs as a group (each with
/// its own bound position), but not one that reads an earlier step's output.
TEST(FastAttention, TheExecutorGroupsIndependentAttentionSteps) {
  threads_guard tg;
  cpu_fast::set_kernel_threads(2);
  const std::string graph = R"({"inputs":[
      {"name":"q0","shape":[1,128],"bind":"q0"},{"name":"q1","shape":[1,128],"bind":"q1"},
      {"name":"k0","shape":[300,64],"bind":"k0"},{"name":"v0","shape":[300,64],"bind":"v0"},
      {"name":"k1","shape":[300,64],"bind":"k1"},{"name":"v1","shape":[300,64],"bind":"v1"}],"steps":[
      {"op":"attention","in":["q0","k0","v0"],"out":"a0","params":{"heads":2,"kvHeads":1,"headDim":64,"posOffset":{"$bind":"p0"}}},
      {"op":"attention","in":["q1","k1","v1"],"out":"a1","params":{"heads":2,"kvHeads":1,"headDim":64,"posOffset":{"$bind":"p1"}}},
      {"op":"attention","in":["a1","k0","v0"],"out":"a2","params":{"heads":2,"kvHeads":1,"headDim":64,"posOffset":299}}],
      "outputs":["a0","a1","a2"]})";
  const std::map<std::string, tensor> in = {{"q0", random_f32({1, 128}, 91)},  {"q1", random_f32({1, 128}, 92)},
                                            {"k0", random_f32({300, 64}, 93)}, {"v0", random_f32({300, 64}, 94)},
                                            {"k1", random_f32({300, 64}, 95)}, {"v1", random_f32({300, 64}, 96)}};
  auto c = compile_on_cpu(graph, in);
  ASSERT_NE(c, nullptr);
  auto& g = c->g;
  auto& src = c->src;
  auto& be = c->be;
  ASSERT_TRUE(g->bind_param("p0", 270).ok());
  ASSERT_TRUE(g->bind_param("p1", 120).ok());
  ASSERT_TRUE(g->run(src).ok());
  EXPECT_EQ(g->grouped_steps(), 2u);  // a0 and a1; not a2, which reads a1
  auto alone = [&](const tensor& q, const tensor& k, const tensor& v, int pos) {
    return run_values("attention", R"({"heads":2,"kvHeads":1,"headDim":64,"posOffset":)" + std::to_string(pos) + "}", {q, k, v},
                      be.kernel("attention", std::vector<tensor_desc>{q.desc(), k.desc(), v.desc()},
                                **find_op_def("attention")->parse(*parse_params_text(R"({"heads":2,"kvHeads":1,"headDim":64})"))));
  };
  const auto a1 = alone(in.at("q1"), in.at("k1"), in.at("v1"), 120);
  EXPECT_EQ(test::values_of(*g->value("a0")), alone(in.at("q0"), in.at("k0"), in.at("v0"), 270));
  EXPECT_EQ(test::values_of(*g->value("a1")), a1);
  EXPECT_EQ(test::values_of(*g->value("a2")), alone(test::t32({1, 128}, a1), in.at("k0"), in.at("v0"), 299));
  // a bound position that is no position is refused, naming the step and the parameter, as
  // for a step alone
  ASSERT_TRUE(g->bind_param("p1", 2.5).ok());
  auto bad = g->run(src);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.err().message.find("step 1 (attention)"), std::string::npos) << bad.err().message;
  EXPECT_NE(bad.err().message.find("posOffset"), std::string::npos) << bad.err().message;
}

/// The heads of a kv group that share one pass over its keys and values give the bits each
/// gets alone: attention with kvHeads < heads against the same keys and values repeated for
/// every head (one head a pass), bit for bit — group sizes 2 to 5 (a pass of four and one
/// alone), heads of 64 and 128, rows either side of a 256-key chunk, f32 and half-width caches.
TEST(FastAttention, HeadsOfAGroupTogetherGiveEachHeadsBitsAlone) {
  threads_guard tg;
  unsigned seed = 5000;
  for (const auto& lk : test::fast_kernels_on_this_cpu("attention"))
    for (int dim : {64, 128})
      for (int group : {2, 3, 4, 5})
        for (dtype kv : {dtype::f32, dtype::bf16, dtype::f16}) {
          SCOPED_TRACE(lk.level + " headDim " + std::to_string(dim) + " group " + std::to_string(group) + " " +
                       std::string(dtype_name(kv)));
          const int kv_heads = 2, heads = kv_heads * group, keys = 300, rows = 12;
          const tensor k = random_f32({keys, kv_heads * dim}, ++seed), v = random_f32({keys, kv_heads * dim}, ++seed);
          const tensor q = random_f32({rows, heads * dim}, ++seed);
          std::vector<float> kr, vr;
          for (int s = 0; s < keys; ++s)
            for (int h = 0; h < heads; ++h)
              for (int i = 0; i < dim; ++i) {
                kr.push_back(k.f32()[s * kv_heads * dim + (h / group) * dim + i]);
                vr.push_back(v.f32()[s * kv_heads * dim + (h / group) * dim + i]);
              }
          auto cache = [&](const tensor& t) { return kv == dtype::f32 ? t : *convert_tensor(t, kv); };
          const std::string common = ",\"headDim\":" + std::to_string(dim) + ",\"posOffset\":250}";
          for (int threads : {1, 2}) {
            cpu_fast::set_kernel_threads(threads);
            const auto together = run_values(
                "attention", "{\"heads\":" + std::to_string(heads) + ",\"kvHeads\":" + std::to_string(kv_heads) + common,
                {q, cache(k), cache(v)}, lk.fn);
            const auto alone = run_values("attention", "{\"heads\":" + std::to_string(heads) + common,
                                          {q, cache(test::t32({keys, heads * dim}, kr)), cache(test::t32({keys, heads * dim}, vr))},
                                          lk.fn);
            ASSERT_EQ(together.size(), std::size_t(rows * heads * dim));
            for (std::size_t e = 0; e < together.size(); ++e)
              ASSERT_EQ(std::bit_cast<std::uint32_t>(together[e]), std::bit_cast<std::uint32_t>(alone[e]))
                  << "at " << e << " (" << threads << " threads)";
          }
        }
}

/// Likewise a product's row: the rows a batched step or a verify pass stacks (up to 32) give
/// each row the bits it gets alone, for every weight dtype — rows of 576 values, of 1,536 (a
/// down projection's) and, for the float dtypes, of 1,000 (a tail past the last run of 32).
TEST(FastMatmul, ARowIsTheSameBitsAloneOrStacked) {
  for (std::int64_t k : {576, 1000, 1536}) {
  SCOPED_TRACE("k " + std::to_string(k));
  threads_guard tg;
  const tensor x = random_f32({32, k}, 51);
  const tensor w32 = random_f32({200, k}, 52, 0.1f);
  for (const auto& lk : test::fast_kernels_on_this_cpu("matmul"))
    for (dtype t : {dtype::f32, dtype::bf16, dtype::f16, dtype::q8, dtype::q4}) {
      if (is_quantized(t) && k % 32 != 0) continue;  // (blocks of 32)
      const tensor w = t == dtype::f32 ? w32 : *convert_tensor(w32, t);
      for (int threads : {1, 2}) {
        cpu_fast::set_kernel_threads(threads);
        if (!lk.claims({x, w}, R"({"transB": true})")) continue;
        SCOPED_TRACE(lk.level + " " + std::string(dtype_name(t)) + " threads " + std::to_string(threads));
        const auto all = run_values("matmul", R"({"transB": true})", {x, w}, lk.fn);
        for (int r : {0, 5, 31}) {
          const tensor one = test::t32({1, k}, std::vector<float>(x.f32() + r * k, x.f32() + (r + 1) * k));
          if (!lk.claims({one, w}, R"({"transB": true})")) continue;
          EXPECT_EQ(run_values("matmul", R"({"transB": true})", {one, w}, lk.fn),
                    std::vector<float>(all.begin() + r * 200, all.begin() + (r + 1) * 200))
              << "row " << r;
        }
      }
    }
  }
}

/// A plain graph call lets a product of 16 to 32 rows take the many-row kernels
/// (runtime/row_bits.hpp); everything else — batched passes, verify passes, graphs of several
/// sessions — keeps each row's bits alone. At every level this CPU has, with the kernel the
/// backend picks: by default each row of a 16-, 24- or 32-row product is the bits of that row
/// alone; in a free_rows_scope, where the level has a many-row kernel that takes the dtype from
/// that many rows (AMX: bf16, q8, q4 from 16; AVX512-BF16's pairs: bf16 from 16; VNNI's and
/// AVX2's lanes: q4 from 16, q8 from 24),
/// the rows are the bits those rows get in a 40-row product (the many-row kernels), elsewhere
/// still their bits alone — bf16 weights' on activations rounded to bf16, as every product with
/// the many-row numbers takes them. Grouped products (q, k and v) follow the same rule.
TEST(FastMatmul, ShortProductsKeepEachRowsBitsUnlessTheCallFreesThem) {
  threads_guard tg;
  test::level_guard lg;
  const test::bf16_pairs_guard pairs(true);  // (the pairs kernel wherever AVX512-BF16 is)
  cpu_backend be;
  const std::int64_t k = 576, n = 200;
  const tensor x40 = random_f32({40, k}, 61);
  const tensor w32 = random_f32({n, k}, 62, 0.1f);
  const std::string params_text = R"({"transB": true})";
  auto params = find_op_def("matmul")->parse(*parse_params_text(params_text));
  ASSERT_TRUE(params.ok());
  auto rows_of = [&](std::int64_t first, std::int64_t count) {
    return test::t32({count, k}, std::vector<float>(x40.f32() + first * k, x40.f32() + (first + count) * k));
  };
  auto picked = [&](const tensor& x, const tensor& w) {
    const std::vector<tensor_desc> d{x.desc(), w.desc()};
    return be.kernel("matmul", d, **params);
  };
  int freed = 0;
  for (auto l : cpu_isa::supported_levels()) {
    ASSERT_TRUE(cpu_isa::set_level(l));
    for (dtype t : {dtype::bf16, dtype::q8, dtype::q4}) {
      const tensor w = *convert_tensor(w32, t);
      const auto many = run_values("matmul", params_text, {x40, w}, picked(x40, w));
      for (std::int64_t rows : {16, 24, 32}) {
        using L = cpu_isa::level;
        const bool amx = l >= L::amx, lanes = l >= L::avx2;  // (AVX-512 without VNNI: AVX2's lanes)
        const bool takes_many = amx || (lanes && ((t == dtype::q4 && rows >= 16) || (t == dtype::q8 && rows >= 24))) ||
                                (l >= L::avx512_bf16 && t == dtype::bf16);
        const tensor x = rows_of(0, rows);
        for (int threads : {1, 2}) {
          cpu_fast::set_kernel_threads(threads);
          SCOPED_TRACE(std::string(cpu_isa::level_name(l)) + " " + std::string(dtype_name(t)) + " rows " +
                       std::to_string(rows) + " threads " + std::to_string(threads));
          const auto kept = run_values("matmul", params_text, {x, w}, picked(x, w));
          for (std::int64_t r : {std::int64_t(0), rows / 2, rows - 1}) {
            const tensor one = rows_of(r, 1);
            EXPECT_EQ(run_values("matmul", params_text, {one, w}, picked(one, w)),
                      std::vector<float>(kept.begin() + r * n, kept.begin() + (r + 1) * n))
                << "row " << r << " is not its bits alone";
          }
          std::vector<float> loose;
          {
            const free_rows_scope plain_call(true);
            loose = run_values("matmul", params_text, {x, w}, picked(x, w));
          }
          if (takes_many) {
            EXPECT_EQ(loose, std::vector<float>(many.begin(), many.begin() + rows * n));
            EXPECT_NE(loose, kept) << "the many-row kernel gave the rows their bits alone: the test shows nothing";
            ++freed;
          } else if (t == dtype::bf16) {
            // the vector kernels keep them, on activations rounded to bf16 as many rows' are
            const tensor rounded = rounded_to_bf16(x);
            EXPECT_EQ(loose, run_values("matmul", params_text, {rounded, w}, picked(rounded, w)));
            EXPECT_NE(loose, kept);
          } else {
            EXPECT_EQ(loose, kept);
          }
        }
      }
    }
  }
  if (cpu_isa::best() >= cpu_isa::level::avx2) {
    EXPECT_GT(freed, 0);
  }
}

/// Several products of the same activations run as one call (a layer's q, k and v; gate and
/// up: backend::group_kernel) give each output exactly the bits of its own call, on every
/// level, dtype, row count (prefill's many-row kernels included) and thread count — column
/// counts that are not multiples of the kernels' tiles included, and a bias on one of them.
TEST(FastMatmul, AGroupOfProductsIsTheBitsOfEachAlone) {
  threads_guard tg;
  const std::int64_t k = 576;
  const std::vector<std::int64_t> ns = {576, 190, 192};
  int grouped = 0;
  for (const auto& lk : test::fast_kernels_on_this_cpu("linear"))
    for (dtype t : {dtype::f32, dtype::bf16, dtype::f16, dtype::q8, dtype::q4})
      for (std::int64_t rows : {1, 3, 16, 37})
        for (int threads : {1, 2}) {
          cpu_fast::set_kernel_threads(threads);
          const tensor x = random_f32({rows, k}, unsigned(700 + rows));
          std::vector<tensor> ws, biases;
          for (std::size_t i = 0; i < ns.size(); ++i) {
            const tensor w = random_f32({ns[i], k}, unsigned(710 + i), 0.1f);
            ws.push_back(t == dtype::f32 ? w : *convert_tensor(w, t));
            biases.push_back(random_f32({ns[i]}, unsigned(720 + i)));
          }
          if (!lk.group || !lk.claims({x, ws[0], biases[0]}, R"({"transB": true})")) continue;
          SCOPED_TRACE(lk.level + " " + std::string(dtype_name(t)) + " rows " + std::to_string(rows) + " threads " +
                       std::to_string(threads));
          // each alone; the first with a bias (linear), the others without
          std::vector<std::vector<float>> alone;
          for (std::size_t i = 0; i < ns.size(); ++i) {
            std::vector<tensor> in = {x, ws[i]};
            if (i == 0) in.push_back(biases[i]);
            alone.push_back(run_values(i == 0 ? "linear" : "matmul", R"({"transB": true})", in, lk.fn));
          }
          // together
          const op_def* def = find_op_def("linear");
          auto params = def->parse(*parse_params_text(R"({"transB": true})"));
          ASSERT_TRUE(params.ok());
          tensor xs = x;
          std::vector<tensor> outs;
          std::vector<std::vector<tensor*>> ptrs(ns.size());
          std::vector<kernel_call> calls;
          workspace scratch;
          for (std::size_t i = 0; i < ns.size(); ++i) outs.push_back(*tensor::make(dtype::f32, {rows, ns[i]}));
          for (std::size_t i = 0; i < ns.size(); ++i) {
            ptrs[i] = {&xs, &ws[i]};
            if (i == 0) ptrs[i].push_back(&biases[i]);
            calls.push_back(kernel_call{params->get(), ptrs[i], &outs[i], &scratch});
          }
          ASSERT_TRUE(lk.group(calls).ok());
          for (std::size_t i = 0; i < ns.size(); ++i) EXPECT_EQ(test::values_of(outs[i]), alone[i]) << "product " << i;
          ++grouped;
        }
  EXPECT_GT(grouped, 0) << "no level of this CPU has a group kernel";
}

TEST(FastMatmul, Bf16DecodeReordersTheActivationsOfEveryCall) {
  // the bf16 decode tiles take k in even/odd order, reordered once per call and thread: the
  // same activation buffer rewritten between calls (as an executor reuses its buffers) must
  // give the new values' products, on every level and with a thread taking several ranges
  threads_guard tg;
  const std::int64_t k = 608, n = 300;  // (608 = 19 runs of 32: a last run of AVX2's 16 too)
  const tensor w = *convert_tensor(random_f32({n, k}, 801, 0.1f), dtype::bf16);
  int checked = 0;
  for (const auto& lk : test::fast_kernels_on_this_cpu("matmul"))
    for (std::int64_t rows : {1, 3, 8})
      for (int threads : {1, 2}) {
        cpu_fast::set_kernel_threads(threads);
        tensor x = random_f32({rows, k}, unsigned(810 + rows));
        if (lk.level == "amx" || !lk.claims({x, w}, R"({"transB": true})")) continue;
        SCOPED_TRACE(lk.level + " rows " + std::to_string(rows) + " threads " + std::to_string(threads));
        for (int round = 0; round < 3; ++round) {
          for (std::int64_t i = 0; i < rows * k; ++i) x.f32()[i] = float((i * 7 + round * 13) % 29) - 14.0f;
          const auto got = run_values("matmul", R"({"transB": true})", {x, w}, lk.fn);
          const auto want = run_values("matmul", R"({"transB": true})", {x, w});
          test::expect_close(got, want, 1e-6 * double(k) + 1e-5, 1e-5);
        }
        ++checked;
      }
  EXPECT_GT(checked, 0);
}

/// The executor runs consecutive products of one activation as a group, not a product that
/// reads another's output, and every value is what its step's own kernel gives.
TEST(FastMatmul, TheExecutorGroupsProductsOfTheSameActivations) {
  threads_guard tg;
  cpu_fast::set_kernel_threads(2);
  const std::string graph = R"({"inputs":[{"name":"x","shape":[2,64],"bind":"x"},
      {"name":"wq","shape":[96,64],"bind":"wq"},{"name":"wk","shape":[30,64],"bind":"wk"},
      {"name":"wv","shape":[32,64],"bind":"wv"},{"name":"wo","shape":[64,96],"bind":"wo"}],"steps":[
      {"op":"matmul","in":["x","wq"],"out":"q","params":{"transB":true}},
      {"op":"matmul","in":["x","wk"],"out":"k","params":{"transB":true}},
      {"op":"matmul","in":["x","wv"],"out":"v","params":{"transB":true}},
      {"op":"matmul","in":["q","wo"],"out":"o","params":{"transB":true}}],
      "outputs":["q","k","v","o"]})";
  const std::map<std::string, tensor> in = {{"x", random_f32({2, 64}, 81)},
                                            {"wq", random_f32({96, 64}, 82)},
                                            {"wk", random_f32({30, 64}, 83)},
                                            {"wv", random_f32({32, 64}, 84)},
                                            {"wo", random_f32({64, 96}, 85)}};
  auto c = compile_on_cpu(graph, in);
  ASSERT_NE(c, nullptr);
  auto& g = c->g;
  auto& be = c->be;
  ASSERT_TRUE(g->run(c->src).ok());
  EXPECT_EQ(g->grouped_steps(), 3u);  // q, k, v; not o, which reads q
  auto alone = [&](const tensor& a, const tensor& w) {
    std::vector<tensor_desc> d = {a.desc(), w.desc()};
    auto p = find_op_def("matmul")->parse(*parse_params_text(R"({"transB": true})"));
    return run_values("matmul", R"({"transB": true})", {a, w}, be.kernel("matmul", d, **p));
  };
  const auto q = alone(in.at("x"), in.at("wq"));
  EXPECT_EQ(test::values_of(*g->value("q")), q);
  EXPECT_EQ(test::values_of(*g->value("k")), alone(in.at("x"), in.at("wk")));
  EXPECT_EQ(test::values_of(*g->value("v")), alone(in.at("x"), in.at("wv")));
  EXPECT_EQ(test::values_of(*g->value("o")), alone(test::t32({2, 96}, q), in.at("wo")));
}

// ---- swiglu, silu, rmsnorm ----

TEST(FastSimpleOps, EveryLevelAgreesWithTheReference) {
  threads_guard tg;
  for (int threads : {1, 2}) {
    cpu_fast::set_kernel_threads(threads);
    for (std::int64_t n : {1, 7, 16, 33, 1536, 3 * 1536 + 5, 128 * 1536}) {
      SCOPED_TRACE("n " + std::to_string(n) + " threads " + std::to_string(threads));
      tensor g = random_f32({n}, unsigned(n), 4.0f);
      if (n > 16) {  // the edges: huge, tiny, infinite and NaN gates
        float* v = g.f32();
        v[0] = 100.0f, v[1] = -100.0f, v[2] = INFINITY, v[3] = -INFINITY, v[4] = NAN, v[5] = 1e-30f, v[6] = -88.5f;
      }
      const tensor u = random_f32({n}, unsigned(n) + 1);
      for (const auto& lk : test::fast_kernels_on_this_cpu("swiglu")) {
        SCOPED_TRACE(lk.level);
        test::expect_close(run_values("swiglu", "{}", {g, u}, lk.fn), run_values("swiglu", "{}", {g, u}), 1e-30, 4e-7);
      }
      for (const auto& lk : test::fast_kernels_on_this_cpu("silu")) {
        SCOPED_TRACE(lk.level);
        test::expect_close(run_values("silu", "{}", {g}, lk.fn), run_values("silu", "{}", {g}), 1e-30, 4e-7);
      }
    }
    for (const auto& lk : test::fast_kernels_on_this_cpu("rmsnorm"))
      for (const char* params : {R"({"eps":1e-5})", R"({"eps":1e-6,"weightOffset":1})", R"({"eps":1e-6,"groupSize":64})"})
        for (std::int64_t rows : {1, 3, 128}) {
          SCOPED_TRACE(lk.level + " " + params + " rows " + std::to_string(rows));
          const std::int64_t cols = std::string(params).find("groupSize") != std::string::npos ? 576 : 577;
          const tensor x = random_f32({rows, cols}, unsigned(rows) + 5, 3.0f);
          const tensor gamma = random_f32({std::string(params).find("groupSize") != std::string::npos ? 64 : cols}, 9);
          test::expect_close(run_values("rmsnorm", params, {x, gamma}, lk.fn), run_values("rmsnorm", params, {x, gamma}),
                             1e-6, 2e-6);
        }
  }
}

TEST(FastSimpleOps, AddSubMulAreTheReferencesBits) {
  threads_guard tg;
  const tensor a = random_f32({7, 131}, 61, 3.0f);
  const std::vector<tensor> bs = {random_f32({7, 131}, 62), random_f32({131}, 63), test::t32({1}, {0.37f})};
  for (int threads : {1, 2}) {
    cpu_fast::set_kernel_threads(threads);
    for (const char* op : {"add", "sub", "mul"})
      for (const auto& lk : test::fast_kernels_on_this_cpu(op))
        for (const auto& b : bs) {
          SCOPED_TRACE(std::string(op) + " " + lk.level + " b " + shape_str(b.shape()));
          EXPECT_EQ(run_values(op, "{}", {a, b}, lk.fn), run_values(op, "{}", {a, b}));
        }
  }
}

/// argmax picks the reference's index on every level: the first of tied maxima, the first NaN
/// of a row that has one, 0 for a row of −inf; rows split over threads (a batched pass's
/// logits) and widths that are not whole vectors.
TEST(FastSimpleOps, ArgmaxPicksTheReferencesIndex) {
  threads_guard tg;
  for (std::int64_t cols : {1, 5, 16, 17, 100, 49152}) {
    tensor x = random_f32({8, cols}, unsigned(cols), 3.0f);
    float* v = x.f32();
    if (cols >= 17) {
      v[cols + 3] = v[cols + 16] = 50.0f;              // row 1: a tie across vectors
      v[2 * cols + 9] = NAN, v[2 * cols + 12] = 60.0f;  // row 2: a NaN before a larger value
      for (std::int64_t j = 0; j < cols; ++j) v[3 * cols + j] = -INFINITY;  // row 3: all −inf
      v[4 * cols + cols - 1] = INFINITY;               // row 4: +inf in the tail
      v[5 * cols + 2] = -0.0f, v[5 * cols + 4] = 0.0f;  // row 5: zeros of both signs ...
      for (std::int64_t j = 0; j < cols; ++j)
        if (j != 2 && j != 4) v[5 * cols + j] = -1.0f;  // ... as its maximum
    }
    for (int threads : {1, 2}) {
      cpu_fast::set_kernel_threads(threads);
      for (const auto& lk : test::fast_kernels_on_this_cpu("argmax")) {
        SCOPED_TRACE(lk.level + " cols " + std::to_string(cols) + " threads " + std::to_string(threads));
        EXPECT_EQ(run_values("argmax", "{}", {x}, lk.fn), run_values("argmax", "{}", {x}));
      }
    }
  }
  EXPECT_FALSE(test::fast_kernels_on_this_cpu("argmax").empty() && cpu_isa::best() >= cpu_isa::level::avx2);
}

/// The rope kernel keeps its cos/sin table and plain rope's frequencies between steps: neither
/// may outlive the positions, base, width or factor it was made for. Steps with other bases
/// (given, and bound per call), another rotary width and a bound attention factor, and calls
/// at other positions, all equal the reference kernel's bits.
TEST(FastSimpleOps, RopeTableIsReusedOnlyWhereItFits) {
  const std::string graph = R"({"inputs":[{"name":"x","shape":[3,128],"bind":"x"}],"steps":[
      {"op":"rope","in":["x"],"out":"a","params":{"headDim":64,"offset":{"$bind":"pos"}}},
      {"op":"rope","in":["x"],"out":"b","params":{"headDim":64,"offset":{"$bind":"pos"}}},
      {"op":"rope","in":["x"],"out":"c","params":{"headDim":64,"offset":{"$bind":"pos"},"base":500000}},
      {"op":"rope","in":["x"],"out":"d","params":{"headDim":64,"offset":{"$bind":"pos","add":1}}},
      {"op":"rope","in":["x"],"out":"e","params":{"headDim":64,"offset":{"$bind":"pos"},"base":{"$bind":"theta"}}},
      {"op":"rope","in":["x"],"out":"f","params":{"headDim":64,"offset":{"$bind":"pos"},"rotaryDim":32}},
      {"op":"rope","in":["x"],"out":"g","params":{"headDim":64,"offset":{"$bind":"pos"},
                                                 "attentionFactor":{"$bind":"factor"}}},
      {"op":"rope","in":["x"],"out":"h","params":{"headDim":64,"offset":{"$bind":"pos"},
                                                 "attentionFactor":{"$bind":"factor2"}}}],
      "outputs":["a","b","c","d","e","f","g","h"]})";
  auto build = [&](backend& be) {
    auto decl = parse_graph_text(graph, true);
    EXPECT_TRUE(decl.ok());
    tensor_store store;
    tensor_store::source src(store, std::vector<std::string>{});
    build_options o;
    o.compiled = true;
    auto g = executable_graph::build(std::move(*decl), src, be, o);
    EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.err().message);
    return std::move(*g);
  };
  cpu_backend fast, ref(cpu_backend::config{true});
  auto gf = build(fast), gr = build(ref);
  const tensor x = random_f32({3, 128}, 71);
  const double thetas[] = {10000, 10000, 1e6, 10000, 40, 40};
  const double factors[] = {1, 1, 0.5, 2, 2, 1};
  int call = 0;
  for (double pos : {0.0, 5.0, 5.0, 100000.0, 20000000.0, 7.0}) {
    for (auto* g : {gf.get(), gr.get()}) {
      ASSERT_TRUE(g->bind_input("x", std::span<const float>(x.f32(), 384)).ok());
      ASSERT_TRUE(g->bind_param("pos", pos).ok());
      ASSERT_TRUE(g->bind_param("theta", thetas[call]).ok());
      ASSERT_TRUE(g->bind_param("factor", factors[call]).ok());
      ASSERT_TRUE(g->bind_param("factor2", 3 - factors[call]).ok());
      tensor_store store;
      tensor_store::source src(store, std::vector<std::string>{});
      ASSERT_TRUE(g->run(src).ok());
    }
    for (const char* out : {"a", "b", "c", "d", "e", "f", "g", "h"})
      EXPECT_EQ(test::values_of(*gf->value(out)), test::values_of(*gr->value(out))) << out << " at " << pos;
    ++call;
  }
}

TEST(FastSimpleOps, RopeOfAPassLongerThanOneTableIsTheReferences) {
  // 40,000 rows of 32 frequencies: more than one table holds, so the rows go in pieces, with
  // the frequencies of the whole pass (what dynamic scaling depends on)
  const tensor x = random_f32({40000, 64}, 81);
  const auto levels = test::fast_kernels_on_this_cpu("rope");
  ASSERT_FALSE(levels.empty());
  for (const char* params : {R"({"headDim":64,"offset":3})",
                             R"({"headDim":64,"offset":3,"scaling":{"rope_type":"dynamic","factor":4.0,"max_position_embeddings":2048}})"}) {
    SCOPED_TRACE(params);
    const auto want = run_values("rope", params, {x});
    for (const auto& lk : levels) EXPECT_EQ(run_values("rope", params, {x}, lk.fn), want) << lk.level;
  }
}

/// Every level's rotation (vectors of doubles on AVX2 and AVX-512, the reference's loop for
/// interleaved pairs) is the reference's, bit for bit: head widths whose half is not a whole
/// number of vectors, a partial rotary width, interleaved pairs, values near overflow and
/// subnormals, one row (decode) and a pass split over two threads.
TEST(FastSimpleOps, RopeOnEveryLevelIsTheReferences) {
  threads_guard tg;
  const auto levels = test::fast_kernels_on_this_cpu("rope");
  ASSERT_GE(levels.size(), cpu_isa::best() >= cpu_isa::level::avx512 ? 3u : 1u);
  struct shape_case {
    std::int64_t rows, width;
    const char* params;
  };
  const shape_case cases[] = {
      {1, 576, R"({"headDim":64,"offset":700})"},
      {300, 576, R"({"headDim":64,"offset":0})"},
      {37, 1024, R"({"headDim":128,"offset":5,"base":1000000})"},
      {64, 240, R"({"headDim":80,"offset":11})"},
      {64, 240, R"({"headDim":80,"offset":11,"rotaryDim":24})"},
      {50, 256, R"({"headDim":64,"offset":2,"rotaryDim":32,"interleaved":true})"},
      {33, 192, R"({"headDim":96,"offset":9,"attentionFactor":1.25})"},
  };
  for (const int threads : {1, 2}) {
    cpu_fast::set_kernel_threads(threads);
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(c.params) + " rows " + std::to_string(c.rows) + ", threads " + std::to_string(threads));
      tensor x = random_f32({c.rows, c.width}, 97 + std::uint64_t(c.rows));
      float* v = x.f32();
      v[0] = 3.0e38f;
      v[1] = -1.5e-42f;
      v[c.width / 2] = -2.9e38f;
      const auto want = run_values("rope", c.params, {x});
      for (const auto& lk : levels) EXPECT_EQ(run_values("rope", c.params, {x}, lk.fn), want) << lk.level;
    }
  }
}

}  // namespace
}  // namespace mpakt
