/// Reductions: argmax and reduce_max over the last axis (one value per row), reduce_sum and
/// reduce_mean over every element. None takes parameters; every output is f32.
/// Kernels: backends/cpu/ref/reduce.cpp.

#include "runtime/ops/families.hpp"

namespace mpakt::ops {

namespace {

/// x [..., N] -> [...], or [1] when x is one-dimensional. N must not be 0.
result<tensor_desc> infer_last_axis(const shape_query& q) {
  const shape_t& x = q.inputs[0].shape;
  if (x.empty()) return invalid("input x must have at least one dimension");
  if (x.back() == 0) return invalid("input x has shape " + shape_str(x) + ", an empty last axis with no value to pick");
  if (x.size() == 1) return tensor_desc{dtype::f32, {1}};
  return tensor_desc{dtype::f32, shape_t(x.begin(), x.end() - 1)};
}

result<tensor_desc> infer_total(const shape_query&) { return tensor_desc{dtype::f32, {1}}; }

op_def make(std::string_view name, result<tensor_desc> (*infer)(const shape_query&)) {
  op_def d;
  d.name = name;
  d.parse = parse_no_params;
  d.infer = infer;
  d.features = no_features;
  return d;
}

}  // namespace

void add_reduce_ops(std::vector<op_def>& out) {
  out.push_back(make("argmax", infer_last_axis));
  out.push_back(make("reduce_max", infer_last_axis));
  out.push_back(make("reduce_sum", infer_total));
  out.push_back(make("reduce_mean", infer_total));
}

}  // namespace mpakt::ops
