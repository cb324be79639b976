// config.json → arch_config: the generic part (dimensions, rope objects, refusals common to
// every family) and the entry point. The per-family mappings are in arch_families.cpp; the
// behaviour reproduced is transformers 5's, as recorded in test/fixtures/arch/FAMILY_NOTES.md.

#include "runtime/models/arch.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "runtime/models/arch_config_reader.hpp"
#include "runtime/json.hpp"

namespace mpakt::models {

namespace arch_detail {

namespace {

/// The rope object: rope_parameters (transformers 5), else the older rope_scaling.
config_reader rope_object(const config_reader& r) {
  if (r.has("rope_parameters")) return r.object("rope_parameters");
  return r.object("rope_scaling");
}

/// Writes the rope op's `scaling` object: the fields of `obj` transformers reads for the
/// type, with original_max_position_embeddings and max_position_embeddings filled in the
/// way transformers' standardize_rope_params does.
std::string scaling_json(const config_reader& top, const config_reader& obj, const std::string& type) {
  rapidjson::StringBuffer b;
  rapidjson::Writer<rapidjson::StringBuffer> w(b);
  w.StartObject();
  w.Key("rope_type");
  w.String(type.c_str());
  auto copy = [&](const char* key) {
    if (!obj.has(key)) return;
    w.Key(key);
    obj.value()[key].Accept(w);
  };
  for (const char* key : {"factor", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "mscale",
                          "mscale_all_dim", "attention_factor", "truncate", "short_factor", "long_factor"})
    copy(key);
  if (type != "linear") {
    // The top-level field wins (Phi-3 keeps one), then the object's, then max_position_embeddings.
    std::optional<double> orig = top.number("original_max_position_embeddings");
    if (!orig) orig = obj.number("original_max_position_embeddings");
    if (!orig) orig = top.number("max_position_embeddings");
    if (orig) { w.Key("original_max_position_embeddings"); w.Double(*orig); }
    if (auto max = top.number("max_position_embeddings")) { w.Key("max_position_embeddings"); w.Double(*max); }
  }
  w.EndObject();
  return std::string(b.GetString(), b.GetSize());
}

/// Rope settings from one rope object. `width` is the roped head width (head_dim, or the
/// rope part of an MLA head).
result<arch_rope> rope_from(const config_reader& top, const config_reader& obj, const arch_config& c,
                            const rope_defaults& d, int width) {
  arch_rope rope;
  rope.interleaved = d.interleaved;
  rope.theta = obj.number("rope_theta", top.number("rope_theta", d.theta));
  auto type = obj.text("rope_type", "");
  if (!type) return std::move(type).err();
  if (type->empty()) {
    auto legacy = obj.text("type", "default");
    if (!legacy) return std::move(legacy).err();
    type = *legacy;
  }
  if (c.family == "phi3" && (*type == "su" || *type == "yarn")) type = std::string("longrope");  // Phi3Config renames them
  if (*type != "default" && *type != "linear" && *type != "dynamic" && *type != "llama3" && *type != "yarn" &&
      *type != "longrope")
    return invalid("config.json rope_scaling.type '" + *type + "' is not supported");
  double partial = obj.number("partial_rotary_factor", top.number("partial_rotary_factor", d.partial_factor));
  if (!(partial > 0 && partial <= 1)) return invalid("config.json partial_rotary_factor must be in (0, 1]");
  if (!d.honour_partial && partial != 1)
    return invalid("config.json partial_rotary_factor is not applied by " + c.family + " in transformers; mpakt will not guess");
  rope.rotary_dim = int(double(width) * partial);  // transformers: int(head_dim * factor)
  if (rope.rotary_dim < 2 || rope.rotary_dim % 2 != 0)
    return invalid("config.json partial_rotary_factor gives a rotary width of " + std::to_string(rope.rotary_dim) +
                   ", not a positive even number");
  if (*type != "default") rope.scaling_json = scaling_json(top, obj, *type);
  return rope;
}

}  // namespace

std::optional<double> rope_number(const config_reader& r, const char* key) {
  if (auto v = rope_object(r).number(key)) return v;
  return r.number(key);
}

result<arch_rope> read_rope(const config_reader& r, const arch_config& c, const rope_defaults& d, int width) {
  return rope_from(r, rope_object(r), c, d, width > 0 ? width : c.head_dim);
}

/// Gemma 3's two rope tables: {sliding, full}. transformers 5 nests them in rope_parameters;
/// older files give rope_local_base_freq (sliding), rope_theta and rope_scaling (full).
result<std::pair<arch_rope, arch_rope>> read_gemma3_ropes(const config_reader& r, const arch_config& c) {
  const config_reader params = r.object("rope_parameters");
  if (params.has("sliding_attention") || params.has("full_attention")) {
    rope_defaults local, global;
    global.theta = 1e6;
    auto s = rope_from(r, params.object("sliding_attention"), c, local, c.head_dim);
    if (!s) return std::move(s).err();
    auto f = rope_from(r, params.object("full_attention"), c, global, c.head_dim);
    if (!f) return std::move(f).err();
    return std::pair{*s, *f};
  }
  rope_defaults local, global;
  local.theta = r.number("rope_local_base_freq", 1e4);
  global.theta = r.number("rope_theta", 1e6);
  rapidjson::Value none(rapidjson::kObjectType);
  auto s = rope_from(r, config_reader(none), c, local, c.head_dim);
  if (!s) return std::move(s).err();
  s->theta = local.theta;
  auto f = rope_from(r, r.object("rope_scaling"), c, global, c.head_dim);
  if (!f) return std::move(f).err();
  return std::pair{*s, *f};
}

/// The standard dimensions, under their usual keys and the older aliases.
status read_dims(const config_reader& r, arch_config& c) {
  // BLOOM and Falcon take a legacy n_embed over hidden_size (their configs' __post_init__)
  if ((c.family == "bloom" || c.family == "falcon") && r.has("n_embed")) {
    MPAKT_TRY(r.positive({"n_embed"}, c.hidden));
  } else {
    MPAKT_TRY(r.positive({"hidden_size", "n_embd", "d_model"}, c.hidden));
  }
  MPAKT_TRY(r.positive({"num_hidden_layers", "n_layer", "n_layers"}, c.layers));
  MPAKT_TRY(r.positive({"num_attention_heads", "n_head", "n_heads"}, c.heads));
  MPAKT_TRY(r.positive({"vocab_size"}, c.vocab));
  MPAKT_TRY(r.positive({"num_key_value_heads"}, c.kv_heads, c.heads));
  if (c.hidden % c.heads != 0 && !r.has("head_dim"))
    return invalid("config.json hidden_size is not a multiple of num_attention_heads and there is no head_dim");
  MPAKT_TRY(r.positive({"head_dim"}, c.head_dim, c.hidden / c.heads));
  if (c.heads % c.kv_heads != 0) return invalid("config.json num_key_value_heads must divide num_attention_heads");
  c.v_head_dim = c.head_dim;
  return ok_status();
}

}  // namespace arch_detail

namespace {

/// Checks a mapped config against what the ops can express; refuses naming the field.
status check_mapped(const arch_config& c) {
  bool any_moe = false;
  for (const auto& l : c.layer) any_moe = any_moe || l.moe;
  if (!any_moe) return ok_status();
  if (c.moe.experts <= 0 || c.moe.top_k <= 0 || c.moe.top_k > c.moe.experts)
    return invalid("config.json num_experts_per_tok must be between 1 and the number of experts");
  if (c.activation != arch_activation::silu && c.activation != arch_activation::gelu_tanh)
    return invalid("config.json hidden_act is not available to the moe op's experts (silu or tanh GELU only)");
  return ok_status();
}

}  // namespace

result<arch_config> parse_arch_config(std::string_view text) {
  auto parsed = parse_json(text, "config.json");
  if (!parsed) return std::move(parsed).err();
  const rapidjson::Document& d = *parsed;
  if (!d.IsObject()) return invalid("config.json is not a JSON object");
  const arch_detail::config_reader r(d);
  auto type = r.text("model_type", "");
  if (!type || type->empty()) return invalid("config.json lacks model_type");
  if (r.has("quantization_config"))
    return invalid("config.json quantization_config is present: quantised checkpoints are not supported (no dequantisation path)");
  const auto& table = arch_detail::family_table();
  auto fam = table.find(*type);
  if (fam == table.end()) return invalid("config.json model_type '" + *type + "' is not a family mpakt builds");
  arch_config c;
  c.family = *type;
  MPAKT_TRY(arch_detail::read_dims(r, c));
  c.layer.resize(std::size_t(c.layers));
  MPAKT_TRY(fam->second(r, c));
  // The head reads the embedding table; a head bias (Phi-2, GPT-J, CodeGen: nn.Linear with a
  // bias, whose weight alone is tied) still applies.
  if (c.tied_embeddings) c.names.lm_head.weight.clear();
  MPAKT_TRY(check_mapped(c));
  for (const auto& l : c.layer)
    if (l.rope.enabled && l.rope.scaling_json.find("\"dynamic\"") != std::string::npos) c.rope_follows_length = true;
  for (const auto& l : c.layer)
    if (l.rope.enabled && l.rope.scaling_json.find("\"longrope\"") != std::string::npos) {
      auto orig = r.number("original_max_position_embeddings");  // the top-level field wins, as in Phi3Config
      if (!orig) orig = arch_detail::rope_number(r, "original_max_position_embeddings");
      c.rope_regime_limit = int(orig.value_or(0));
    }
  return c;
}

}  // namespace mpakt::models
