/// Reference kernels of matmul, linear and embedding (shape rules: runtime/ops/matmul.cpp).
/// The weight may be packed; it is widened one row (or a short run of a row) at a time,
/// never whole. Products accumulate in double.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/ref/families.hpp"
#include "backends/cpu/ref/packed.hpp"
#include "runtime/ops/matmul_params.hpp"

namespace mpakt::cpu_ref {

namespace {

/// out[r, n] = sum_k x[r, k] * w(k, n) (+ bias[n]), with w stored [K, N] or, for trans_b,
/// [N, K]. x is f32 [rows, K]; w may be packed.
void product(const tensor& x, const tensor& w, const float* bias, bool trans_b, tensor& out, workspace& ws) {
  // out.rows(), not x.rows(): x [3, 0] still has 3 rows (of bias alone).
  const std::int64_t rows = out.rows(), k = x.cols();
  const std::int64_t n = trans_b ? w.shape()[0] : w.shape()[1];
  const float* xs = x.f32();
  float* ys = out.f32();
  if (trans_b) {
    // Weight row j holds column j of the product: widen it once, use it for every row of x.
    float* tmp = ws.floats(std::size_t(k));
    for (std::int64_t j = 0; j < n; ++j) {
      const float* wj = tmp;
      if (w.type() == dtype::f32) wj = reinterpret_cast<const float*>(w.row(j));
      else load_row(w, j, tmp);
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = xs + r * k;
        double acc = bias ? double(bias[j]) : 0.0;
        for (std::int64_t i = 0; i < k; ++i) acc += double(xr[i]) * double(wj[i]);
        ys[r * n + j] = float(acc);
      }
    }
    return;
  }
  // [K, N]: output columns in runs of up to 64, each run accumulated over the K weight rows.
  constexpr std::int64_t run = 64;
  double acc[run];
  float part[run];
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = xs + r * k;
    for (std::int64_t j0 = 0; j0 < n; j0 += run) {
      const std::int64_t len = std::min(run, n - j0);
      for (std::int64_t j = 0; j < len; ++j) acc[j] = bias ? double(bias[j0 + j]) : 0.0;
      for (std::int64_t i = 0; i < k; ++i) {
        load_range(w, i, j0, len, part);
        const double xv = xr[i];
        for (std::int64_t j = 0; j < len; ++j) acc[j] += xv * double(part[j]);
      }
      for (std::int64_t j = 0; j < len; ++j) ys[r * n + j0 + j] = float(acc[j]);
    }
  }
}

status matmul_k(const kernel_call& c) {
  product(*c.inputs[0], *c.inputs[1], nullptr, params_of<ops::matmul_params>(c).trans_b, *c.output, *c.scratch);
  return ok_status();
}

status linear_k(const kernel_call& c) {
  product(*c.inputs[0], *c.inputs[1], c.inputs[2]->f32(), params_of<ops::matmul_params>(c).trans_b, *c.output,
          *c.scratch);
  return ok_status();
}

/// Row t of the output is table row ids[t]; an id outside [0, V) gives zeros. An id that
/// is not a whole number is an error naming its position.
status embedding_k(const kernel_call& c) {
  const tensor& ids = *c.inputs[0];
  const tensor& table = *c.inputs[1];
  const std::int64_t t_count = ids.numel(), vocab = table.shape()[0], width = table.cols();
  float* ys = c.output->f32();
  for (std::int64_t t = 0; t < t_count; ++t) {
    const float id = ids.f32()[t];
    if (id != std::floor(id))  // NaN too
      return invalid("input ids[" + std::to_string(t) + "] is " + num_str(id) + ", not a whole number");
    float* yt = ys + t * width;
    if (id < 0 || double(id) >= double(vocab)) {  // inf too
      std::memset(yt, 0, std::size_t(width) * sizeof(float));
      continue;
    }
    load_row(table, std::int64_t(id), yt);
  }
  return ok_status();
}

}  // namespace

void add_matmul_kernels(std::vector<cpu_kernel>& out) {
  out.push_back({"matmul", matmul_k});
  out.push_back({"linear", linear_k});
  out.push_back({"embedding", embedding_k});
}

}  // namespace mpakt::cpu_ref
