#pragma once
/// Typed parameters of the layout ops (runtime/ops/layout.cpp), shared with their kernels,
/// and the axis rule slice and concat share. transpose takes no parameters.

#include <cstdint>

#include "runtime/op.hpp"
#include "runtime/tensor.hpp"

namespace mpakt::ops {

/// reshape: the target shape, with at most one -1 (inferred from the element count).
struct reshape_params final : op_params {
  shape_t shape;
};

/// zeros: the shape to create, and its dtype: f32, or bf16/f16 for a KV cache stored at
/// half width (`dtype` is a server-only parameter: op_def::server_params).
struct zeros_params final : op_params {
  shape_t shape;
  dtype type = dtype::f32;
};

/// slice / concat axis as written: 0, -1, or a non-negative index that must name the
/// last axis of the input (only axis 0 and the last axis are supported).
/// Returns the resolved axis for an input of `rank` dimensions, or -1 when unsupported.
inline int resolve_axis(std::int64_t axis, std::size_t rank) {
  if (rank == 0) return -1;
  if (axis == 0) return 0;
  if (axis == -1 || axis == std::int64_t(rank) - 1) return int(rank) - 1;
  return -1;
}

/// slice: positions [start, start + length) along `axis`. `start` is bindable (a double
/// holding an integer once check() passed); `length` and `axis` shape the output.
struct slice_params final : op_params {
  double start = 0;
  std::int64_t length = 0;
  std::int64_t axis = 0;
};

/// concat: b appended to a along `axis` (0 or the last).
struct concat_params final : op_params {
  std::int64_t axis = 0;
};

/// cache_write: values written into the cache's rows [offset, offset + rows). `offset` is
/// bindable; the bound against the cache's row count is checked by the kernel.
struct cache_write_params final : op_params {
  double offset = 0;
};

}  // namespace mpakt::ops
