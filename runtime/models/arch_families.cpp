// The family mappings: config.json fields of each model_type → arch_config. Family knowledge
// lives here and only here; the graph writer (arch_graph.cpp) follows the resulting data.
// Each mapping cites what transformers 5 computes (test/fixtures/arch/FAMILY_NOTES.md) and
// refuses, naming the field, whatever it cannot reproduce exactly.

#include <algorithm>
#include <cmath>

#include "runtime/models/arch_config_reader.hpp"

namespace mpakt::models::arch_detail {

namespace {

// ---- shared pieces ----

/// hidden_act / activation_function → an activation, refusing names we do not map.
result<arch_activation> activation_of(const std::string& field, const std::string& name) {
  if (name == "silu" || name == "swish") return arch_activation::silu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return arch_activation::gelu_tanh;
  if (name == "gelu" || name == "gelu_python") return arch_activation::gelu_exact;
  if (name == "quick_gelu") return arch_activation::gelu_quick;
  if (name == "relu") return arch_activation::relu;
  return invalid("config.json " + field + " '" + name + "' is not an activation mpakt maps");
}

result<arch_activation> read_activation(const config_reader& r, const char* key, const char* fallback) {
  auto name = r.text(key, fallback);
  if (!name) return std::move(name).err();
  return activation_of(key, *name);
}

/// Rounds v to `bits` mantissa bits, ties to even (what a cast to bf16/f16 does).
double round_mantissa(double v, int bits) {
  if (v == 0 || !std::isfinite(v)) return v;
  const int e = std::ilogb(v);
  const double quantum = std::ldexp(1.0, e - bits);
  return std::nearbyint(v / quantum) * quantum;
}

/// Gemma's √hidden embedding scale, cast to the checkpoint dtype before it multiplies, as
/// GemmaTextScaledWordEmbedding does (√3072 becomes 55.5 in bf16).
double gemma_embed_scale(const config_reader& r, int hidden) {
  const double s = std::sqrt(double(hidden));
  std::string dt = r.text_or("dtype", "");
  if (dt.empty()) dt = r.text_or("torch_dtype", "");
  if (dt == "bfloat16") return round_mantissa(s, 7);
  if (dt == "float16") return round_mantissa(s, 10);
  return double(float(s));
}


/// Names of a Llama-style checkpoint ("model.layers.{L}.…").
arch_weight_names llama_names() {
  arch_weight_names n;
  const std::string L = "model.layers.{L}.";
  n.embed = "model.embed_tokens.weight";
  n.final_norm.weight = "model.norm.weight";
  n.lm_head.weight = "lm_head.weight";
  n.attn_norm.weight = L + "input_layernorm.weight";
  n.mlp_norm.weight = L + "post_attention_layernorm.weight";
  for (auto [field, proj] : {std::pair{&n.q, "q_proj"}, {&n.k, "k_proj"}, {&n.v, "v_proj"}, {&n.o, "o_proj"}})
    field->weight = L + "self_attn." + proj + ".weight";
  for (auto [field, proj] : {std::pair{&n.gate, "gate_proj"}, {&n.up, "up_proj"}, {&n.down, "down_proj"}})
    field->weight = L + "mlp." + proj + ".weight";
  return n;
}

/// The bias tensor name beside a weight name.
std::string bias_of(const std::string& weight) { return weight.substr(0, weight.size() - 6) + "bias"; }

void add_biases(std::initializer_list<arch_linear_names*> ls) {
  for (auto* l : ls) l->bias = bias_of(l->weight);
}

/// Sliding windows from layer_types ("sliding_attention"), else `default_sliding(i)`.
status read_windows(const config_reader& r, arch_config& c, int window, const std::function<bool(int)>& default_sliding) {
  auto types = r.strings("layer_types");
  if (!types) return std::move(types).err();
  if (!types->empty() && int(types->size()) != c.layers)
    return invalid("config.json layer_types has " + std::to_string(types->size()) + " entries for " +
                   std::to_string(c.layers) + " layers");
  for (int i = 0; i < c.layers; ++i) {
    bool sliding = types->empty() ? default_sliding(i) : (*types)[std::size_t(i)] == "sliding_attention";
    if (!types->empty() && (*types)[std::size_t(i)] != "sliding_attention" && (*types)[std::size_t(i)] != "full_attention")
      return invalid("config.json layer_types[" + std::to_string(i) + "] '" + (*types)[std::size_t(i)] +
                     "' is not a layer kind mpakt maps for " + c.family);
    c.layer[std::size_t(i)].window = sliding ? window : 0;
  }
  return ok_status();
}

/// Applies one rope setting to every layer.
void set_rope(arch_config& c, const arch_rope& rope) {
  for (auto& l : c.layer) l.rope = rope;
}

// ---- families ----

/// Which of Llama's bias switches a family's transformers code reads; a family ignores the
/// others even when a config.json carries them (so must the builder).
enum bias_fields : unsigned { no_bias_fields = 0, attention_bias_field = 1, mlp_bias_field = 2 };

/// Llama and the families that keep its layout exactly.
status llama_family(const config_reader& r, arch_config& c, const rope_defaults& d = {},
                    unsigned biases = attention_bias_field) {
  c.names = llama_names();
  MPAKT_TRY(r.positive({"intermediate_size"}, c.intermediate));
  c.norm_eps = r.number("rms_norm_eps", 1e-6);
  auto act = read_activation(r, "hidden_act", "silu");
  if (!act) return std::move(act).err();
  c.activation = *act;
  auto rope = read_rope(r, c, d);
  if (!rope) return std::move(rope).err();
  set_rope(c, *rope);
  if ((biases & attention_bias_field) && r.flag("attention_bias", false))
    add_biases({&c.names.q, &c.names.k, &c.names.v, &c.names.o});
  if ((biases & mlp_bias_field) && r.flag("mlp_bias", false)) add_biases({&c.names.gate, &c.names.up, &c.names.down});
  return ok_status();
}

/// Llama: tied only when the config says so (LlamaConfig defaults to untied).
status llama(const config_reader& r, arch_config& c, const rope_defaults& d = {},
             unsigned biases = attention_bias_field | mlp_bias_field) {
  MPAKT_TRY(llama_family(r, c, d, biases));
  c.tied_embeddings = r.flag("tie_word_embeddings", false);
  return ok_status();
}

/// Mistral / Mixtral: sliding_window on every layer when set (MistralConfig defaults it to 4096).
status every_layer_window(const config_reader& r, arch_config& c, std::optional<int> absent_default) {
  int window = 0;
  if (r.has_key("sliding_window")) {
    MPAKT_TRY(r.positive({"sliding_window"}, window, 0));
  } else if (absent_default) {
    window = *absent_default;
  }
  for (auto& l : c.layer) l.window = window;
  return ok_status();
}

/// A setting that null turns off (0) and whose absence means the config class's default: the
/// class default fills only a missing key, so the two cases differ (Gemma 2's softcaps).
double number_or_default(const config_reader& r, const char* key, double absent) {
  return r.has_key(key) ? r.number(key, 0) : absent;
}

/// sliding_window read the same way (null: no window; absent: the class default).
status window_or_default(const config_reader& r, int& window, int absent) {
  window = absent;
  if (!r.has_key("sliding_window")) return ok_status();
  window = 0;
  return r.positive({"sliding_window"}, window, 0);
}

/// Mistral: Llama plus a window on every layer.
status mistral(const config_reader& r, arch_config& c) {
  MPAKT_TRY(llama(r, c, {}, no_bias_fields));  // MistralAttention and MistralMLP have no biases
  return every_layer_window(r, c, 4096);
}

/// Where a Qwen config without layer_types puts its windows (each config class's default).
enum class qwen_window_rule : std::uint8_t {
  from_max_window_layers,   ///< Qwen2, Qwen3: layers from max_window_layers on
  alternate_below_max_window,     ///< Qwen2-MoE: layers 0, 2, 4, … below max_window_layers
  every_layer,              ///< Qwen3-MoE: no layer_types at all, one window on every layer
};

/// Qwen windows: only with use_sliding_window, on layer_types' sliding layers, else where
/// the family's config class puts them.
status qwen_windows(const config_reader& r, arch_config& c, qwen_window_rule rule) {
  if (!r.flag("use_sliding_window", false)) return ok_status();
  int window = 0, below = 0;
  MPAKT_TRY(r.positive({"sliding_window"}, window, 0));
  if (rule == qwen_window_rule::every_layer) {
    // Qwen3MoeAttention passes config.sliding_window to every layer; layer_types and
    // max_window_layers are not read
    for (auto& l : c.layer) l.window = window;
    return ok_status();
  }
  MPAKT_TRY(r.positive({"max_window_layers"}, below, c.layers));
  if (rule == qwen_window_rule::alternate_below_max_window)
    return read_windows(r, c, window, [&](int i) { return (i + 1) % 2 != 0 && i < below; });
  return read_windows(r, c, window, [&](int i) { return i >= below; });
}

/// Qwen2: q/k/v biases always, o_proj none; tied per config.
status qwen2(const config_reader& r, arch_config& c) {
  MPAKT_TRY(llama_family(r, c, {}, no_bias_fields));
  c.tied_embeddings = r.flag("tie_word_embeddings", false);
  c.names.o.bias.clear();
  add_biases({&c.names.q, &c.names.k, &c.names.v});  // Qwen2Attention: always, not config-driven
  return qwen_windows(r, c, qwen_window_rule::from_max_window_layers);
}

/// Qwen3 attention: per-head RMS q/k norms (one [hd] weight) before rope.
status qwen3_attention(const config_reader& r, arch_config& c) {
  MPAKT_TRY(llama(r, c, {}, attention_bias_field));
  c.qk_norm = arch_qk_norm_kind::rms_head;
  c.names.q_norm = "model.layers.{L}.self_attn.q_norm.weight";
  c.names.k_norm = "model.layers.{L}.self_attn.k_norm.weight";
  return ok_status();
}

status qwen3(const config_reader& r, arch_config& c) {
  MPAKT_TRY(qwen3_attention(r, c));
  return qwen_windows(r, c, qwen_window_rule::from_max_window_layers);
}

/// MoE placement of Qwen2/Qwen3-MoE: not in mlp_only_layers, every decoder_sparse_step-th.
status qwen_moe_layers(const config_reader& r, arch_config& c) {
  int step = 1;
  MPAKT_TRY(r.positive({"decoder_sparse_step"}, step, 1));
  auto only = r.ints("mlp_only_layers");
  if (!only) return std::move(only).err();
  for (int i = 0; i < c.layers; ++i) {
    const bool dense = std::find(only->begin(), only->end(), i) != only->end();
    c.layer[std::size_t(i)].moe = !dense && c.moe.experts > 0 && (i + 1) % step == 0;
  }
  return ok_status();
}

/// Router settings shared by the softmax-routed families.
status softmax_router(const config_reader& r, arch_config& c, bool normalize) {
  MPAKT_TRY(r.positive({"num_local_experts", "num_experts", "n_routed_experts"}, c.moe.experts));
  MPAKT_TRY(r.positive({"num_experts_per_tok"}, c.moe.top_k));
  c.moe.normalize = normalize;
  const std::string L = "model.layers.{L}.mlp.";
  c.names.router = L + "gate.weight";
  c.names.expert_gate = L + "experts.{E}.gate_proj.weight";
  c.names.expert_up = L + "experts.{E}.up_proj.weight";
  c.names.expert_down = L + "experts.{E}.down_proj.weight";
  return ok_status();
}

/// Qwen2-MoE: softmax routing (renormalised iff norm_topk_prob), a sigmoid-gated shared expert.
status qwen2_moe(const config_reader& r, arch_config& c) {
  MPAKT_TRY(llama_family(r, c, {}, no_bias_fields));  // qkv_bias instead
  c.tied_embeddings = r.flag("tie_word_embeddings", false);
  if (r.flag("qkv_bias", true)) add_biases({&c.names.q, &c.names.k, &c.names.v});
  MPAKT_TRY(softmax_router(r, c, r.flag("norm_topk_prob", false)));
  MPAKT_TRY(r.positive({"moe_intermediate_size"}, c.moe_intermediate));
  int shared = 0;
  MPAKT_TRY(r.positive({"shared_expert_intermediate_size"}, shared, 5632));  // Qwen2MoeConfig's default
  if (shared > 0) {
    c.moe.shared = c.moe.shared_gated = true;
    const std::string L = "model.layers.{L}.mlp.";
    c.names.shared_gate.weight = L + "shared_expert.gate_proj.weight";
    c.names.shared_up.weight = L + "shared_expert.up_proj.weight";
    c.names.shared_down.weight = L + "shared_expert.down_proj.weight";
    c.names.shared_expert_gate = L + "shared_expert_gate.weight";
  }
  MPAKT_TRY(qwen_moe_layers(r, c));
  return qwen_windows(r, c, qwen_window_rule::alternate_below_max_window);
}

/// Qwen3-MoE: Qwen3 attention, Qwen-MoE routing, no shared expert.
status qwen3_moe(const config_reader& r, arch_config& c) {
  MPAKT_TRY(qwen3_attention(r, c));
  MPAKT_TRY(softmax_router(r, c, r.flag("norm_topk_prob", false)));
  MPAKT_TRY(r.positive({"moe_intermediate_size"}, c.moe_intermediate));
  MPAKT_TRY(qwen_moe_layers(r, c));
  return qwen_windows(r, c, qwen_window_rule::every_layer);
}

/// Mixtral: every layer MoE, softmax over all experts then renormalised; w1/w3/w2 experts.
status mixtral(const config_reader& r, arch_config& c) {
  rope_defaults d;
  d.theta = 1e6;  // MixtralConfig's defaults: theta 1e6, eps 1e-5
  MPAKT_TRY(llama(r, c, d, no_bias_fields));
  c.norm_eps = r.number("rms_norm_eps", 1e-5);
  MPAKT_TRY(softmax_router(r, c, true));
  const std::string L = "model.layers.{L}.block_sparse_moe.";
  c.names.router = L + "gate.weight";
  c.names.expert_gate = L + "experts.{E}.w1.weight";
  c.names.expert_up = L + "experts.{E}.w3.weight";
  c.names.expert_down = L + "experts.{E}.w2.weight";
  c.moe_intermediate = c.intermediate;
  for (auto& l : c.layer) l.moe = true;
  return every_layer_window(r, c, std::nullopt);
}

/// OLMoE: q/k RMSNorm over the whole projection width, every layer MoE.
status olmoe(const config_reader& r, arch_config& c) {
  MPAKT_TRY(llama(r, c, {}, attention_bias_field));
  c.norm_eps = r.number("rms_norm_eps", 1e-5);  // OlmoeConfig's default
  if (r.has("clip_qkv")) return invalid("config.json clip_qkv is not supported (no clamp step is built)");
  c.qk_norm = arch_qk_norm_kind::rms_full;
  c.names.q_norm = "model.layers.{L}.self_attn.q_norm.weight";
  c.names.k_norm = "model.layers.{L}.self_attn.k_norm.weight";
  MPAKT_TRY(softmax_router(r, c, r.flag("norm_topk_prob", false)));
  c.moe_intermediate = c.intermediate;
  for (auto& l : c.layer) l.moe = true;
  return ok_status();
}

/// Granite: Llama with embedding, residual, attention and logit multipliers.
status granite(const config_reader& r, arch_config& c) {
  MPAKT_TRY(llama(r, c));
  c.embed_scale = r.number("embedding_multiplier", 1);
  c.residual_scale = r.number("residual_multiplier", 1);
  c.logit_scale = 1.0 / r.number("logits_scaling", 1);
  const double attn = r.number("attention_multiplier", 1);  // GraniteConfig's default, not 1/sqrt(hd)
  for (auto& l : c.layer) l.attn_scale = attn;
  return ok_status();
}

/// GLM: interleaved rope on the first half of each head, fused gate_up.
status glm(const config_reader& r, arch_config& c) {
  rope_defaults d;
  d.partial_factor = 0.5;
  d.honour_partial = true;
  d.interleaved = true;
  MPAKT_TRY(llama(r, c, d, no_bias_fields));
  c.norm_eps = r.number("rms_norm_eps", 1.5625e-07);  // GlmConfig's default
  // GlmAttention: q/k/v follow attention_bias (true by default), o_proj never has one
  if (r.flag("attention_bias", true)) add_biases({&c.names.q, &c.names.k, &c.names.v});
  c.names.gate_up.weight = "model.layers.{L}.mlp.gate_up_proj.weight";
  c.names.gate.weight = c.names.up.weight = "";
  return ok_status();
}

/// Phi-3: fused qkv and gate_up, longrope; a window on every layer when set.
status phi3(const config_reader& r, arch_config& c) {
  rope_defaults d;
  d.honour_partial = true;
  MPAKT_TRY(llama(r, c, d, no_bias_fields));
  c.norm_eps = r.number("rms_norm_eps", 1e-5);  // Phi3Config's default
  c.qkv_layout = arch_qkv_layout::blocked;
  c.names.qkv.weight = "model.layers.{L}.self_attn.qkv_proj.weight";
  c.names.q.weight = c.names.k.weight = c.names.v.weight = "";
  c.names.gate_up.weight = "model.layers.{L}.mlp.gate_up_proj.weight";
  c.names.gate.weight = c.names.up.weight = "";
  return every_layer_window(r, c, std::nullopt);
}

/// Gemma 1: offset norms, √C embeddings, tanh-GELU gated MLP, tied.
status gemma(const config_reader& r, arch_config& c) {
  MPAKT_TRY(llama_family(r, c));
  c.tied_embeddings = r.flag("tie_word_embeddings", true);
  c.norm_weight_offset = 1;
  c.embed_scale = gemma_embed_scale(r, c.hidden);
  // transformers 5: Gemma 1 takes hidden_act (GemmaConfig rewrites a legacy "gelu" to the tanh
  // form) and ignores hidden_activation; Gemma 2 and 3 take hidden_activation only.
  const bool first = c.family == "gemma";
  const char* key = first ? "hidden_act" : "hidden_activation";
  auto name = r.text(key, "gelu_pytorch_tanh");
  if (!name) return std::move(name).err();
  auto act = activation_of(key, first && *name == "gelu" ? std::string("gelu_pytorch_tanh") : *name);
  if (!act) return std::move(act).err();
  c.activation = *act;
  if (r.flag("use_bidirectional_attention", false))
    return invalid("config.json use_bidirectional_attention is not supported: decoding needs causal attention");
  return ok_status();
}

/// Gemma 2's additions: sandwich norms, query_pre_attn_scalar, windows on even layers.
status gemma2_common(const config_reader& r, arch_config& c, int default_pattern) {
  MPAKT_TRY(gemma(r, c));
  const std::string L = "model.layers.{L}.";
  c.names.post_attn_norm.weight = L + "post_attention_layernorm.weight";
  c.names.mlp_norm.weight = L + "pre_feedforward_layernorm.weight";
  c.names.post_mlp_norm.weight = L + "post_feedforward_layernorm.weight";
  // the config classes' defaults: query_pre_attn_scalar 256, window 4096; Gemma 2 caps the
  // logits at 30 unless the file says null
  const double scalar = r.number("query_pre_attn_scalar", 256);
  for (auto& l : c.layer) l.attn_scale = 1.0 / std::sqrt(scalar);
  c.final_softcap = number_or_default(r, "final_logit_softcapping", c.family == "gemma2" ? 30 : 0);
  int window = 0;
  MPAKT_TRY(window_or_default(r, window, 4096));
  int pattern = default_pattern;
  MPAKT_TRY(r.positive({"sliding_window_pattern", "_sliding_window_pattern"}, pattern, default_pattern));
  return read_windows(r, c, window, [&](int i) { return (i + 1) % pattern != 0; });
}

/// Gemma 2: attention score softcap on top of the common Gemma 2/3 structure.
status gemma2(const config_reader& r, arch_config& c) {
  MPAKT_TRY(gemma2_common(r, c, 2));
  c.attn_softcap = number_or_default(r, "attn_logit_softcapping", 50);  // Gemma2Config's default
  return ok_status();
}

/// Gemma 3 text: q/k norms, a rope table per layer kind; attn_logit_softcapping is stored
/// but not applied by transformers.
status gemma3_text(const config_reader& r, arch_config& c) {
  MPAKT_TRY(gemma2_common(r, c, 6));
  c.qk_norm = arch_qk_norm_kind::rms_head;
  c.qk_norm_offset = true;
  c.names.q_norm = "model.layers.{L}.self_attn.q_norm.weight";
  c.names.k_norm = "model.layers.{L}.self_attn.k_norm.weight";
  auto ropes = read_gemma3_ropes(r, c);
  if (!ropes) return std::move(ropes).err();
  for (auto& l : c.layer) l.rope = l.window > 0 ? ropes->first : ropes->second;
  return ok_status();
}

/// Cohere: one-norm parallel block, bias-free LayerNorms, interleaved rope, logit_scale.
status cohere(const config_reader& r, arch_config& c) {
  rope_defaults d;
  d.interleaved = true;
  if (c.family == "cohere") d.theta = 5e5;  // CohereConfig's default (Cohere2Config's is 1e4)
  MPAKT_TRY(llama_family(r, c, d));
  c.tied_embeddings = r.flag("tie_word_embeddings", true);
  c.norm = arch_norm_kind::layer;
  c.norm_eps = r.number("layer_norm_eps", 1e-5);
  c.block = arch_block_kind::parallel;
  c.names.mlp_norm.weight.clear();
  c.logit_scale = r.number("logit_scale", 0.0625);  // both config classes' default
  if (r.flag("use_qk_norm", false)) {
    c.qk_norm = arch_qk_norm_kind::layer_head;
    c.names.q_norm = "model.layers.{L}.self_attn.q_norm.weight";
    c.names.k_norm = "model.layers.{L}.self_attn.k_norm.weight";
  }
  return ok_status();
}

/// Cohere 2: sliding layers use rope and the window; full layers use no rope at all.
status cohere2(const config_reader& r, arch_config& c) {
  // Cohere2Config overwrites head_dim with hidden_size / num_attention_heads, whatever the file says
  c.head_dim = c.v_head_dim = c.hidden / c.heads;
  MPAKT_TRY(cohere(r, c));
  c.qk_norm = arch_qk_norm_kind::none;
  int window = 0, pattern = 4;
  MPAKT_TRY(window_or_default(r, window, 4096));
  MPAKT_TRY(r.positive({"sliding_window_pattern"}, pattern, 4));
  MPAKT_TRY(read_windows(r, c, window, [&](int i) { return (i + 1) % pattern != 0; }));
  for (auto& l : c.layer) l.rope.enabled = l.window > 0;
  return ok_status();
}

/// Families whose attention splits heads as hidden_size / num_attention_heads and never reads
/// head_dim (BLOOM, Falcon, GPT-2) ignore it, as transformers does. StableLM and GPT-NeoX
/// also split heads that way, but their rotary tables are sized from a head_dim when the
/// config has one: a head_dim unlike the split is refused.
status head_dim_from_hidden(const config_reader& r, arch_config& c, bool rotary_reads_head_dim) {
  const int split = c.hidden / c.heads;
  if (rotary_reads_head_dim && r.has("head_dim") && c.head_dim != split)
    return invalid("config.json head_dim " + std::to_string(c.head_dim) + " is not hidden_size / num_attention_heads (" +
                   std::to_string(split) + "): " + c.family + " sizes rope by head_dim but attention by the split");
  c.head_dim = c.v_head_dim = split;
  return ok_status();
}

/// LayerNorm-with-bias names of a weight prefix.
arch_norm_names layer_norm(const std::string& prefix) { return {prefix + ".weight", prefix + ".bias"}; }

/// A linear with its bias.
arch_linear_names biased(const std::string& prefix) { return {prefix + ".weight", prefix + ".bias", false}; }
arch_linear_names unbiased(const std::string& prefix) { return {prefix + ".weight", "", false}; }

/// Families with LayerNorms and a plain (ungated) MLP share these settings.
void layernorm_family(const config_reader& r, arch_config& c, const char* eps_key) {
  c.norm = arch_norm_kind::layer;
  c.norm_eps = r.number(eps_key, 1e-5);
  c.gated_mlp = false;
}

/// Phi-2: one LayerNorm feeding attention and MLP in parallel, partial rope, biased head.
status phi(const config_reader& r, arch_config& c) {
  layernorm_family(r, c, "layer_norm_eps");
  if (r.flag("qk_layernorm", false)) return invalid("config.json qk_layernorm true is not supported for phi");
  auto act = read_activation(r, "hidden_act", "gelu_new");
  if (!act) return std::move(act).err();
  c.activation = *act;
  rope_defaults d;
  d.partial_factor = 0.5;
  d.honour_partial = true;
  auto rope = read_rope(r, c, d);
  if (!rope) return std::move(rope).err();
  set_rope(c, *rope);
  c.block = arch_block_kind::parallel;
  c.tied_embeddings = r.flag("tie_word_embeddings", false);
  const std::string L = "model.layers.{L}.";
  auto& n = c.names;
  n.embed = "model.embed_tokens.weight";
  n.final_norm = layer_norm("model.final_layernorm");
  n.lm_head = biased("lm_head");
  n.attn_norm = layer_norm(L + "input_layernorm");
  n.q = biased(L + "self_attn.q_proj");
  n.k = biased(L + "self_attn.k_proj");
  n.v = biased(L + "self_attn.v_proj");
  n.o = biased(L + "self_attn.dense");
  n.up = biased(L + "mlp.fc1");
  n.down = biased(L + "mlp.fc2");
  return ok_status();
}

/// GPT-2: learned positions, Conv1D [in, out] weights, no rope.
status gpt2(const config_reader& r, arch_config& c) {
  MPAKT_TRY(head_dim_from_hidden(r, c, false));
  layernorm_family(r, c, "layer_norm_epsilon");
  auto act = read_activation(r, "activation_function", "gelu_new");
  if (!act) return std::move(act).err();
  c.activation = *act;
  MPAKT_TRY(r.positive({"n_positions"}, c.max_positions, 1024));
  for (auto& l : c.layer) l.rope.enabled = false;
  const bool scaled = r.flag("scale_attn_weights", true), by_layer = r.flag("scale_attn_by_inverse_layer_idx", false);
  for (int i = 0; i < c.layers; ++i) {
    double s = scaled ? 1.0 / std::sqrt(double(c.head_dim)) : 1.0;
    if (by_layer) s /= double(i + 1);
    c.layer[std::size_t(i)].attn_scale = s;
  }
  if (r.flag("add_cross_attention", false)) return invalid("config.json add_cross_attention is not supported for gpt2");
  c.tied_embeddings = r.flag("tie_word_embeddings", true);
  c.qkv_layout = arch_qkv_layout::blocked;
  const std::string L = "transformer.h.{L}.";
  auto& n = c.names;
  n.embed = "transformer.wte.weight";
  n.pos_embed = "transformer.wpe.weight";
  n.final_norm = layer_norm("transformer.ln_f");
  n.attn_norm = layer_norm(L + "ln_1");
  n.mlp_norm = layer_norm(L + "ln_2");
  n.qkv = {L + "attn.c_attn.weight", L + "attn.c_attn.bias", true};
  n.o = {L + "attn.c_proj.weight", L + "attn.c_proj.bias", true};
  n.up = {L + "mlp.c_fc.weight", L + "mlp.c_fc.bias", true};
  n.down = {L + "mlp.c_proj.weight", L + "mlp.c_proj.bias", true};
  if (!c.tied_embeddings) n.lm_head.weight = "lm_head.weight";
  return ok_status();
}

/// GPT-NeoX / Pythia: per-head fused qkv, partial rope, two-norm parallel residual.
status gpt_neox(const config_reader& r, arch_config& c) {
  MPAKT_TRY(head_dim_from_hidden(r, c, true));
  layernorm_family(r, c, "layer_norm_eps");
  auto act = read_activation(r, "hidden_act", "gelu");
  if (!act) return std::move(act).err();
  c.activation = *act;
  rope_defaults d;
  d.partial_factor = r.number("rotary_pct", 0.25);
  d.honour_partial = true;
  d.theta = r.number("rotary_emb_base", 10000);
  auto rope = read_rope(r, c, d);
  if (!rope) return std::move(rope).err();
  set_rope(c, *rope);
  c.tied_embeddings = r.flag("tie_word_embeddings", false);
  c.qkv_layout = arch_qkv_layout::per_head;
  const std::string L = "gpt_neox.layers.{L}.";
  const bool bias = r.flag("attention_bias", true);
  auto& n = c.names;
  n.embed = "gpt_neox.embed_in.weight";
  n.final_norm = layer_norm("gpt_neox.final_layer_norm");
  n.lm_head.weight = c.tied_embeddings ? "" : "embed_out.weight";
  n.attn_norm = layer_norm(L + "input_layernorm");
  n.mlp_norm = layer_norm(L + "post_attention_layernorm");
  c.block = r.flag("use_parallel_residual", true) ? arch_block_kind::parallel : arch_block_kind::sequential;
  n.qkv = bias ? biased(L + "attention.query_key_value") : unbiased(L + "attention.query_key_value");
  n.o = bias ? biased(L + "attention.dense") : unbiased(L + "attention.dense");
  n.up = biased(L + "mlp.dense_h_to_4h");
  n.down = biased(L + "mlp.dense_4h_to_h");
  return ok_status();
}

/// GPT-J and CodeGen: one-norm parallel block, interleaved rope on rotary_dim, theta 10000.
status gptj_common(const config_reader& r, arch_config& c) {
  layernorm_family(r, c, "layer_norm_epsilon");
  auto act = read_activation(r, "activation_function", "gelu_new");
  if (!act) return std::move(act).err();
  c.activation = *act;
  MPAKT_TRY(r.positive({"n_positions"}, c.max_positions, 2048));
  arch_rope rope;
  rope.theta = 10000;  // hard-wired in create_sinusoidal_positions
  rope.interleaved = true;
  // absent: the config classes' 64; null: the sinusoid table is hidden_size wide and rotates
  // whole heads, which fits only a one-head model (refused below otherwise)
  MPAKT_TRY(r.positive({"rotary_dim"}, rope.rotary_dim, r.has_key("rotary_dim") ? c.hidden : 64));
  if (rope.rotary_dim > c.head_dim || rope.rotary_dim % 2 != 0)
    return invalid("config.json rotary_dim must be even and at most the head width");
  set_rope(c, rope);
  c.block = arch_block_kind::parallel;
  c.tied_embeddings = r.flag("tie_word_embeddings", false);
  const std::string L = "transformer.h.{L}.";
  auto& n = c.names;
  n.embed = "transformer.wte.weight";
  n.final_norm = layer_norm("transformer.ln_f");
  // lm_head is nn.Linear with a bias: tying shares only the weight, the bias stays its own
  n.lm_head = biased("lm_head");
  n.attn_norm = layer_norm(L + "ln_1");
  n.o = unbiased(L + "attn.out_proj");
  n.up = biased(L + "mlp.fc_in");
  n.down = biased(L + "mlp.fc_out");
  return ok_status();
}

/// GPT-J: separate bias-free q/k/v.
status gptj(const config_reader& r, arch_config& c) {
  MPAKT_TRY(gptj_common(r, c));
  const std::string L = "transformer.h.{L}.";
  c.names.q = unbiased(L + "attn.q_proj");
  c.names.k = unbiased(L + "attn.k_proj");
  c.names.v = unbiased(L + "attn.v_proj");
  return ok_status();
}

/// CodeGen: one fused qkv in 4 model-parallel blocks of [q | v | k].
status codegen(const config_reader& r, arch_config& c) {
  MPAKT_TRY(gptj_common(r, c));
  c.qkv_layout = arch_qkv_layout::codegen;
  c.qkv_blocks = 4;  // mp_num, hard-wired in CodeGenAttention
  if (c.heads % c.qkv_blocks != 0) return invalid("config.json n_head must be a multiple of 4 for codegen");
  c.names.qkv = unbiased("transformer.h.{L}.attn.qkv_proj");
  return ok_status();
}

/// StableLM: LayerNorms with bias, partial rope, optional per-head q/k LayerNorms.
status stablelm(const config_reader& r, arch_config& c) {
  MPAKT_TRY(head_dim_from_hidden(r, c, true));
  rope_defaults d;
  d.partial_factor = 0.25;
  d.honour_partial = true;
  MPAKT_TRY(llama_family(r, c, d));
  c.norm = arch_norm_kind::layer;
  c.norm_eps = r.number("layer_norm_eps", 1e-5);
  c.tied_embeddings = r.flag("tie_word_embeddings", false);
  const std::string L = "model.layers.{L}.";
  auto& n = c.names;
  n.final_norm = layer_norm("model.norm");
  n.attn_norm = layer_norm(L + "input_layernorm");
  n.mlp_norm = layer_norm(L + "post_attention_layernorm");
  n.q.bias = n.k.bias = n.v.bias = n.o.bias = "";
  n.gate.bias = n.up.bias = n.down.bias = "";
  if (r.flag("use_qkv_bias", false)) add_biases({&n.q, &n.k, &n.v});
  if (r.flag("use_parallel_residual", false)) {
    c.block = arch_block_kind::parallel;
    n.mlp_norm = {};
  }
  if (r.flag("qk_layernorm", false)) {
    c.qk_norm = arch_qk_norm_kind::layer_head;
    n.q_norm = L + "self_attn.q_layernorm.norms.{H}.weight";
    n.k_norm = L + "self_attn.k_layernorm.norms.{H}.weight";
  }
  return ok_status();
}

/// Falcon: the classic multi-query layout or new_decoder_architecture's grouped one.
status falcon(const config_reader& r, arch_config& c) {
  MPAKT_TRY(head_dim_from_hidden(r, c, false));
  layernorm_family(r, c, "layer_norm_epsilon");
  if (r.flag("alibi", false))
    return invalid("config.json alibi true is not supported for falcon: its ALiBi term is built in bf16 and scaled with the scores");
  auto act = read_activation(r, "activation", "gelu");
  if (!act) return std::move(act).err();
  c.activation = *act;
  auto rope = read_rope(r, c, {});
  if (!rope) return std::move(rope).err();
  set_rope(c, *rope);
  c.tied_embeddings = r.flag("tie_word_embeddings", true);
  const bool bias = r.flag("bias", false), new_arch = r.flag("new_decoder_architecture", false);
  const std::string L = "transformer.h.{L}.";
  auto& n = c.names;
  n.embed = "transformer.word_embeddings.weight";
  n.final_norm = layer_norm("transformer.ln_f");
  if (!c.tied_embeddings) n.lm_head.weight = "lm_head.weight";
  auto proj = [&](const std::string& p) { return bias ? biased(L + p) : unbiased(L + p); };
  n.qkv = proj("self_attention.query_key_value");
  n.o = proj("self_attention.dense");
  n.up = proj("mlp.dense_h_to_4h");
  n.down = proj("mlp.dense_4h_to_h");
  if (new_arch) {
    // FalconDecoderLayer has no path for this: it builds the sequential norms and then reads
    // ln_attn (two norms) or a never-set MLP input (one norm)
    if (!r.flag("parallel_attn", true))
      return invalid("config.json parallel_attn false with new_decoder_architecture is not supported: transformers cannot run it");
    MPAKT_TRY(r.positive({"num_kv_heads", "n_head_kv"}, c.kv_heads, c.heads));
    if (c.heads % c.kv_heads != 0) return invalid("config.json num_kv_heads must divide num_attention_heads");
    c.qkv_layout = arch_qkv_layout::grouped;
    c.block = arch_block_kind::parallel;
    int norms = 2;
    MPAKT_TRY(r.positive({"num_ln_in_parallel_attn"}, norms, 2));
    if (norms == 2) {
      n.attn_norm = layer_norm(L + "ln_attn");
      n.mlp_norm = layer_norm(L + "ln_mlp");
    } else {
      n.attn_norm = layer_norm(L + "input_layernorm");
    }
    return ok_status();
  }
  c.kv_heads = r.flag("multi_query", true) ? 1 : c.heads;
  // FalconAttention takes num_kv_heads in the classic layout too (without multi_query), but
  // its fused per-head qkv then holds a k and v per head: only num_kv_heads = heads computes
  int kv_field = c.heads;
  MPAKT_TRY(r.positive({"num_kv_heads"}, kv_field, c.heads));
  if (c.kv_heads != 1 && kv_field != c.heads)
    return invalid("config.json num_kv_heads other than num_attention_heads is not supported for falcon without "
                   "new_decoder_architecture or multi_query");
  c.qkv_layout = c.kv_heads == 1 ? arch_qkv_layout::blocked : arch_qkv_layout::per_head;
  n.attn_norm = layer_norm(L + "input_layernorm");
  if (r.flag("parallel_attn", true)) {
    c.block = arch_block_kind::parallel;
  } else {
    n.mlp_norm = layer_norm(L + "post_attention_layernorm");
  }
  return ok_status();
}

/// BLOOM: ALiBi, a LayerNorm after the embedding, per-head fused qkv.
status bloom(const config_reader& r, arch_config& c) {
  MPAKT_TRY(head_dim_from_hidden(r, c, false));
  layernorm_family(r, c, "layer_norm_epsilon");
  if (r.flag("apply_residual_connection_post_layernorm", false))
    return invalid("config.json apply_residual_connection_post_layernorm true is not supported for bloom");
  c.activation = arch_activation::gelu_tanh;  // bloom_gelu: tanh GELU with √(2/π) rounded to 0.79788456
  c.alibi = true;
  for (auto& l : c.layer) l.rope.enabled = false;
  c.tied_embeddings = r.flag("tie_word_embeddings", true);
  c.qkv_layout = arch_qkv_layout::per_head;
  const std::string L = "transformer.h.{L}.";
  auto& n = c.names;
  n.embed = "transformer.word_embeddings.weight";
  n.embed_norm = layer_norm("transformer.word_embeddings_layernorm");
  n.final_norm = layer_norm("transformer.ln_f");
  if (!c.tied_embeddings) n.lm_head.weight = "lm_head.weight";
  n.attn_norm = layer_norm(L + "input_layernorm");
  n.mlp_norm = layer_norm(L + "post_attention_layernorm");
  n.qkv = biased(L + "self_attention.query_key_value");
  n.o = biased(L + "self_attention.dense");
  n.up = biased(L + "mlp.dense_h_to_4h");
  n.down = biased(L + "mlp.dense_4h_to_h");
  return ok_status();
}

/// MPT: ALiBi always, bias-free LayerNorms and linears, [q | k | v] Wqkv.
status mpt(const config_reader& r, arch_config& c) {
  layernorm_family(r, c, "layer_norm_epsilon");
  c.activation = arch_activation::gelu_exact;
  c.alibi = true;  // MptModel always builds ALiBi with bias max 8, whatever attn_config says
  const config_reader attn = r.object("attn_config");
  if (attn.has("clip_qkv")) return invalid("config.json attn_config.clip_qkv is not supported (no clamp step is built)");
  const double scale = attn.number("softmax_scale", 1.0 / std::sqrt(double(c.head_dim)));
  for (auto& l : c.layer) {
    l.rope.enabled = false;
    l.attn_scale = scale;
  }
  MPAKT_TRY(r.positive({"max_seq_len"}, c.max_positions, 2048));
  // MptForCausalLM's head is a bias-free lm_head, tied to wte unless the config says otherwise
  c.tied_embeddings = r.flag("tie_word_embeddings", true);
  if (!c.tied_embeddings) c.names.lm_head.weight = "lm_head.weight";
  c.qkv_layout = arch_qkv_layout::blocked;
  const std::string L = "transformer.blocks.{L}.";
  auto& n = c.names;
  n.embed = "transformer.wte.weight";
  n.final_norm.weight = "transformer.norm_f.weight";
  n.attn_norm.weight = L + "norm_1.weight";
  n.mlp_norm.weight = L + "norm_2.weight";
  n.qkv = unbiased(L + "attn.Wqkv");
  n.o = unbiased(L + "attn.out_proj");
  n.up = unbiased(L + "ffn.up_proj");
  n.down = unbiased(L + "ffn.down_proj");
  return ok_status();
}

/// LFM2: short-conv and attention layers (layer_types or full_attn_idxs); final embedding_norm.
status lfm2(const config_reader& r, arch_config& c) {
  rope_defaults d;
  d.theta = 1e6;  // Lfm2Config's default
  MPAKT_TRY(llama_family(r, c, d, no_bias_fields));
  c.norm_eps = r.number("norm_eps", 1e-5);
  // Lfm2Config takes the released checkpoints' tie_embedding in place of tie_word_embeddings
  c.tied_embeddings = r.flag("tie_embedding", r.flag("tie_word_embeddings", true));
  if (r.flag("conv_bias", false)) return invalid("config.json conv_bias true is not supported: short_conv has no bias inputs");
  MPAKT_TRY(r.positive({"conv_L_cache"}, c.conv_kernel, 3));
  if (c.conv_kernel < 2) return invalid("config.json conv_L_cache must be at least 2");
  auto types = r.strings("layer_types");
  if (!types) return std::move(types).err();
  auto full = r.ints("full_attn_idxs");
  if (!full) return std::move(full).err();
  if (!types->empty() && int(types->size()) != c.layers) return invalid("config.json layer_types does not list every layer");
  // Lfm2Config: without layer_types, full_attn_idxs lists the attention layers; without
  // either, every layer is attention
  const bool all_attention = types->empty() && !r.has("full_attn_idxs");
  for (int i = 0; i < c.layers; ++i) {
    bool attention;
    if (!types->empty()) {
      const std::string& t = (*types)[std::size_t(i)];
      if (t != "conv" && t != "full_attention") return invalid("config.json layer_types[" + std::to_string(i) + "] '" + t + "' is not an lfm2 layer kind");
      attention = t == "full_attention";
    } else {
      attention = all_attention || std::find(full->begin(), full->end(), i) != full->end();
    }
    if (!attention) {
      c.layer[std::size_t(i)].mixer = arch_mixer_kind::short_conv;
      c.recurrent_state = true;
    }
  }
  c.qk_norm = arch_qk_norm_kind::rms_head;
  const std::string L = "model.layers.{L}.";
  auto& n = c.names;
  n.final_norm.weight = "model.embedding_norm.weight";
  n.attn_norm.weight = L + "operator_norm.weight";
  n.mlp_norm.weight = L + "ffn_norm.weight";
  n.o.weight = L + "self_attn.out_proj.weight";
  n.q_norm = L + "self_attn.q_layernorm.weight";
  n.k_norm = L + "self_attn.k_layernorm.weight";
  n.gate.weight = L + "feed_forward.w1.weight";
  n.up.weight = L + "feed_forward.w3.weight";
  n.down.weight = L + "feed_forward.w2.weight";
  n.conv_in = L + "conv.in_proj.weight";
  n.conv_kernel = L + "conv.conv.weight";
  n.conv_out = L + "conv.out_proj.weight";
  return ok_status();
}

/// DeepSeek-V2/V3: MLA everywhere, dense layers below first_k_dense_replace, MoE after.
status deepseek(const config_reader& r, arch_config& c, bool v3) {
  rope_defaults d;
  d.interleaved = v3 ? r.flag("rope_interleave", true) : true;
  // DeepSeek-V2's MLPs (the dense layers and the shared experts, never the routed experts)
  // follow mlp_bias; V3's ignore it
  MPAKT_TRY(llama_family(r, c, d, v3 ? no_bias_fields : mlp_bias_field));
  c.tied_embeddings = r.flag("tie_word_embeddings", false);
  if (r.flag("attention_bias", false)) return invalid("config.json attention_bias true is not supported for " + c.family);
  auto& m = c.mla;
  // null: a plain q_proj (V2-Lite); absent: the config classes' 1536
  MPAKT_TRY(r.positive({"q_lora_rank"}, m.q_lora_rank, r.has_key("q_lora_rank") ? 0 : 1536));
  MPAKT_TRY(r.positive({"kv_lora_rank"}, m.kv_lora_rank));
  MPAKT_TRY(r.positive({"qk_nope_head_dim"}, m.nope_dim));
  MPAKT_TRY(r.positive({"qk_rope_head_dim"}, m.rope_dim));
  MPAKT_TRY(r.positive({"v_head_dim"}, m.v_dim));
  c.head_dim = m.nope_dim + m.rope_dim;
  c.v_head_dim = m.v_dim;
  c.kv_heads = c.heads;  // the latent is expanded to per-head K/V
  auto rope = read_rope(r, c, d, m.rope_dim);
  if (!rope) return std::move(rope).err();
  // Scale (nope+rope)^-0.5, times mscale(factor, mscale_all_dim)² under a scaled rope.
  double scale = 1.0 / std::sqrt(double(c.head_dim));
  auto mscale_all = rope_number(r, "mscale_all_dim");
  auto factor = rope_number(r, "factor");
  if (!rope->scaling_json.empty() && mscale_all && *mscale_all != 0 && factor) {
    const double ms = *factor <= 1 ? 1.0 : 0.1 * *mscale_all * std::log(*factor) + 1.0;
    scale *= ms * ms;
  }
  for (auto& l : c.layer) {
    l.mixer = arch_mixer_kind::mla;
    l.rope = *rope;
    l.attn_scale = scale;
  }
  int first_dense = 0, freq = 1;
  // DeepseekV3Config's defaults differ from V2's: 3 dense layers, scale 2.5, 8 groups keeping 4,
  // one shared expert (V2: two)
  MPAKT_TRY(r.positive({"first_k_dense_replace"}, first_dense, v3 ? 3 : 0));
  MPAKT_TRY(r.positive({"moe_layer_freq"}, freq, 1));
  if (freq != 1) return invalid("config.json moe_layer_freq other than 1 is not supported");
  MPAKT_TRY(r.positive({"n_routed_experts", "num_local_experts", "num_experts"}, c.moe.experts, 0));
  if (c.moe.experts > 0) {
    MPAKT_TRY(r.positive({"num_experts_per_tok"}, c.moe.top_k));
    MPAKT_TRY(r.positive({"moe_intermediate_size"}, c.moe_intermediate));
    for (int i = first_dense; i < c.layers; ++i) c.layer[std::size_t(i)].moe = true;
  }
  c.moe.scale = r.number("routed_scaling_factor", v3 ? 2.5 : 1);
  const std::string method = r.text_or("topk_method", v3 ? "noaux_tc" : "greedy");
  if (v3) {
    if (method != "noaux_tc") return invalid("config.json topk_method '" + method + "' is not supported for deepseek_v3");
    c.moe.sigmoid_scoring = true;
    c.moe.normalize = r.flag("norm_topk_prob", true);
    c.moe.group_top_k = 2;
    c.names.router_bias = "model.layers.{L}.mlp.gate.e_score_correction_bias";
  } else if (method != "greedy" && method != "group_limited_greedy") {
    return invalid("config.json topk_method '" + method + "' is not supported for deepseek_v2");
  }
  if (v3 || method == "group_limited_greedy") {
    MPAKT_TRY(r.positive({"n_group"}, c.moe.n_group, v3 ? 8 : 1));
    MPAKT_TRY(r.positive({"topk_group"}, c.moe.topk_group, v3 ? 4 : 1));
    if (c.moe.experts % c.moe.n_group != 0) return invalid("config.json n_group must divide n_routed_experts");
  }
  const std::string L = "model.layers.{L}.";
  auto& n = c.names;
  n.router = L + "mlp.gate.weight";
  n.expert_gate = L + "mlp.experts.{E}.gate_proj.weight";
  n.expert_up = L + "mlp.experts.{E}.up_proj.weight";
  n.expert_down = L + "mlp.experts.{E}.down_proj.weight";
  int shared = 0;
  MPAKT_TRY(r.positive({"n_shared_experts"}, shared, v3 ? 1 : 2));
  if (shared > 0) {
    c.moe.shared = true;
    n.shared_gate.weight = L + "mlp.shared_experts.gate_proj.weight";
    n.shared_up.weight = L + "mlp.shared_experts.up_proj.weight";
    n.shared_down.weight = L + "mlp.shared_experts.down_proj.weight";
    if (!n.gate.bias.empty()) add_biases({&n.shared_gate, &n.shared_up, &n.shared_down});
  }
  n.q = n.k = n.v = {};
  if (m.q_lora_rank > 0) {
    n.q_a = L + "self_attn.q_a_proj.weight";
    n.q_a_norm = L + "self_attn.q_a_layernorm.weight";
    n.q_b = L + "self_attn.q_b_proj.weight";
  } else {
    n.q.weight = L + "self_attn.q_proj.weight";
  }
  n.kv_a = L + "self_attn.kv_a_proj_with_mqa.weight";
  n.kv_a_norm = L + "self_attn.kv_a_layernorm.weight";
  n.kv_b = L + "self_attn.kv_b_proj.weight";
  return ok_status();
}

}  // namespace

const std::map<std::string, family_fn, std::less<>>& family_table() {
  static const std::map<std::string, family_fn, std::less<>> table = {
      {"llama", [](const config_reader& r, arch_config& c) { return llama(r, c); }},
      {"mistral", mistral},
      {"qwen2", qwen2},
      {"qwen3", qwen3},
      {"gemma", gemma},
      {"gemma2", gemma2},
      {"gemma3_text", gemma3_text},
      {"phi3", phi3},
      {"mixtral", mixtral},
      {"qwen2_moe", qwen2_moe},
      {"qwen3_moe", qwen3_moe},
      {"olmoe", olmoe},
      {"granite", granite},
      {"glm", glm},
      {"cohere", cohere},
      {"cohere2", cohere2},
      {"phi", phi},
      {"gpt2", gpt2},
      {"gpt_neox", gpt_neox},
      {"gptj", gptj},
      {"codegen", codegen},
      {"stablelm", stablelm},
      {"falcon", falcon},
      {"bloom", bloom},
      {"mpt", mpt},
      {"lfm2", lfm2},
      {"deepseek_v2", [](const config_reader& r, arch_config& c) { return deepseek(r, c, false); }},
      {"deepseek_v3", [](const config_reader& r, arch_config& c) { return deepseek(r, c, true); }},
  };
  return table;
}

}  // namespace mpakt::models::arch_detail
