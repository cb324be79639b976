/// Fast CPU kernels of the small ops on every decoder's path — swiglu, silu, rmsnorm,
/// add/sub/mul (the same bits as the reference) and argmax (the same index) — with
/// exp and the row sums in f32 vectors (simple_impl.inc, one translation unit per level)
/// instead of the reference's double arithmetic, split over the kernel threads when large
/// (prefill). Agree with the reference to a few f32 ulps (test/backends/fast_kernels_test.cpp).

#include <algorithm>

#include "backends/cpu/fast/families.hpp"
#include "backends/cpu/fast/isa_kernels.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "backends/cpu/isa.hpp"
#include "runtime/ops/norm_params.hpp"

namespace mpakt::cpu_fast {

namespace {

/// Below this many elements a kernel runs on the caller alone.
constexpr std::int64_t parallel_min_elements = 1 << 14;

/// Runs f(begin, end) over [0, n) in one part per kernel thread (parts aligned to `align`).
template <class F>
void split(std::int64_t n, std::int64_t elements, std::int64_t align, F&& f) {
  const int threads = kernel_threads();
  if (threads <= 1 || elements < parallel_min_elements || n < 2 * align) return f(std::int64_t(0), n);
  const int parts = int(std::min<std::int64_t>(threads, n / align));
  parallel_for(parts, [&](int p) {
    const std::int64_t b = n * p / parts / align * align;
    const std::int64_t e = p + 1 == parts ? n : n * (p + 1) / parts / align * align;
    f(b, e);
  });
}

using gated_fn = void (*)(const float*, const float*, float*, std::int64_t, std::int64_t);
using unary_fn = void (*)(const float*, float*, std::int64_t, std::int64_t);
using norm_fn = void (*)(const float*, const float*, float*, std::int64_t, std::int64_t, std::int64_t, double, float);

template <gated_fn F>
status gated_kernel(const kernel_call& c) {
  const float* gate = c.inputs[0]->f32();
  const float* up = c.inputs[1]->f32();
  float* out = c.output->f32();
  const std::int64_t n = c.inputs[0]->numel();
  split(n, n, 64, [&](std::int64_t b, std::int64_t e) { F(gate, up, out, b, e); });
  return ok_status();
}

template <unary_fn F>
status unary_kernel(const kernel_call& c) {
  const float* x = c.inputs[0]->f32();
  float* out = c.output->f32();
  const std::int64_t n = c.inputs[0]->numel();
  split(n, n, 64, [&](std::int64_t b, std::int64_t e) { F(x, out, b, e); });
  return ok_status();
}

template <norm_fn F>
status rmsnorm_kernel(const kernel_call& c) {
  const auto& p = params_of<ops::rmsnorm_params>(c);
  const tensor& x = *c.inputs[0];
  const std::int64_t group = p.group_size > 0 ? p.group_size : x.cols();
  if (group == 0) return ok_status();
  const std::int64_t groups = x.numel() / group;
  const float* gamma = c.inputs[1]->f32();
  float* out = c.output->f32();
  split(groups, x.numel(), 1,
        [&](std::int64_t b, std::int64_t e) { F(x.f32(), gamma, out, group, b, e, p.eps, float(p.weight_offset)); });
  return ok_status();
}

using binary_fn = void (*)(int, const float*, const float*, float*, std::int64_t, std::int64_t, std::int64_t,
                          std::int64_t);

/// add, sub, mul (op 0, 1, 2): b shaped like a, a row as wide as a's last dimension, or a
/// single value — the shapes the shape rule allows.
template <binary_fn F, int Op>
status binary_kernel(const kernel_call& c) {
  const tensor& a = *c.inputs[0];
  const tensor& b = *c.inputs[1];
  const std::int64_t n = a.numel();
  const std::int64_t kind = b.numel() == n ? 0 : b.numel() == 1 ? 2 : 1;
  const std::int64_t cols = a.cols();
  split(n, n, 64, [&](std::int64_t lo, std::int64_t hi) { F(Op, a.f32(), b.f32(), c.output->f32(), cols, kind, lo, hi); });
  return ok_status();
}

using argmax_fn = void (*)(const float*, float*, std::int64_t, std::int64_t, std::int64_t);

/// argmax over the last axis, rows split over the threads when the row set is large (a batched
/// pass's logits).
template <argmax_fn F>
status argmax_kernel(const kernel_call& c) {
  const tensor& x = *c.inputs[0];
  const std::int64_t cols = x.cols(), rows = cols > 0 ? x.numel() / cols : 0;
  split(rows, x.numel(), 1, [&](std::int64_t b, std::int64_t e) { F(x.f32(), c.output->f32(), cols, b, e); });
  return ok_status();
}

}  // namespace

void add_simple_kernels(std::vector<cpu_kernel>& out) {
  using cpu_isa::level;
  out.push_back({"swiglu", gated_kernel<avx512::swiglu_range>, all_inputs_f32, "avx512", level::avx512});
  out.push_back({"swiglu", gated_kernel<avx2::swiglu_range>, all_inputs_f32, "avx2", level::avx2});
  out.push_back({"silu", unary_kernel<avx512::silu_range>, all_inputs_f32, "avx512", level::avx512});
  out.push_back({"silu", unary_kernel<avx2::silu_range>, all_inputs_f32, "avx2", level::avx2});
  out.push_back({"rmsnorm", rmsnorm_kernel<avx512::rmsnorm_rows>, all_inputs_f32, "avx512", level::avx512});
  out.push_back({"rmsnorm", rmsnorm_kernel<avx2::rmsnorm_rows>, all_inputs_f32, "avx2", level::avx2});
  out.push_back({"add", binary_kernel<avx512::binary_range, 0>, all_inputs_f32, "avx512", level::avx512});
  out.push_back({"add", binary_kernel<avx2::binary_range, 0>, all_inputs_f32, "avx2", level::avx2});
  out.push_back({"sub", binary_kernel<avx512::binary_range, 1>, all_inputs_f32, "avx512", level::avx512});
  out.push_back({"sub", binary_kernel<avx2::binary_range, 1>, all_inputs_f32, "avx2", level::avx2});
  out.push_back({"mul", binary_kernel<avx512::binary_range, 2>, all_inputs_f32, "avx512", level::avx512});
  out.push_back({"mul", binary_kernel<avx2::binary_range, 2>, all_inputs_f32, "avx2", level::avx2});
  out.push_back({"argmax", argmax_kernel<avx512::argmax_rows>, all_inputs_f32, "avx512", level::avx512});
  out.push_back({"argmax", argmax_kernel<avx2::argmax_rows>, all_inputs_f32, "avx2", level::avx2});
}

}  // namespace mpakt::cpu_fast
