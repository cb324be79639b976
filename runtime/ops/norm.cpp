/// Normalisation ops: rmsnorm, layernorm, softmax and causal_mask. Each output has the
/// shape of x and is f32. Kernels: backends/cpu/ref/norm.cpp.

#include "runtime/ops/norm_params.hpp"

#include <cmath>

#include "runtime/ops/families.hpp"

namespace mpakt::ops {

namespace {

/// eps must be a finite, non-negative number (bound values arrive unchecked).
status check_eps(double eps) {
  if (!std::isfinite(eps) || eps < 0) return invalid("parameter eps must be a finite number >= 0, not " + num_str(eps));
  return ok_status();
}

/// A per-channel vector (gamma, beta) must be exactly [width].
status check_channel_vector(const tensor_desc& v, std::string_view name, std::int64_t width, std::string_view why) {
  if (v.shape.size() != 1 || v.shape[0] != width)
    return invalid("input " + std::string(name) + " has shape " + shape_str(v.shape) + " but must be [" +
                   std::to_string(width) + "] (" + std::string(why) + ")");
  return ok_status();
}

// ---- rmsnorm ----

result<std::unique_ptr<op_params>> parse_rmsnorm(const param_map& pm) {
  auto p = std::make_unique<rmsnorm_params>();
  auto eps = pm.number("eps", 1e-6);
  if (!eps) return std::move(eps).err();
  auto off = pm.number("weightOffset", 0);
  if (!off) return std::move(off).err();
  auto group = pm.integer("groupSize", 0, 1, std::int64_t(1) << 40);
  if (!group) return std::move(group).err();
  p->eps = *eps;
  p->weight_offset = *off;
  p->group_size = *group;
  return std::unique_ptr<op_params>(std::move(p));
}

result<tensor_desc> infer_rmsnorm(const shape_query& q) {
  const auto& p = static_cast<const rmsnorm_params&>(q.params);
  const shape_t& x = q.inputs[0].shape;
  if (x.empty()) return invalid("input x must have at least one dimension");
  const std::int64_t c = x.back();
  if (p.group_size > 0) {
    if (c % p.group_size != 0)
      return invalid("input x has " + std::to_string(c) + " channels, which is not a multiple of groupSize " +
                     std::to_string(p.group_size));
    MPAKT_TRY(check_channel_vector(q.inputs[1], "gamma", p.group_size, "groupSize"));
  } else {
    MPAKT_TRY(check_channel_vector(q.inputs[1], "gamma", c, "the last dimension of x"));
  }
  return tensor_desc{dtype::f32, x};
}

double* bind_rmsnorm(op_params& p, std::string_view name) {
  auto& r = static_cast<rmsnorm_params&>(p);
  if (name == "eps") return &r.eps;
  if (name == "weightOffset") return &r.weight_offset;
  return nullptr;
}

status check_rmsnorm(const op_params& p) {
  const auto& r = static_cast<const rmsnorm_params&>(p);
  MPAKT_TRY(check_eps(r.eps));
  if (!std::isfinite(r.weight_offset))
    return invalid("parameter weightOffset must be a finite number, not " + num_str(r.weight_offset));
  return ok_status();
}

void features_rmsnorm(const param_map& pm, std::size_t, std::vector<std::string>& out) {
  if (pm.has("groupSize")) out.push_back("rmsnorm.groupSize");
  if (pm.has("weightOffset")) out.push_back("rmsnorm.weightOffset");
}

// ---- layernorm ----

result<std::unique_ptr<op_params>> parse_layernorm(const param_map& pm) {
  auto p = std::make_unique<layernorm_params>();
  auto eps = pm.number("eps", 1e-5);
  if (!eps) return std::move(eps).err();
  p->eps = *eps;
  return std::unique_ptr<op_params>(std::move(p));
}

result<tensor_desc> infer_layernorm(const shape_query& q) {
  const shape_t& x = q.inputs[0].shape;
  if (x.empty()) return invalid("input x must have at least one dimension");
  MPAKT_TRY(check_channel_vector(q.inputs[1], "gamma", x.back(), "the last dimension of x"));
  MPAKT_TRY(check_channel_vector(q.inputs[2], "beta", x.back(), "the last dimension of x"));
  return tensor_desc{dtype::f32, x};
}

double* bind_layernorm(op_params& p, std::string_view name) {
  return name == "eps" ? &static_cast<layernorm_params&>(p).eps : nullptr;
}

status check_layernorm(const op_params& p) { return check_eps(static_cast<const layernorm_params&>(p).eps); }

void features_layernorm(const param_map& pm, std::size_t, std::vector<std::string>& out) {
  // A bound eps (or anything but the literal default) needs the feature.
  const param_value* eps = pm.find("eps");
  if (eps && !(eps->is_number() && eps->num == 1e-5)) out.push_back("layernorm.eps");
}

// ---- softmax, causal_mask ----

result<tensor_desc> infer_softmax(const shape_query& q) {
  return tensor_desc{dtype::f32, q.inputs[0].shape};
}

result<tensor_desc> infer_causal_mask(const shape_query& q) {
  const shape_t& a = q.inputs[0].shape;
  if (a.size() < 2 || a[a.size() - 1] != a[a.size() - 2])
    return invalid("input a has shape " + shape_str(a) + " but its last two dimensions must form square blocks [..., n, n]");
  return tensor_desc{dtype::f32, a};
}

}  // namespace

void add_norm_ops(std::vector<op_def>& out) {
  op_def rms;
  rms.name = "rmsnorm";
  rms.parse = parse_rmsnorm;
  rms.infer = infer_rmsnorm;
  rms.bindable = bind_rmsnorm;
  rms.check = check_rmsnorm;
  rms.features = features_rmsnorm;
  out.push_back(rms);

  op_def ln;
  ln.name = "layernorm";
  ln.parse = parse_layernorm;
  ln.infer = infer_layernorm;
  ln.bindable = bind_layernorm;
  ln.check = check_layernorm;
  ln.features = features_layernorm;
  out.push_back(ln);

  op_def sm;
  sm.name = "softmax";
  sm.parse = parse_no_params;
  sm.infer = infer_softmax;
  sm.features = no_features;
  out.push_back(sm);

  op_def cm;
  cm.name = "causal_mask";
  cm.parse = parse_no_params;
  cm.infer = infer_causal_mask;
  cm.features = no_features;
  out.push_back(cm);
}

}  // namespace mpakt::ops
