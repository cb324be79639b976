#pragma once
/// Typed parameters of matmul and linear (runtime/ops/matmul.cpp), shared with the
/// reference kernels and the fast CPU kernels. embedding takes no parameters.

#include "runtime/op.hpp"

namespace mpakt::ops {

/// matmul / linear: `trans_b` reads b (or w) as [N, K], the stored [out, in] layout.
struct matmul_params final : op_params {
  bool trans_b = false;
};

}  // namespace mpakt::ops
