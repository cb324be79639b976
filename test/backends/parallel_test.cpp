// The fast matmul split over kernel threads: every dtype gives exactly the single-thread
// result (each output column is computed the same way whichever thread computes it), two
// callers at once are fine (one runs alone), and the reference agrees within tolerance.

#include "backends/cpu/fast/parallel.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "test/support/op_runner.hpp"

namespace mpakt {
namespace {

tensor random_tensor(shape_t shape, unsigned seed) {
  auto t = tensor::make(dtype::f32, shape);
  std::uint32_t s = seed * 2654435761u + 1;
  for (float& v : t->f32_span()) {
    s = s * 1664525u + 1013904223u;
    v = float(int(s >> 9) % 2001 - 1000) / 1000.0f;
  }
  return *t;
}

kernel_fn fast_matmul() {
  cpu_backend be;
  auto params = find_op_def("matmul")->parse(*parse_params_text(R"({"transB": true})"));
  tensor_desc a{dtype::f32, {3, 576}}, b{dtype::bf16, {1536, 576}};
  std::vector<tensor_desc> in{a, b};
  return be.kernel("matmul", in, **params);
}

std::vector<float> run_with_threads(int threads, const tensor& x, const tensor& w) {
  cpu_fast::set_kernel_threads(threads);
  auto out = test::run_op("matmul", R"({"transB": true})", {x, w}, fast_matmul());
  cpu_fast::set_kernel_threads(1);
  EXPECT_TRUE(out.ok()) << (out.ok() ? "" : out.err().message);
  return out.ok() ? std::vector<float>(out->f32_span().begin(), out->f32_span().end()) : std::vector<float>{};
}

TEST(ParallelMatmul, SplitsGiveExactlyTheSingleThreadResultForEveryDtype) {
  ASSERT_NE(fast_matmul(), cpu_backend::reference("matmul"));
  const tensor x = random_tensor({3, 576}, 1);
  const tensor w32 = random_tensor({1541, 576}, 2);  // n not a multiple of 4: a ragged last part
  for (dtype t : {dtype::f32, dtype::bf16, dtype::f16, dtype::q8, dtype::q4}) {
    const tensor w = *convert_tensor(w32, t);
    const auto one = run_with_threads(1, x, w);
    const auto two = run_with_threads(2, x, w);
    ASSERT_EQ(one.size(), std::size_t(3 * 1541));
    EXPECT_EQ(one, two) << dtype_name(t);
    if (is_quantized(t)) continue;  // int8 activations: within their bound (fast_kernels_test.cpp)
    auto ref = test::run_op("matmul", R"({"transB": true})", {x, w}, cpu_backend::reference("matmul"));
    ASSERT_TRUE(ref.ok());
    for (std::size_t i = 0; i < one.size(); ++i)
      ASSERT_NEAR(two[i], ref->f32()[i], 1e-3 + 1e-4 * std::fabs(ref->f32()[i])) << dtype_name(t) << " at " << i;
  }
}

TEST(ParallelMatmul, TwoCallersAtOnceBothGetTheirResult) {
  const tensor x = random_tensor({2, 576}, 3);
  const tensor w = *convert_tensor(random_tensor({1536, 576}, 4), dtype::bf16);
  const auto expected = run_with_threads(1, x, w);
  cpu_fast::set_kernel_threads(2);
  std::atomic<int> wrong{0};
  auto caller = [&] {
    for (int i = 0; i < 50; ++i) {
      auto out = test::run_op("matmul", R"({"transB": true})", {x, w}, fast_matmul());
      if (!out.ok() || !std::equal(out->f32_span().begin(), out->f32_span().end(), expected.begin(), expected.end())) wrong++;
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  cpu_fast::set_kernel_threads(1);
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ParallelFor, EveryPartRunsExactlyOnceJobAfterJob) {
  // Thousands of short jobs back to back, with more parts than threads: a helper that wakes
  // late must never run a part of a job that has ended, nor a part twice.
  cpu_fast::set_kernel_threads(2);
  for (int job = 0; job < 3000; ++job) {
    const int parts = 1 + job % 13;
    std::vector<std::atomic<int>> runs(static_cast<std::size_t>(parts));
    cpu_fast::parallel_for(parts, [&](int p) { runs[std::size_t(p)].fetch_add(1); });
    for (int p = 0; p < parts; ++p) ASSERT_EQ(runs[std::size_t(p)].load(), 1) << "job " << job << " part " << p;
  }
  cpu_fast::set_kernel_threads(1);
}

TEST(ParallelFor, ACallerWhoseHelperIsHeldUpStillFinishes) {
  // One part blocks until every other part has run: with parts claimed one at a time, the
  // caller and any free helper take the rest instead of waiting on a fixed share.
  cpu_fast::set_kernel_threads(2);
  std::atomic<int> done{0};
  constexpr int parts = 40;
  cpu_fast::parallel_for(parts, [&](int p) {
    if (p == 0)
      while (done.load() < parts - 1) std::this_thread::yield();
    done.fetch_add(1);
  });
  EXPECT_EQ(done.load(), parts);
  cpu_fast::set_kernel_threads(1);
}

}  // namespace
}  // namespace mpakt
