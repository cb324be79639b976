#pragma once
/// Typed parameters of the elementwise ops (runtime/ops/elementwise.cpp), shared with their
/// kernels. Ops without parameters (add, relu, swiglu, ...) use no_params.

#include "runtime/op.hpp"

namespace mpakt::ops {

/// scale: out = a * factor. `factor` is bindable.
struct scale_params final : op_params {
  double factor = 1;
};

/// softcap: out = cap * tanh(x / cap). `cap` is bindable; check() requires cap > 0.
struct softcap_params final : op_params {
  double cap = 1;
};

}  // namespace mpakt::ops
