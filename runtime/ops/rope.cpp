#include "runtime/ops/rope_params.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <tuple>
#include <utility>

#include "runtime/ops/families.hpp"

namespace mpakt::ops {

namespace {

constexpr std::int64_t max_dim = std::int64_t(1) << 24;
/// Positions beyond 2^32 are refused: float32 angles (as transformers computes them) are meaningless there.
constexpr double max_position = 4294967296.0;

// ---- reading the scaling object ----

/// A number field of the scaling object; absent or null reads as nullopt (Python's .get()).
result<std::optional<double>> scaling_number(const param_value& obj, std::string_view key) {
  const param_value* v = obj.field(key);
  if (!v || v->k == param_value::kind::null) return std::optional<double>{};
  if (!v->is_number() || !std::isfinite(v->num))
    return invalid("parameter scaling." + std::string(key) + " must be a finite number");
  return std::optional<double>{v->num};
}

/// A required positive number field.
result<double> scaling_positive(const param_value& obj, std::string_view key, std::string_view type) {
  auto v = scaling_number(obj, key);
  if (!v) return std::move(v).err();
  if (!*v) return invalid("parameter scaling needs " + std::string(key) + " for rope_type " + std::string(type));
  if (**v <= 0) return invalid("parameter scaling." + std::string(key) + " must be positive, not " + num_str(**v));
  return **v;
}

/// An optional positive number field.
result<std::optional<double>> scaling_optional_positive(const param_value& obj, std::string_view key) {
  auto v = scaling_number(obj, key);
  if (!v) return std::move(v).err();
  if (*v && **v <= 0) return invalid("parameter scaling." + std::string(key) + " must be positive, not " + num_str(**v));
  return *v;
}

/// original_max_position_embeddings, falling back to max_position_embeddings as transformers'
/// standardize_rope_params does (there from the config, here from the object).
result<double> scaling_original_max(const param_value& obj, std::string_view type) {
  auto orig = scaling_optional_positive(obj, "original_max_position_embeddings");
  if (!orig) return std::move(orig).err();
  if (*orig) return **orig;
  auto max = scaling_optional_positive(obj, "max_position_embeddings");
  if (!max) return std::move(max).err();
  if (*max) return **max;
  return invalid("parameter scaling needs original_max_position_embeddings for rope_type " + std::string(type));
}

/// short_factor / long_factor: rotaryDim/2 numbers.
result<std::vector<float>> scaling_factors(const param_value& obj, std::string_view key, std::int64_t half) {
  const param_value* v = obj.field(key);
  if (!v || v->k == param_value::kind::null)
    return invalid("parameter scaling needs " + std::string(key) + " for rope_type longrope");
  if (v->k != param_value::kind::array)
    return invalid("parameter scaling." + std::string(key) + " must be an array of numbers");
  if (std::int64_t(v->items.size()) != half)
    return invalid("parameter scaling." + std::string(key) + " has " + std::to_string(v->items.size()) +
                   " values but rotaryDim/2 is " + std::to_string(half));
  std::vector<float> out;
  for (std::size_t i = 0; i < v->items.size(); ++i) {
    const auto& it = v->items[i];
    if (!it.is_number() || !std::isfinite(it.num) || it.num <= 0)
      return invalid("parameter scaling." + std::string(key) + "[" + std::to_string(i) + "] must be a positive number");
    out.push_back(float(it.num));  // transformers: torch.tensor(list, dtype=float32)
  }
  return out;
}

/// rope_type (or the older "type"), mapped to a kind.
result<rope_scaling::kind> scaling_kind(const param_value& obj) {
  const param_value* t = obj.field("rope_type");
  if (!t || t->k == param_value::kind::null) t = obj.field("type");
  if (!t || t->k == param_value::kind::null) return rope_scaling::kind::none;
  if (t->k != param_value::kind::string) return invalid("parameter scaling.rope_type must be a string");
  using k = rope_scaling::kind;
  if (t->str == "default") return k::none;
  if (t->str == "linear") return k::linear;
  if (t->str == "dynamic") return k::dynamic;
  if (t->str == "yarn") return k::yarn;
  if (t->str == "longrope") return k::longrope;
  if (t->str == "llama3") return k::llama3;
  return invalid("parameter scaling has rope_type \"" + t->str +
                 "\", not one of default, linear, dynamic, yarn, longrope, llama3");
}

status parse_yarn(const param_value& obj, rope_scaling& s) {
  auto orig = scaling_original_max(obj, "yarn");
  if (!orig) return std::move(orig).err();
  s.original_max = *orig;
  auto factor = scaling_optional_positive(obj, "factor");
  if (!factor) return std::move(factor).err();
  auto max = scaling_optional_positive(obj, "max_position_embeddings");
  if (!max) return std::move(max).err();
  if (*factor) {
    s.factor = **factor;
  } else if (*max) {  // transformers: factor = max_position_embeddings / original_max_position_embeddings
    s.factor = **max / s.original_max;
  } else {
    return invalid("parameter scaling needs factor for rope_type yarn");
  }
  // beta_fast / beta_slow: `get(...) or default`, so 0 and null both mean the default.
  for (auto [key, field, fallback] : {std::tuple{"beta_fast", &s.beta_fast, 32.0}, std::tuple{"beta_slow", &s.beta_slow, 1.0}}) {
    auto v = scaling_number(obj, key);
    if (!v) return std::move(v).err();
    *field = (*v && **v != 0) ? **v : fallback;
  }
  for (auto [key, field] : {std::pair{"mscale", &s.mscale}, std::pair{"mscale_all_dim", &s.mscale_all_dim}}) {
    auto v = scaling_number(obj, key);
    if (!v) return std::move(v).err();
    *field = v->value_or(0);
  }
  auto af = scaling_optional_positive(obj, "attention_factor");
  if (!af) return std::move(af).err();
  if (*af) { s.attention_factor = **af; s.has_attention_factor = true; }
  if (const param_value* tr = obj.field("truncate"); tr && tr->k != param_value::kind::null) {
    if (tr->k != param_value::kind::boolean) return invalid("parameter scaling.truncate must be a boolean");
    s.truncate = tr->flag;
  }
  return ok_status();
}

status parse_longrope(const param_value& obj, std::int64_t half, rope_scaling& s) {
  auto orig = scaling_original_max(obj, "longrope");
  if (!orig) return std::move(orig).err();
  s.original_max = *orig;
  auto sf = scaling_factors(obj, "short_factor", half);
  if (!sf) return std::move(sf).err();
  s.short_factor = std::move(*sf);
  auto lf = scaling_factors(obj, "long_factor", half);
  if (!lf) return std::move(lf).err();
  s.long_factor = std::move(*lf);
  auto factor = scaling_optional_positive(obj, "factor");
  if (!factor) return std::move(factor).err();
  if (*factor) { s.factor = **factor; s.has_factor = true; }
  auto max = scaling_optional_positive(obj, "max_position_embeddings");
  if (!max) return std::move(max).err();
  if (*max) { s.max_positions = **max; s.has_max_positions = true; }
  auto af = scaling_optional_positive(obj, "attention_factor");
  if (!af) return std::move(af).err();
  if (*af) { s.attention_factor = **af; s.has_attention_factor = true; }
  if (!s.has_attention_factor && !s.has_factor && !s.has_max_positions)
    return invalid("parameter scaling needs max_position_embeddings for rope_type longrope unless attention_factor is given");
  return ok_status();
}

status parse_llama3(const param_value& obj, rope_scaling& s) {
  auto orig = scaling_original_max(obj, "llama3");
  if (!orig) return std::move(orig).err();
  s.original_max = *orig;
  auto factor = scaling_positive(obj, "factor", "llama3");
  if (!factor) return std::move(factor).err();
  s.factor = *factor;
  auto lo = scaling_positive(obj, "low_freq_factor", "llama3");
  if (!lo) return std::move(lo).err();
  auto hi = scaling_positive(obj, "high_freq_factor", "llama3");
  if (!hi) return std::move(hi).err();
  if (*hi <= *lo)
    return invalid("parameter scaling.high_freq_factor must exceed low_freq_factor (high " + num_str(*hi) +
                   ", low " + num_str(*lo) + ")");
  s.low_freq_factor = *lo;
  s.high_freq_factor = *hi;
  return ok_status();
}

/// Reads the scaling object; `p.rotary_dim` must already be resolved.
status parse_scaling(const param_value& obj, rope_params& p) {
  if (obj.k != param_value::kind::object) return invalid("parameter scaling must be an object");
  rope_scaling& s = p.scaling;
  auto kind = scaling_kind(obj);
  if (!kind) return std::move(kind).err();
  s.type = *kind;
  auto theta = scaling_optional_positive(obj, "rope_theta");
  if (!theta) return std::move(theta).err();
  if (*theta) { s.theta = **theta; s.has_theta = true; }
  using k = rope_scaling::kind;
  switch (s.type) {
    case k::none: return ok_status();
    case k::linear: {
      auto f = scaling_positive(obj, "factor", "linear");
      if (!f) return std::move(f).err();
      s.factor = *f;
      return ok_status();
    }
    case k::dynamic: {
      auto f = scaling_positive(obj, "factor", "dynamic");
      if (!f) return std::move(f).err();
      s.factor = *f;
      auto max = scaling_optional_positive(obj, "max_position_embeddings");
      if (!max) return std::move(max).err();
      if (!*max) {
        max = scaling_optional_positive(obj, "original_max_position_embeddings");
        if (!max) return std::move(max).err();
      }
      if (!*max) return invalid("parameter scaling needs max_position_embeddings for rope_type dynamic");
      s.max_positions = **max;
      s.has_max_positions = true;
      if (p.rotary_dim <= 2) return invalid("parameter rotaryDim must exceed 2 for rope_type dynamic");
      return ok_status();
    }
    case k::yarn: return parse_yarn(obj, s);
    case k::longrope: return parse_longrope(obj, p.rotary_dim / 2, s);
    case k::llama3: return parse_llama3(obj, s);
  }
  return ok_status();
}

/// rotaryDim: the parameter, else the object's partial_rotary_factor, else headDim.
result<std::int64_t> resolve_rotary_dim(const param_map& pm, std::int64_t head_dim) {
  std::optional<std::int64_t> from_factor;
  if (const param_value* sc = pm.find("scaling"); sc && sc->k == param_value::kind::object) {
    const param_value* prf = sc->field("partial_rotary_factor");
    if (prf && prf->k != param_value::kind::null) {
      if (!prf->is_number() || !(prf->num > 0 && prf->num <= 1))
        return invalid("parameter scaling.partial_rotary_factor must be in (0, 1]");
      from_factor = std::int64_t(double(head_dim) * prf->num);  // transformers: int(head_dim * factor)
    }
  }
  auto rd = pm.integer("rotaryDim", from_factor.value_or(head_dim), 1, max_dim);
  if (!rd) return std::move(rd).err();
  if (from_factor && pm.has("rotaryDim") && *rd != *from_factor)
    return invalid("parameter rotaryDim is " + std::to_string(*rd) + " but scaling.partial_rotary_factor gives " +
                   std::to_string(*from_factor));
  if (*rd > head_dim)
    return invalid("parameter rotaryDim must not exceed headDim (rotaryDim " + std::to_string(*rd) + ", headDim " +
                   std::to_string(head_dim) + ")");
  if (*rd % 2 != 0 || *rd < 2) {
    if (pm.has("rotaryDim")) return invalid("parameter rotaryDim must be even, not " + std::to_string(*rd));
    if (from_factor)
      return invalid("parameter scaling.partial_rotary_factor gives a rotary width of " + std::to_string(*rd) +
                     ", which is not a positive even number");
    return invalid("parameter headDim must be even when rotaryDim is omitted, not " + std::to_string(head_dim));
  }
  return *rd;
}

result<std::unique_ptr<op_params>> parse_rope(const param_map& pm) {
  auto p = std::make_unique<rope_params>();
  auto hd = pm.required_integer("headDim", 1, max_dim);
  if (!hd) return std::move(hd).err();
  p->head_dim = *hd;
  auto rd = resolve_rotary_dim(pm, p->head_dim);
  if (!rd) return std::move(rd).err();
  p->rotary_dim = *rd;
  p->interleaved = pm.boolean("interleaved", false);
  // Bindable numbers: their ranges are checked by check_rope once their values are known.
  for (auto [name, field] : {std::pair{"offset", &p->offset}, std::pair{"base", &p->base}}) {
    auto v = pm.number(name, *field);
    if (!v) return std::move(v).err();
    *field = *v;
  }
  if (pm.has("attentionFactor")) {
    auto v = pm.number("attentionFactor", 1);
    if (!v) return std::move(v).err();
    p->attention_factor = *v;
    p->has_attention_factor = true;
  }
  if (const param_value* sc = pm.find("scaling")) MPAKT_TRY(parse_scaling(*sc, *p));
  if (pm.has("invFreq")) {
    if (p->scaling.type != rope_scaling::kind::none)
      return invalid("parameter invFreq cannot be combined with a scaling rope_type");
    auto inv = pm.numbers("invFreq");
    if (!inv) return std::move(inv).err();
    if (std::int64_t(inv->size()) != p->rotary_dim / 2)
      return invalid("parameter invFreq has " + std::to_string(inv->size()) + " values but rotaryDim/2 is " +
                     std::to_string(p->rotary_dim / 2));
    for (double f : *inv) p->inv_freq.push_back(float(f));
  }
  return std::unique_ptr<op_params>(std::move(p));
}

result<tensor_desc> infer_rope(const shape_query& q) {
  const auto& p = static_cast<const rope_params&>(q.params);
  const tensor_desc& x = q.inputs[0];
  if (x.shape.empty()) return invalid("input x is a scalar but rope needs [T, heads*headDim]");
  const std::int64_t width = x.shape.back();
  if (width <= 0 || width % p.head_dim != 0)
    return invalid("input x has shape " + shape_str(x.shape) + " but its width is not a positive multiple of headDim " +
                   std::to_string(p.head_dim));
  return tensor_desc{dtype::f32, x.shape};
}

double* bind_rope(op_params& base, std::string_view name) {
  auto& p = static_cast<rope_params&>(base);
  if (name == "offset") return &p.offset;
  if (name == "base") return &p.base;
  if (name == "attentionFactor") return &p.attention_factor;
  return nullptr;
}

status check_rope(const op_params& base) {
  const auto& p = static_cast<const rope_params&>(base);
  if (!std::isfinite(p.offset) || p.offset < 0 || p.offset != std::floor(p.offset) || p.offset > max_position)
    return invalid("parameter offset must be a non-negative integer position, not " + num_str(p.offset));
  if (!std::isfinite(p.base) || p.base <= 0) return invalid("parameter base must be positive, not " + num_str(p.base));
  if (p.has_attention_factor && (!std::isfinite(p.attention_factor) || p.attention_factor <= 0))
    return invalid("parameter attentionFactor must be positive, not " + num_str(p.attention_factor));
  return ok_status();
}

void rope_features(const param_map& pm, std::size_t, std::vector<std::string>& out) {
  if (pm.has("rotaryDim")) out.emplace_back("rope.rotaryDim");
  if (pm.boolean("interleaved", false)) out.emplace_back("rope.interleaved");
  if (pm.has("scaling") || pm.has("invFreq") || pm.has("attentionFactor")) out.emplace_back("rope.scaling");
}

// ---- frequencies, in float32 as transformers computes them ----

/// float32 pow (torch computes `base ** tensor` in the tensor's dtype).
float pow_f32(float b, float e) { return float(std::pow(double(b), double(e))); }

/// 1 / base^(2i/dim): transformers' default inv_freq (`torch.arange(0, dim, 2).float() / dim`).
void default_inv_freq(float base, std::int64_t dim, float* inv) {
  for (std::int64_t i = 0; i < dim / 2; ++i) inv[i] = 1.0f / pow_f32(base, float(2 * i) / float(dim));
}

/// _compute_llama3_parameters: wavelength-dependent smoothing between inv_freq and inv_freq/factor.
void llama3_inv_freq(const rope_scaling& s, float* inv, std::int64_t half) {
  const float factor = float(s.factor);
  const double low_wavelen = s.original_max / s.low_freq_factor;
  const double high_wavelen = s.original_max / s.high_freq_factor;
  for (std::int64_t i = 0; i < half; ++i) {
    const float wavelen = float(2 * std::numbers::pi) / inv[i];
    float f = wavelen > float(low_wavelen) ? inv[i] / factor : inv[i];
    const bool medium = !(wavelen < float(high_wavelen)) && !(wavelen > float(low_wavelen));
    if (medium) {
      const float smooth = (float(s.original_max) / wavelen - float(s.low_freq_factor)) /
                           float(s.high_freq_factor - s.low_freq_factor);
      f = (1.0f - smooth) * f / factor + smooth * f;
    }
    inv[i] = f;
  }
}

/// get_mscale inside _compute_yarn_parameters.
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

/// _compute_yarn_parameters: blends interpolated and extrapolated frequencies along a ramp.
double yarn_inv_freq(const rope_scaling& s, float base, double base_d, std::int64_t dim, float* inv) {
  const auto correction_dim = [&](double rotations) {
    return (double(dim) * std::log(s.original_max / (rotations * 2 * std::numbers::pi))) / (2 * std::log(base_d));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) { low = std::floor(low); high = std::ceil(high); }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // prevent a singular ramp
  const float factor = float(s.factor);
  for (std::int64_t i = 0; i < dim / 2; ++i) {
    const float pos_freq = pow_f32(base, float(2 * i) / float(dim));
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp((float(i) - float(low)) / float(high - low), 0.0f, 1.0f);
    const float extra_factor = 1.0f - ramp;
    inv[i] = interpolation * (1.0f - extra_factor) + extrapolation * extra_factor;
  }
  if (s.has_attention_factor) return s.attention_factor;
  if (s.mscale != 0 && s.mscale_all_dim != 0) return yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  return yarn_mscale(s.factor, 1);
}

/// _compute_longrope_parameters plus longrope_frequency_update: long factors past the
/// original context, short factors within it.
double longrope_inv_freq(const rope_scaling& s, float base, std::int64_t dim, std::int64_t seq_len, float* inv) {
  const auto& ext = double(seq_len) > s.original_max ? s.long_factor : s.short_factor;
  for (std::int64_t i = 0; i < dim / 2; ++i) inv[i] = 1.0f / (ext[std::size_t(i)] * pow_f32(base, float(2 * i) / float(dim)));
  if (s.has_attention_factor) return s.attention_factor;
  const double factor = s.has_factor ? s.factor : s.max_positions / s.original_max;
  return factor <= 1 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(s.original_max));
}

/// _compute_dynamic_ntk_parameters as dynamic_frequency_update calls it (float32 tensors):
/// past max_position_embeddings the base grows with the sequence length.
float dynamic_base(const rope_scaling& s, float base, std::int64_t dim, std::int64_t seq_len) {
  if (double(seq_len) <= s.max_positions) return base;
  const float grown = float(s.factor) * float(seq_len) / float(s.max_positions) - float(s.factor - 1);
  return float(double(base) * double(pow_f32(grown, float(double(dim) / double(dim - 2)))));
}

}  // namespace

double rope_frequencies(const rope_params& p, std::int64_t seq_len, float* inv) {
  const std::int64_t dim = p.rotary_dim, half = dim / 2;
  const rope_scaling& s = p.scaling;
  const double theta = s.has_theta ? s.theta : p.base;
  const float base = float(theta);
  double factor = 1;
  using k = rope_scaling::kind;
  if (!p.inv_freq.empty()) {
    std::copy(p.inv_freq.begin(), p.inv_freq.end(), inv);
  } else {
    switch (s.type) {
      case k::none: default_inv_freq(base, dim, inv); break;
      case k::linear:
        default_inv_freq(base, dim, inv);
        for (std::int64_t i = 0; i < half; ++i) inv[i] /= float(s.factor);
        break;
      case k::dynamic: default_inv_freq(dynamic_base(s, base, dim, seq_len), dim, inv); break;
      case k::yarn: factor = yarn_inv_freq(s, base, theta, dim, inv); break;
      case k::longrope: factor = longrope_inv_freq(s, base, dim, seq_len, inv); break;
      case k::llama3:
        default_inv_freq(base, dim, inv);
        llama3_inv_freq(s, inv, half);
        break;
    }
  }
  return p.has_attention_factor ? p.attention_factor : factor;
}

void add_rope_ops(std::vector<op_def>& out) {
  op_def d;
  d.name = "rope";
  d.parse = &parse_rope;
  d.infer = &infer_rope;
  d.bindable = &bind_rope;
  d.check = &check_rope;
  d.features = &rope_features;
  out.push_back(d);
}

}  // namespace mpakt::ops
