#pragma once
/// Helpers for reference kernels that read weights which may be packed (bf16, f16, q8, q4).
/// They widen one row at a time into caller scratch: never a whole weight.

#include <vector>

#include "runtime/tensor.hpp"

namespace mpakt::cpu_ref {

/// Row r's packed bytes (tensor::packed_row), gathered for a tensor in lanes into a buffer of
/// the calling thread.
inline const std::byte* packed_row_of(const tensor& t, std::int64_t r) {
  if (!t.lanes16()) return t.row(r);
  thread_local std::vector<std::byte> scratch;
  scratch.resize(t.row_bytes());
  return t.packed_row(r, scratch.data());
}

/// Row r (of the last dimension) of `t` into dst[0..t.cols()).
inline void load_row(const tensor& t, std::int64_t r, float* dst) {
  dequantize_row(t.type(), packed_row_of(t, r), dst, t.cols());
}

/// Elements [first, first+n) of row r of `t` into dst.
inline void load_range(const tensor& t, std::int64_t r, std::int64_t first, std::int64_t n, float* dst) {
  dequantize_range(t.type(), packed_row_of(t, r), first, dst, n);
}

/// Dot product of row r of `w` with x[0..w.cols()), accumulated in double; `tmp` is
/// scratch of w.cols() floats.
inline double dot_row(const tensor& w, std::int64_t r, const float* x, float* tmp) {
  const std::int64_t n = w.cols();
  const float* row;
  if (w.type() == dtype::f32) {
    row = reinterpret_cast<const float*>(w.row(r));
  } else {
    load_row(w, r, tmp);
    row = tmp;
  }
  double acc = 0;
  for (std::int64_t i = 0; i < n; ++i) acc += double(row[i]) * double(x[i]);
  return acc;
}

}  // namespace mpakt::cpu_ref
