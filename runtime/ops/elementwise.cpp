/// Elementwise ops: binary arithmetic with broadcasting (add, sub, mul), scaling, the
/// activations, and the gated feed-forward pairs (swiglu, geglu). Every output has the
/// shape of the first input and is f32. Kernels: backends/cpu/ref/elementwise.cpp.

#include "runtime/ops/elementwise_params.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/ops/families.hpp"

namespace mpakt::ops {

namespace {

result<tensor_desc> infer_unary(const shape_query& q) {
  return tensor_desc{dtype::f32, q.inputs[0].shape};
}

/// add / sub / mul: b is shaped like a, a single row as wide as a's last dimension ([C], or
/// [1, C] and the like: every leading dimension 1), or one value ([1], [], [1, 1], ...).
/// b never has more dimensions than a, so the output keeps a's shape.
result<tensor_desc> infer_binary(const shape_query& q) {
  const shape_t& a = q.inputs[0].shape;
  const shape_t& b = q.inputs[1].shape;
  bool leading_ones = true;
  for (std::size_t i = 0; i + 1 < b.size(); ++i) leading_ones = leading_ones && b[i] == 1;
  const bool fits = b.size() <= std::max<std::size_t>(a.size(), 1);
  const bool same = a == b;
  const bool row = fits && leading_ones && !a.empty() && b.size() >= 1 && b.back() == a.back();
  const bool single = fits && leading_ones && (b.empty() || b.back() == 1);
  if (!same && !row && !single) {
    const std::string width = a.empty() ? "1" : std::to_string(a.back());
    return invalid("input b has shape " + shape_str(b) + " but a has shape " + shape_str(a) +
                   "; b must have a's shape, be a single row [" + width + "], or hold a single value ([1] or [])");
  }
  return tensor_desc{dtype::f32, a};
}

/// swiglu / geglu: up has exactly the shape of gate.
result<tensor_desc> infer_gated(const shape_query& q) {
  const shape_t& gate = q.inputs[0].shape;
  const shape_t& up = q.inputs[1].shape;
  if (gate != up)
    return invalid("input up has shape " + shape_str(up) + " but gate has shape " + shape_str(gate) +
                   "; they must be the same");
  return tensor_desc{dtype::f32, gate};
}

// ---- scale ----

result<std::unique_ptr<op_params>> parse_scale(const param_map& pm) {
  auto p = std::make_unique<scale_params>();
  auto f = pm.required_number("factor");
  if (!f) return std::move(f).err();
  p->factor = *f;
  return std::unique_ptr<op_params>(std::move(p));
}

double* bind_scale(op_params& p, std::string_view name) {
  return name == "factor" ? &static_cast<scale_params&>(p).factor : nullptr;
}

status check_scale(const op_params& p) {
  const double f = static_cast<const scale_params&>(p).factor;
  if (!std::isfinite(f)) return invalid("parameter factor must be a finite number, not " + num_str(f));
  return ok_status();
}

// ---- softcap ----

result<std::unique_ptr<op_params>> parse_softcap(const param_map& pm) {
  auto p = std::make_unique<softcap_params>();
  auto c = pm.required_number("cap");
  if (!c) return std::move(c).err();
  p->cap = *c;
  return std::unique_ptr<op_params>(std::move(p));
}

double* bind_softcap(op_params& p, std::string_view name) {
  return name == "cap" ? &static_cast<softcap_params&>(p).cap : nullptr;
}

status check_softcap(const op_params& p) {
  const double c = static_cast<const softcap_params&>(p).cap;
  if (!std::isfinite(c) || c <= 0) return invalid("parameter cap must be a positive finite number, not " + num_str(c));
  return ok_status();
}

op_def simple(std::string_view name, result<tensor_desc> (*infer)(const shape_query&)) {
  op_def d;
  d.name = name;
  d.parse = parse_no_params;
  d.infer = infer;
  d.features = no_features;
  return d;
}

}  // namespace

void add_elementwise_ops(std::vector<op_def>& out) {
  for (std::string_view n : {"add", "sub", "mul"}) out.push_back(simple(n, infer_binary));
  for (std::string_view n : {"relu", "silu", "tanh", "sigmoid", "gelu", "gelu_exact", "gelu_quick"})
    out.push_back(simple(n, infer_unary));
  for (std::string_view n : {"swiglu", "geglu"}) out.push_back(simple(n, infer_gated));

  op_def scale = simple("scale", infer_unary);
  scale.parse = parse_scale;
  scale.bindable = bind_scale;
  scale.check = check_scale;
  out.push_back(scale);

  op_def softcap = simple("softcap", infer_unary);
  softcap.parse = parse_softcap;
  softcap.bindable = bind_softcap;
  softcap.check = check_softcap;
  out.push_back(softcap);
}

}  // namespace mpakt::ops
