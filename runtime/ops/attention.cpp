#include "runtime/ops/attention_params.hpp"

#include <cmath>

#include "runtime/ops/families.hpp"

namespace mpakt::ops {

double attention_params::score_scale() const { return has_scale ? scale : 1.0 / std::sqrt(double(head_dim)); }

void alibi_slopes(const attention_params& p, float* slopes) {
  const std::int64_t n = p.heads;
  using k = attention_params::alibi_kind;
  switch (p.alibi) {
    case k::none:
      for (std::int64_t h = 0; h < n; ++h) slopes[h] = 0;
      return;
    case k::explicit_slopes:
      for (std::int64_t h = 0; h < n; ++h) slopes[h] = p.alibi_slopes[std::size_t(h)];
      return;
    case k::bloom: {
      // transformers models/bloom _get_alibi_slopes (float32): powers of 2^(-8/p) for the
      // closest power of two p <= heads, then odd powers of 2^(-4/p) for the rest.
      std::int64_t p2 = 1;
      while (p2 * 2 <= n) p2 *= 2;
      const float base = float(std::pow(2.0, -std::pow(2.0, -(std::log2(double(p2)) - 3))));
      for (std::int64_t h = 0; h < p2; ++h) slopes[h] = float(std::pow(double(base), double(h + 1)));
      if (p2 != n) {
        const float extra = float(std::pow(2.0, -std::pow(2.0, -(std::log2(double(2 * p2)) - 3))));
        for (std::int64_t j = 0; p2 + j < n; ++j) slopes[p2 + j] = float(std::pow(double(extra), double(2 * j + 1)));
      }
      return;
    }
    case k::mpt: {
      // transformers models/mpt build_mpt_alibi_tensor (float32): 1 / 2^(i * max / p) for
      // i = 1..p, p the power of two >= heads; for other head counts the odd entries come
      // first, then the even ones, cut to `heads`.
      std::int64_t p2 = 1;
      while (p2 < n) p2 *= 2;
      const float step = float(p.alibi_max / double(p2));
      const auto slope = [&](std::int64_t i) {  // i is 1-based
        return 1.0f / float(std::pow(2.0, double(float(i) * step)));
      };
      std::int64_t h = 0;
      if (p2 == n) {
        for (std::int64_t i = 1; i <= p2; ++i) slopes[h++] = slope(i);
      } else {
        for (std::int64_t i = 2; i <= p2 && h < n; i += 2) slopes[h++] = slope(i);
        for (std::int64_t i = 1; i <= p2 && h < n; i += 2) slopes[h++] = slope(i);
      }
      return;
    }
  }
}

namespace {

constexpr std::int64_t max_dim = std::int64_t(1) << 24;

std::int64_t rows_of(const tensor_desc& d) {
  if (d.shape.empty()) return 1;
  const std::int64_t cols = d.shape.back();
  return cols == 0 ? 0 : shape_numel(d.shape) / cols;
}

/// An optional bindable number: its value (0 when bound) and whether it was given.
status read_optional(const param_map& pm, std::string_view name, double& value, bool& given) {
  if (!pm.has(name)) return ok_status();
  auto v = pm.number(name, 0);
  if (!v) return std::move(v).err();
  value = *v;
  given = true;
  return ok_status();
}

status parse_alibi(const param_map& pm, attention_params& p) {
  using k = attention_params::alibi_kind;
  int given = 0;
  if (pm.boolean("alibi", false)) { p.alibi = k::bloom; ++given; }
  if (pm.has("alibiMax")) {
    auto v = pm.number("alibiMax", 8);
    if (!v) return std::move(v).err();
    p.alibi_max = *v;
    p.alibi = k::mpt;
    ++given;
  }
  if (pm.has("alibiSlopes")) {
    auto v = pm.numbers("alibiSlopes");
    if (!v) return std::move(v).err();
    if (std::int64_t(v->size()) != p.heads)
      return invalid("parameter alibiSlopes has " + std::to_string(v->size()) + " values but heads is " +
                     std::to_string(p.heads));
    for (double s : *v) p.alibi_slopes.push_back(float(s));
    p.alibi = k::explicit_slopes;
    ++given;
  }
  if (given > 1) return invalid("parameter alibi, alibiMax and alibiSlopes are alternatives: give one of them");
  return ok_status();
}

result<std::unique_ptr<op_params>> parse_attention(const param_map& pm) {
  auto p = std::make_unique<attention_params>();
  auto heads = pm.required_integer("heads", 1, max_dim);
  if (!heads) return std::move(heads).err();
  p->heads = *heads;
  auto hd = pm.required_integer("headDim", 1, max_dim);
  if (!hd) return std::move(hd).err();
  p->head_dim = *hd;
  auto kvh = pm.integer("kvHeads", p->heads, 1, max_dim);
  if (!kvh) return std::move(kvh).err();
  p->kv_heads = *kvh;
  if (p->heads % p->kv_heads != 0)
    return invalid("parameter kvHeads must divide heads (heads " + std::to_string(p->heads) + ", kvHeads " +
                   std::to_string(p->kv_heads) + ")");
  auto vhd = pm.integer("vHeadDim", p->head_dim, 1, max_dim);
  if (!vhd) return std::move(vhd).err();
  p->v_head_dim = *vhd;
  p->causal = pm.boolean("causal", true);
  auto offset = pm.number("posOffset", 0);  // bindable, like the four below: check_attention checks them
  if (!offset) return std::move(offset).err();
  p->pos_offset = *offset;
  MPAKT_TRY(read_optional(pm, "scale", p->scale, p->has_scale));
  MPAKT_TRY(read_optional(pm, "softcap", p->softcap, p->has_softcap));
  MPAKT_TRY(read_optional(pm, "window", p->window, p->has_window));
  MPAKT_TRY(parse_alibi(pm, *p));
  return std::unique_ptr<op_params>(std::move(p));
}

result<tensor_desc> infer_attention(const shape_query& q) {
  const auto& p = static_cast<const attention_params&>(q.params);
  const tensor_desc& qd = q.inputs[0];
  const tensor_desc& kd = q.inputs[1];
  const tensor_desc& vd = q.inputs[2];
  const auto width_check = [](const tensor_desc& d, std::string_view name, std::int64_t want, std::string_view what) -> status {
    if (d.shape.empty() || d.shape.back() != want)
      return invalid("input " + std::string(name) + " has shape " + shape_str(d.shape) + " but " + std::string(what) +
                     " is " + std::to_string(want));
    return ok_status();
  };
  MPAKT_TRY(width_check(qd, "q", p.heads * p.head_dim, "heads*headDim"));
  MPAKT_TRY(width_check(kd, "k", p.kv_heads * p.head_dim, "kvHeads*headDim"));
  MPAKT_TRY(width_check(vd, "v", p.kv_heads * p.v_head_dim, "kvHeads*vHeadDim"));
  const std::int64_t t = rows_of(qd), s = rows_of(kd);
  if (rows_of(vd) != s)
    return invalid("input v has shape " + shape_str(vd.shape) + " with " + std::to_string(rows_of(vd)) +
                   " rows but k has " + std::to_string(s));
  if (q.inputs.size() > 3) {
    const tensor_desc& bd = q.inputs[3];
    const bool ok2 = bd.shape == shape_t{t, s};
    const bool ok3 = bd.shape == shape_t{p.heads, t, s};
    if (!ok2 && !ok3)
      return invalid("input bias has shape " + shape_str(bd.shape) + " but must be [T, S] = " + shape_str({t, s}) +
                     " or [heads, T, S] = " + shape_str({p.heads, t, s}));
  }
  shape_t out = qd.shape;
  out.back() = p.heads * p.v_head_dim;
  return tensor_desc{dtype::f32, out};
}

double* bind_attention(op_params& base, std::string_view name) {
  auto& p = static_cast<attention_params&>(base);
  if (name == "posOffset") return &p.pos_offset;
  if (name == "scale") return &p.scale;
  if (name == "softcap") return &p.softcap;
  if (name == "window") return &p.window;
  if (name == "alibiMax") return &p.alibi_max;
  return nullptr;
}

bool is_count(double v) { return std::isfinite(v) && v >= 0 && v == std::floor(v) && v <= 9.0e15; }

status check_attention(const op_params& base) {
  const auto& p = static_cast<const attention_params&>(base);
  if (!is_count(p.pos_offset))
    return invalid("parameter posOffset must be a non-negative integer position, not " + num_str(p.pos_offset));
  if (p.has_scale && !(std::isfinite(p.scale) && p.scale > 0))
    return invalid("parameter scale must be positive, not " + num_str(p.scale));
  if (p.has_softcap && !(std::isfinite(p.softcap) && p.softcap > 0))
    return invalid("parameter softcap must be positive, not " + num_str(p.softcap));
  if (p.has_window && !(is_count(p.window) && p.window >= 1))
    return invalid("parameter window must be a positive integer, not " + num_str(p.window));
  if (p.alibi == attention_params::alibi_kind::mpt && !(std::isfinite(p.alibi_max) && p.alibi_max > 0))
    return invalid("parameter alibiMax must be positive, not " + num_str(p.alibi_max));
  return ok_status();
}

void attention_features(const param_map& pm, std::size_t n_inputs, std::vector<std::string>& out) {
  if (pm.has("window")) out.emplace_back("attention.window");
  if (pm.has("softcap")) out.emplace_back("attention.softcap");
  if (pm.has("scale")) out.emplace_back("attention.scale");
  if (pm.boolean("alibi", false) || pm.has("alibiMax") || pm.has("alibiSlopes")) out.emplace_back("attention.alibi");
  if (n_inputs > 3) out.emplace_back("attention.bias");
}

}  // namespace

void add_attention_ops(std::vector<op_def>& out) {
  op_def d;
  d.name = "attention";
  d.parse = &parse_attention;
  d.infer = &infer_attention;
  d.bindable = &bind_attention;
  d.check = &check_attention;
  d.features = &attention_features;
  d.half_inputs = (1u << 1) | (1u << 2);  // k and v: KV caches stored as bf16/f16
  out.push_back(d);
}

}  // namespace mpakt::ops
