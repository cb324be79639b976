#pragma once
/// Typed parameters of the normalisation ops (runtime/ops/norm.cpp), shared with their
/// kernels. softmax and causal_mask take no parameters (no_params).

#include <cstdint>

#include "runtime/op.hpp"

namespace mpakt::ops {

/// rmsnorm: y = x / sqrt(mean(x^2) + eps) * (gamma + weight_offset), the mean taken over
/// each run of `group_size` channels (0 = the whole last dimension).
/// `eps` and `weight_offset` are bindable; `group_size` shapes gamma and is not.
struct rmsnorm_params final : op_params {
  double eps = 1e-6;
  double weight_offset = 0;
  std::int64_t group_size = 0;  ///< 0: not given, normalise the whole row
};

/// layernorm: y = (x - mean) / sqrt(var + eps) * gamma + beta. `eps` is bindable.
struct layernorm_params final : op_params {
  double eps = 1e-5;
};

}  // namespace mpakt::ops
