/// Reference kernels of rmsnorm, layernorm, softmax and causal_mask (shape rules:
/// runtime/ops/norm.cpp). Row statistics accumulate in double.

#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/ref/families.hpp"
#include "runtime/ops/norm_params.hpp"

namespace mpakt::cpu_ref {

namespace {

/// Each run of `group` channels (the whole row when groupSize is unset) is normalised by
/// its own root mean square, then scaled by gamma + weightOffset.
status rmsnorm_k(const kernel_call& c) {
  const auto& p = params_of<ops::rmsnorm_params>(c);
  const tensor& x = *c.inputs[0];
  const float* gamma = c.inputs[1]->f32();
  const std::int64_t cols = x.cols();
  const std::int64_t group = p.group_size > 0 ? p.group_size : cols;
  if (group == 0) return ok_status();  // zero-width rows: nothing to write
  const std::int64_t groups = x.numel() / group;
  const float* in = x.f32();
  float* out = c.output->f32();
  for (std::int64_t g = 0; g < groups; ++g) {
    const float* xi = in + g * group;
    float* yi = out + g * group;
    double ss = 0;
    for (std::int64_t j = 0; j < group; ++j) ss += double(xi[j]) * double(xi[j]);
    const double inv = 1.0 / std::sqrt(ss / double(group) + p.eps);
    for (std::int64_t j = 0; j < group; ++j) yi[j] = float(double(xi[j]) * inv * (double(gamma[j]) + p.weight_offset));
  }
  return ok_status();
}

/// (x - mean) / sqrt(biased variance + eps) * gamma + beta over each row.
status layernorm_k(const kernel_call& c) {
  const double eps = params_of<ops::layernorm_params>(c).eps;
  const tensor& x = *c.inputs[0];
  const float* gamma = c.inputs[1]->f32();
  const float* beta = c.inputs[2]->f32();
  const std::int64_t cols = x.cols(), rows = x.rows();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xi = x.f32() + r * cols;
    float* yi = c.output->f32() + r * cols;
    double sum = 0;
    for (std::int64_t j = 0; j < cols; ++j) sum += xi[j];
    const double mean = sum / double(cols);
    double var = 0;
    for (std::int64_t j = 0; j < cols; ++j) var += (xi[j] - mean) * (xi[j] - mean);
    var /= double(cols);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (std::int64_t j = 0; j < cols; ++j) yi[j] = float((xi[j] - mean) * inv * gamma[j] + beta[j]);
  }
  return ok_status();
}

/// exp(x - max) / sum over each row. A row that is entirely -inf gives NaN, as in PyTorch.
status softmax_k(const kernel_call& c) {
  const tensor& x = *c.inputs[0];
  const std::int64_t cols = x.cols(), rows = x.rows();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xi = x.f32() + r * cols;
    float* yi = c.output->f32() + r * cols;
    double m = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < cols; ++j)
      if (xi[j] > m || std::isnan(xi[j])) m = xi[j];
    double sum = 0;
    for (std::int64_t j = 0; j < cols; ++j) sum += std::exp(double(xi[j]) - m);
    for (std::int64_t j = 0; j < cols; ++j) yi[j] = float(std::exp(double(xi[j]) - m) / sum);
  }
  return ok_status();
}

/// Copies a, then sets entries (i, j) with j > i of every [n, n] block to -inf.
status causal_mask_k(const kernel_call& c) {
  const tensor& a = *c.inputs[0];
  tensor& out = *c.output;
  if (!out.same_storage(a)) std::memcpy(out.data(), a.data(), std::size_t(a.numel()) * sizeof(float));
  const std::int64_t n = a.cols();
  if (n == 0) return ok_status();
  const std::int64_t blocks = a.numel() / (n * n);
  float* y = out.f32();
  for (std::int64_t b = 0; b < blocks; ++b)
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = i + 1; j < n; ++j) y[(b * n + i) * n + j] = -std::numeric_limits<float>::infinity();
  return ok_status();
}

}  // namespace

void add_norm_kernels(std::vector<cpu_kernel>& out) {
  out.push_back({"rmsnorm", rmsnorm_k});
  out.push_back({"layernorm", layernorm_k});
  out.push_back({"softmax", softmax_k});
  out.push_back({"causal_mask", causal_mask_k});
}

}  // namespace mpakt::cpu_ref
