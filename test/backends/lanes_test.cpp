// q8/q4 matrices held in lanes (runtime/dtype.hpp, tensor::lanes16): the reordering, every reader
// of such a tensor (the reference kernels, widening, slices, the weight digest) against the
// same weight held as rows, and the VNNI lanes kernel against the reference kernel and against
// itself row by row.

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>

#include "actors/digest.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "backends/cpu/isa.hpp"
#include "runtime/row_bits.hpp"
#include "test/support/levels.hpp"
#include "test/support/op_checks.hpp"

namespace mpakt {
namespace {

using test::random_f32;
using test::run_values;

struct restore {
  cpu_isa::level saved = cpu_isa::current();
  ~restore() {
    cpu_isa::set_level(saved);
    cpu_fast::set_kernel_threads(1);
  }
};

tensor quantized(const tensor& f, dtype t, bool lanes) {
  auto q = convert_tensor(f, t);
  EXPECT_TRUE(q.ok());
  if (lanes) {
    EXPECT_TRUE(q->to_lanes16().ok());
  }
  return *q;
}

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> out;
  for (float x : v) out.push_back(std::bit_cast<std::uint32_t>(x));
  return out;
}

TEST(Lanes, TheSameValuesReorderedAndEveryRowReadBack) {
  const tensor f = random_f32({48, 96}, 11);
  for (dtype t : {dtype::q4, dtype::q8}) {
    SCOPED_TRACE(dtype_name(t));
    const tensor rows = quantized(f, t, false);
    const tensor lanes = quantized(f, t, true);
    ASSERT_TRUE(lanes.lanes16());
    EXPECT_EQ(lanes.nbytes(), rows.nbytes());
    EXPECT_NE(std::memcmp(lanes.data(), rows.data(), rows.nbytes()), 0);  // (reordered)
    // block 1 of group 2: the sixteen rows' scales side by side, then each run four bytes a row
    const std::byte* blk = lanes.data() + (2 * 3 + 1) * lane_block_bytes(t);
    for (int l = 0; l < 16; ++l) {
      const std::byte* row_blk = rows.row(32 + l) + (t == dtype::q8 ? 34 : 20);
      EXPECT_EQ(std::memcmp(blk + 2 * l, row_blk, 2), 0) << l;
      if (t == dtype::q4) {
        EXPECT_EQ(std::memcmp(blk + 32 + 2 * l, row_blk + 2, 2), 0) << l;
        for (int j = 0; j < 4; ++j) EXPECT_EQ(std::memcmp(blk + 64 + 64 * j + 4 * l, row_blk + 4 + 4 * j, 4), 0) << l << " " << j;
      } else {
        for (int j = 0; j < 4; ++j)
          for (int i = 0; i < 4; ++i) {  // runs 0-3: values 8j + 2i; runs 4-7: 8j + 2i + 1; each + 128
            EXPECT_EQ(std::uint8_t(blk[32 + 64 * j + 4 * l + i]), std::uint8_t(std::uint8_t(row_blk[2 + 8 * j + 2 * i]) ^ 0x80));
            EXPECT_EQ(std::uint8_t(blk[32 + 64 * (4 + j) + 4 * l + i]), std::uint8_t(std::uint8_t(row_blk[3 + 8 * j + 2 * i]) ^ 0x80));
          }
      }
    }
    std::vector<std::byte> scratch(rows.row_bytes());
    for (std::int64_t r = 0; r < rows.rows(); ++r)
      ASSERT_EQ(std::memcmp(lanes.packed_row(r, scratch.data()), rows.row(r), rows.row_bytes()), 0) << "row " << r;
    EXPECT_EQ(test::values_of(*to_f32(lanes)), test::values_of(*to_f32(rows)));
    // digests of the held weight are of its row-major bytes, whatever the form
    EXPECT_EQ(tensor_digest("n0nce", lanes), tensor_digest("n0nce", rows));
    EXPECT_EQ(tensor_digest("n0nce", rows),
              weight_digest("n0nce", std::string_view(reinterpret_cast<const char*>(rows.data()), rows.nbytes())));
  }
}

TEST(Lanes, OnlyQuantizedMatricesOfWholeGroupsFit) {
  EXPECT_TRUE(lanes_fit(dtype::q4, {16, 32}));
  EXPECT_TRUE(lanes_fit(dtype::q8, {48, 64}));
  EXPECT_FALSE(lanes_fit(dtype::q4, {24, 32}));
  EXPECT_FALSE(lanes_fit(dtype::bf16, {16, 32}));
  EXPECT_FALSE(lanes_fit(dtype::q4, {2, 16, 32}));
  auto odd = convert_tensor(random_f32({24, 64}, 3), dtype::q4);
  auto st = odd->to_lanes16();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.err().message.find("[24, 64]"), std::string::npos) << st.err().message;
  EXPECT_FALSE(odd->lanes16());
}

TEST(Lanes, ReferenceKernelsReadTheRows) {
  const tensor f = random_f32({32, 64}, 21);
  for (dtype t : {dtype::q4, dtype::q8}) {
    SCOPED_TRACE(dtype_name(t));
    const tensor rows = quantized(f, t, false), lanes = quantized(f, t, true);
    const tensor x = random_f32({3, 64}, 22);
    const char* tb = R"({"transB": true})";
    EXPECT_EQ(run_values("matmul", tb, {x, lanes}), run_values("matmul", tb, {x, rows}));
    const tensor ids = test::t32({4}, {0, 17, 31, 5});
    EXPECT_EQ(run_values("embedding", "{}", {ids, lanes}), run_values("embedding", "{}", {ids, rows}));
    for (const char* p : {R"({"axis":0,"start":3,"length":20})", R"({"axis":0,"start":16,"length":16})",
                          R"({"axis":1,"start":5,"length":40})"}) {
      auto a = test::run_op("slice", p, {lanes});
      auto b = test::run_op("slice", p, {rows});
      ASSERT_TRUE(a.ok() && b.ok()) << p;
      EXPECT_FALSE(a->lanes16());
      EXPECT_EQ(test::values_of(*to_f32(*a)), test::values_of(*to_f32(*b))) << p;
    }
  }
}

/// The CPU backend's matmul against a q8 or q4 weight in lanes, on every level this CPU has: equal to
/// the reference kernel (to the integer kernels' rounding) at every row count, N and K tried,
/// one or two threads, with and without a bias; from AVX2 on each of up to 32 rows the bits it gets
/// alone (batched steps decide as one-token steps), and a many-row product the bits of the same
/// weight held as rows (the lanes pack the same registers).
TEST(Lanes, MatmulOnEveryLevelAgreesAndKeepsEachRowsBits) {
  restore guard;
  int lanes_kernel = 0;
  for (auto lvl : cpu_isa::supported_levels())
    for (dtype wt : {dtype::q4, dtype::q8})
    for (std::int64_t k : {32, 96, 128, 576})
      for (std::int64_t n : {16, 48, 208})
        for (int threads : {1, 2}) {
          ASSERT_TRUE(cpu_isa::set_level(lvl));
          cpu_fast::set_kernel_threads(threads);
          const tensor f = random_f32({n, k}, unsigned(31 + n + k), 0.1f);
          const tensor rows = quantized(f, wt, false), lanes = quantized(f, wt, true);
          const tensor bias = random_f32({n}, unsigned(n));
          cpu_backend be;
          for (std::int64_t r : {1, 2, 3, 8, 17, 32, 40}) {
            SCOPED_TRACE(std::string(cpu_isa::level_name(lvl)) + " " + std::string(dtype_name(wt)) + " k " + std::to_string(k) + " n " + std::to_string(n) +
                         " rows " + std::to_string(r) + " threads " + std::to_string(threads));
            const tensor x = random_f32({r, k}, unsigned(100 + r));
            const char* t = R"({"transB": true})";
            const std::vector<tensor_desc> d = {x.desc(), lanes.desc()};
            const kernel_fn fn = be.kernel("matmul", d, **find_op_def("matmul")->parse(*parse_params_text(t)));
            const kernel_fn lin = be.kernel("linear", std::vector<tensor_desc>{x.desc(), lanes.desc(), bias.desc()},
                                            **find_op_def("linear")->parse(*parse_params_text(t)));
            const auto got = run_values("matmul", t, {x, lanes}, fn);
            // (more than 32 rows: the many-row kernels' int8 activations, a coarser rounding)
            const double abs = (r > 32 ? 3e-3 : 2e-4) * double(k), rel = r > 32 ? 2e-2 : 2e-3;
            test::expect_close(got, run_values("matmul", t, {x, rows}), abs, rel);
            test::expect_close(run_values("linear", t, {x, lanes, bias}, lin), run_values("linear", t, {x, rows, bias}), abs,
                               rel);
            if (lvl < cpu_isa::level::avx2) continue;
            ++lanes_kernel;
            if (r <= 32) {
              for (std::int64_t row : {std::int64_t(0), r - 1}) {
                const std::vector<float> own(x.f32() + row * k, x.f32() + (row + 1) * k);
                const auto alone = run_values("matmul", t, {test::t32({1, k}, own), lanes}, fn);
                EXPECT_EQ(bits(alone), bits(std::vector<float>(got.begin() + row * n, got.begin() + (row + 1) * n)))
                    << "row " << row;
              }
            } else {
              EXPECT_EQ(bits(got), bits(run_values("matmul", t, {x, rows}, fn)));
            }
          }
        }
  if (cpu_isa::best() >= cpu_isa::level::avx2) {
    EXPECT_GT(lanes_kernel, 0);
  }
}

/// AVX2's lanes kernels in AVX-VNNI's dot products (cpu_isa::avx_vnni_dots) give the bits of
/// plain AVX2's, at every row count (the decode rows up to 32, the many-row kernel past them)
/// and with the weight held in lanes or as rows; the choice follows the level and the override.
TEST(Lanes, AvxVnniDotsGiveTheBitsOfPlainAvx2) {
  restore guard;
  const test::avx_vnni_guard vnni(true);
  if (!cpu_isa::detected().avx_vnni || cpu_isa::best() < cpu_isa::level::avx2) GTEST_SKIP() << "no AVX-VNNI here";
  ASSERT_TRUE(cpu_isa::set_level(cpu_isa::level::avx2));
  EXPECT_TRUE(cpu_isa::avx_vnni_dots());
  EXPECT_NE(cpu_isa::describe().find("avx_vnni dot products"), std::string::npos) << cpu_isa::describe();
  cpu_isa::prefer_avx_vnni(false);
  EXPECT_FALSE(cpu_isa::avx_vnni_dots());
  cpu_isa::prefer_avx_vnni(true);
  if (cpu_isa::best() >= cpu_isa::level::avx512_vnni) {
    ASSERT_TRUE(cpu_isa::set_level(cpu_isa::level::avx512_vnni));
    EXPECT_FALSE(cpu_isa::avx_vnni_dots());  // (the 512-bit kernels take these products)
    ASSERT_TRUE(cpu_isa::set_level(cpu_isa::level::avx2));
  }
  int compared = 0;
  for (dtype wt : {dtype::q4, dtype::q8})
    for (std::int64_t k : {32, 96, 576})
      for (std::int64_t n : {16, 48, 200})
        for (int threads : {1, 2}) {
          cpu_fast::set_kernel_threads(threads);
          const tensor f = random_f32({n, k}, unsigned(57 + n + k), 0.1f);
          const tensor bias = random_f32({n}, unsigned(n + 3));
          for (bool in_lanes : {true, false}) {
            if (in_lanes && n % 16 != 0) continue;
            const tensor w = quantized(f, wt, in_lanes);
            for (std::int64_t r : {1, 2, 3, 8, 17, 32, 33, 45}) {
              SCOPED_TRACE(std::string(dtype_name(wt)) + " k " + std::to_string(k) + " n " + std::to_string(n) + " rows " +
                           std::to_string(r) + " threads " + std::to_string(threads) + (in_lanes ? " lanes" : " rows"));
              const tensor x = random_f32({r, k}, unsigned(300 + r + k), 2.0f);
              const char* t = R"({"transB": true})";
              cpu_backend be;
              const kernel_fn lin = be.kernel("linear", std::vector<tensor_desc>{x.desc(), w.desc(), bias.desc()},
                                              **find_op_def("linear")->parse(*parse_params_text(t)));
              const auto with_dots = run_values("linear", t, {x, w, bias}, lin);
              cpu_isa::prefer_avx_vnni(false);
              const auto plain = run_values("linear", t, {x, w, bias}, lin);
              cpu_isa::prefer_avx_vnni(true);
              EXPECT_EQ(bits(with_dots), bits(plain));
              ++compared;
            }
          }
        }
  EXPECT_GT(compared, 0);
}

/// A q4 layer's products of one activation as they arrive together — q and k (q4) and v (q8)
/// in lanes, and a q8 matrix whose 200 rows stay rows — each give the bits of their own call,
/// at 2 rows (the lanes kernel, one set of activations for the mixed group) and 40 (the many-row
/// kernels, the mixed group one by one), a row that is not finite propagating as in the
/// reference.
TEST(Lanes, AGroupMixingLanesAndRowsIsTheBitsOfEachAlone) {
  restore guard;
  const std::int64_t k = 576;
  const std::vector<tensor> ws4 = {quantized(random_f32({576, k}, 41, 0.1f), dtype::q4, true),
                                   quantized(random_f32({192, k}, 42, 0.1f), dtype::q4, true),
                                   quantized(random_f32({192, k}, 43, 0.1f), dtype::q8, true),
                                   quantized(random_f32({200, k}, 45, 0.1f), dtype::q8, false)};
  for (std::int64_t r : {2, 40})
    for (int threads : {1, 2}) {
      cpu_fast::set_kernel_threads(threads);
      tensor x = random_f32({r, k}, 44);
      x.f32()[k + 7] = std::numeric_limits<float>::quiet_NaN();  // row 1 not finite
      const char* t = R"({"transB": true})";
      cpu_backend be;
      const std::vector<tensor_desc> d = {x.desc(), ws4[0].desc()};
      const kernel_fn fn = be.kernel("matmul", d, **find_op_def("matmul")->parse(*parse_params_text(t)));
      const group_kernel_fn group = be.group_kernel(fn);
      ASSERT_NE(group, nullptr);
      auto params = find_op_def("matmul")->parse(*parse_params_text(t));
      std::vector<tensor> outs, held = ws4;
      for (const auto& w : ws4) outs.push_back(*tensor::make(dtype::f32, {r, w.shape()[0]}));
      tensor xs = x;
      std::vector<std::vector<tensor*>> ptrs;
      for (auto& w : held) ptrs.push_back({&xs, &w});
      workspace ws;
      std::vector<kernel_call> calls;
      for (std::size_t i = 0; i < held.size(); ++i) calls.push_back(kernel_call{params->get(), ptrs[i], &outs[i], &ws});
      ASSERT_TRUE(group(calls).ok());
      for (std::size_t i = 0; i < ws4.size(); ++i) {
        const auto alone = run_values("matmul", t, {x, ws4[i]}, fn);
        const auto got = test::values_of(outs[i]);
        EXPECT_EQ(bits(got), bits(alone)) << "product " << i << " rows " << r << " threads " << threads;
        EXPECT_TRUE(std::isnan(got[std::size_t(outs[i].cols())])) << "product " << i;  // row 1
        test::expect_close(got, run_values("matmul", t, {x, ws4[i]}), 3e-3 * double(k), 2e-2);
      }
    }
}

}  // namespace
}  // namespace mpakt
