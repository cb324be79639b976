/// Reference kernels of reshape, transpose, slice, concat, zeros and cache_write (shape
/// rules: runtime/ops/layout.cpp). Run-time errors cover bound parameters only: a bound
/// slice start or cache_write offset that runs past the end.

#include <cstring>

#include "backends/cpu/ref/families.hpp"
#include "backends/cpu/ref/packed.hpp"
#include "runtime/ops/layout_params.hpp"

namespace mpakt::cpu_ref {

namespace {

/// The output may share the input's bytes (the executor made it a view); copy otherwise.
status reshape_k(const kernel_call& c) {
  const tensor& a = *c.inputs[0];
  if (!c.output->same_storage(a)) std::memcpy(c.output->data(), a.data(), a.nbytes());
  return ok_status();
}

status transpose_k(const kernel_call& c) {
  const tensor& a = *c.inputs[0];
  const std::int64_t rows = a.shape()[0], cols = a.shape()[1];
  const float* x = a.f32();
  float* y = c.output->f32();
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) y[j * rows + i] = x[i * cols + j];
  return ok_status();
}

/// Along axis 0 of a tensor with two or more dimensions: a byte copy of whole rows, in the
/// input's dtype. Along the last axis (or a 1-D tensor): each row's range, widened to f32.
status slice_k(const kernel_call& c) {
  const auto& p = params_of<ops::slice_params>(c);
  const tensor& a = *c.inputs[0];
  tensor& out = *c.output;
  const int ax = ops::resolve_axis(p.axis, a.shape().size());
  const std::int64_t dim = a.shape()[std::size_t(ax)];
  const auto start = static_cast<std::int64_t>(p.start);
  if (start > dim - p.length)
    return invalid("parameter start is " + std::to_string(start) + " but with length " + std::to_string(p.length) +
                   " the slice runs past the end of axis " + std::to_string(ax) + " of input a " + shape_str(a.shape()));
  if (ax == 0 && a.shape().size() >= 2 && a.lanes16()) {
    // rows of a matrix in lanes: each gathered into its row-major bytes (the slice is a new
    // tensor, held row-major)
    for (std::int64_t r = 0; r < p.length; ++r) std::memcpy(out.row(r), packed_row_of(a, start + r), a.row_bytes());
    return ok_status();
  }
  if (ax == 0 && a.shape().size() >= 2) {
    const std::int64_t rows_per_index = dim == 0 ? 0 : a.rows() / dim;
    const std::size_t stride = std::size_t(rows_per_index) * a.row_bytes();
    const std::byte* src = a.data() + std::size_t(start) * stride;
    if (out.data() != src) std::memcpy(out.data(), src, std::size_t(p.length) * stride);  // else already a view
    return ok_status();
  }
  const std::int64_t rows = a.rows();
  for (std::int64_t r = 0; r < rows; ++r) load_range(a, r, start, p.length, out.f32() + r * p.length);
  return ok_status();
}

status concat_k(const kernel_call& c) {
  const auto& p = params_of<ops::concat_params>(c);
  const tensor& a = *c.inputs[0];
  const tensor& b = *c.inputs[1];
  std::byte* y = c.output->data();
  const int ax = ops::resolve_axis(p.axis, a.shape().size());
  if (ax == 0) {
    std::memcpy(y, a.data(), a.nbytes());
    std::memcpy(y + a.nbytes(), b.data(), b.nbytes());
    return ok_status();
  }
  const std::int64_t rows = a.rows(), ca = a.cols(), cb = b.cols();
  float* out = c.output->f32();
  for (std::int64_t r = 0; r < rows; ++r) {
    std::memcpy(out + r * (ca + cb), a.f32() + r * ca, std::size_t(ca) * sizeof(float));
    std::memcpy(out + r * (ca + cb) + ca, b.f32() + r * cb, std::size_t(cb) * sizeof(float));
  }
  return ok_status();
}

status zeros_k(const kernel_call& c) {
  std::memset(c.output->data(), 0, c.output->nbytes());
  return ok_status();
}

/// Writes values into rows [offset, offset + rows) of the cache. The output is the cache
/// itself (aliases_input = 0); when given a separate buffer, the cache is copied first. A
/// bf16/f16 cache (its dtype read from the tensor: a compiled template serves any) gets the
/// values rounded to nearest even.
status cache_write_k(const kernel_call& c) {
  const tensor& cache = *c.inputs[0];
  const tensor& values = *c.inputs[1];
  tensor& out = *c.output;
  const std::int64_t max_rows = cache.shape()[0], width = cache.shape()[1];
  const std::int64_t rows = shape_numel(shape_t(values.shape().begin(), values.shape().end() - 1));
  const auto offset = static_cast<std::int64_t>(params_of<ops::cache_write_params>(c).offset);
  if (offset > max_rows - rows)
    return invalid("parameter offset is " + std::to_string(offset) + " but " + std::to_string(rows) +
                   " rows written from there run past the cache's " + std::to_string(max_rows) + " rows");
  if (!out.same_storage(cache)) std::memcpy(out.data(), cache.data(), cache.nbytes());
  switch (out.type()) {
    case dtype::f32:
      std::memcpy(out.f32() + offset * width, values.f32(), std::size_t(rows * width) * sizeof(float));
      return ok_status();
    case dtype::bf16:
    case dtype::f16:
      // each value rounded to nearest even, as torch's .to(torch.bfloat16 / torch.float16)
      quantize_row(out.type(), values.f32(), out.data() + offset * width * 2, rows * width);
      return ok_status();
    default:
      return invalid("input cache is " + std::string(dtype_name(out.type())) + "; a cache is f32, bf16 or f16");
  }
}

}  // namespace

void add_layout_kernels(std::vector<cpu_kernel>& out) {
  out.push_back({"reshape", reshape_k});
  out.push_back({"transpose", transpose_k});
  out.push_back({"slice", slice_k});
  out.push_back({"concat", concat_k});
  out.push_back({"zeros", zeros_k});
  out.push_back({"cache_write", cache_write_k});
}

}  // namespace mpakt::cpu_ref
