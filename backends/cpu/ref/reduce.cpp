/// Reference kernels of argmax, reduce_max, reduce_sum and reduce_mean (shape rules:
/// runtime/ops/reduce.cpp). NaN counts as larger than any number, as in PyTorch.

#include <cmath>

#include "backends/cpu/ref/families.hpp"

namespace mpakt::cpu_ref {

namespace {

/// Index of the first maximum of row r (the first NaN, if any).
std::int64_t row_argmax(const float* x, std::int64_t n) {
  std::int64_t best = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    if (std::isnan(x[j])) return j;
    if (x[j] > x[best]) best = j;
  }
  return best;
}

status argmax_k(const kernel_call& c) {
  const tensor& x = *c.inputs[0];
  const std::int64_t cols = x.cols(), rows = x.rows();
  for (std::int64_t r = 0; r < rows; ++r) c.output->f32()[r] = float(row_argmax(x.f32() + r * cols, cols));
  return ok_status();
}

status reduce_max_k(const kernel_call& c) {
  const tensor& x = *c.inputs[0];
  const std::int64_t cols = x.cols(), rows = x.rows();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xi = x.f32() + r * cols;
    c.output->f32()[r] = xi[row_argmax(xi, cols)];
  }
  return ok_status();
}

double total(const tensor& x) {
  double s = 0;
  for (float v : x.f32_span()) s += v;
  return s;
}

status reduce_sum_k(const kernel_call& c) {
  c.output->f32()[0] = float(total(*c.inputs[0]));
  return ok_status();
}

/// The mean of no elements is NaN, as in PyTorch.
status reduce_mean_k(const kernel_call& c) {
  const tensor& x = *c.inputs[0];
  c.output->f32()[0] = float(total(x) / double(x.numel()));
  return ok_status();
}

}  // namespace

void add_reduce_kernels(std::vector<cpu_kernel>& out) {
  out.push_back({"argmax", argmax_k});
  out.push_back({"reduce_max", reduce_max_k});
  out.push_back({"reduce_sum", reduce_sum_k});
  out.push_back({"reduce_mean", reduce_mean_k});
}

}  // namespace mpakt::cpu_ref
