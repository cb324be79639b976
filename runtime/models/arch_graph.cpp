// arch_config → v3 graph JSON. Knows no family names: every choice below reads a field of
// arch_config (runtime/models/arch.hpp), and each emitter writes one part of the decoder
// (embedding, norms, projections, attention, MLA, short conv, MLP, MoE, head, outputs).

#include "runtime/models/arch.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>

namespace mpakt::models {

namespace {

using json_writer = rapidjson::Writer<rapidjson::StringBuffer>;

/// Fills a name template: {L} layer, {E} expert, {H} head.
std::string fill(std::string tpl, int layer, int expert = -1, int head = -1) {
  for (auto [key, value] : {std::pair{"{L}", layer}, {"{E}", expert}, {"{H}", head}}) {
    const std::size_t at = tpl.find(key);
    if (at != std::string::npos) tpl.replace(at, 3, std::to_string(value));
  }
  return tpl;
}

/// Writes the params object of one step.
class param_writer {
 public:
  param_writer(json_writer& w, const arch_graph_options& o) : w_(w), o_(o) {}
  param_writer& i(const char* k, long long v) { w_.Key(k); w_.Int64(v); return *this; }
  param_writer& d(const char* k, double v) { w_.Key(k); w_.Double(v); return *this; }
  param_writer& b(const char* k, bool v) { w_.Key(k); w_.Bool(v); return *this; }
  param_writer& s(const char* k, const std::string& v) { w_.Key(k); w_.String(v.c_str()); return *this; }
  param_writer& shape(const char* k, std::initializer_list<long long> dims) {
    w_.Key(k);
    w_.StartArray();
    for (auto v : dims) w_.Int64(v);
    w_.EndArray();
    return *this;
  }
  /// A JSON object given as text (rope scaling).
  param_writer& raw(const char* k, const std::string& json) {
    rapidjson::Document d;
    d.Parse(json.c_str());
    w_.Key(k);
    d.Accept(w_);
    return *this;
  }
  /// A position-valued param: pos + add, or {"$bind": binding, "add": add} when compiled.
  param_writer& bound(const char* k, const char* binding = "pos", int add = 0) {
    w_.Key(k);
    if (!o_.compiled) { w_.Int64(o_.pos + add); return *this; }
    w_.StartObject();
    w_.Key("$bind");
    w_.String(binding);
    if (add) { w_.Key("add"); w_.Int(add); }
    w_.EndObject();
    return *this;
  }

 private:
  json_writer& w_;
  const arch_graph_options& o_;
};

using params_fn = std::function<void(param_writer&)>;

/// Accumulates a graph: inputs and steps go to separate arrays, so an emitter can ask for
/// a weight at the point it needs it. Not thread-safe; one per graph.
class graph_text {
 public:
  explicit graph_text(const arch_graph_options& o) : o_(o), in_(in_buf_), st_(st_buf_) {
    in_.StartArray();
    st_.StartArray();
  }

  json_writer& inputs() { return in_; }

  /// The value name of a model weight, declaring the input on first use.
  std::string weight(const std::string& file_name) {
    auto [it, added] = weights_.try_emplace(file_name, "w" + std::to_string(weights_.size()));
    if (added) {
      in_.StartObject();
      in_.Key("name"); in_.String(it->second.c_str());
      in_.Key("model"); in_.String(o_.model_id.c_str());
      in_.Key("weight"); in_.String(file_name.c_str());
      in_.EndObject();
    }
    return it->second;
  }
  /// A session tensor input of the given shape, named as in the session.
  std::string session(const std::string& name, long long rows, long long width) {
    in_.StartObject();
    in_.Key("name"); in_.String(name.c_str());
    in_.Key("session"); in_.String(name.c_str());
    in_.Key("shape"); in_.StartArray(); in_.Int64(rows); in_.Int64(width); in_.EndArray();
    in_.EndObject();
    return name;
  }

  /// Appends a step and returns its output name (`out`, or a fresh one from `hint`).
  std::string step(const char* op, std::initializer_list<std::string> in, const params_fn& params = {},
                   const std::string& hint = "", const std::string& out = "") {
    return step_v(op, std::vector<std::string>(in), params, hint, out);
  }
  std::string step_v(const char* op, const std::vector<std::string>& in, const params_fn& params = {},
                     const std::string& hint = "", const std::string& out = "") {
    const std::string name = out.empty() ? fresh(hint.empty() ? op : hint) : out;
    st_.StartObject();
    st_.Key("op"); st_.String(op);
    st_.Key("in"); st_.StartArray(); for (const auto& i : in) st_.String(i.c_str()); st_.EndArray();
    st_.Key("out"); st_.String(name.c_str());
    st_.Key("params");
    st_.StartObject();
    if (params) {
      param_writer p(st_, o_);
      params(p);
    }
    st_.EndObject();
    st_.EndObject();
    return name;
  }

  /// The graph object: {"inputs", "steps", "outputs"}.
  std::string finish(const std::string& output) {
    in_.EndArray();
    st_.EndArray();
    std::string s = "{\"inputs\":";
    s.append(in_buf_.GetString(), in_buf_.GetSize());
    s += ",\"steps\":";
    s.append(st_buf_.GetString(), st_buf_.GetSize());
    s += ",\"outputs\":[\"" + output + "\"]}";
    return s;
  }

 private:
  std::string fresh(const std::string& hint) { return hint + "_" + std::to_string(counter_++); }

  const arch_graph_options& o_;
  rapidjson::StringBuffer in_buf_, st_buf_;
  json_writer in_, st_;
  std::map<std::string, std::string> weights_;
  int counter_ = 0;
};

/// The decoder emitters for one pass.
class decoder {
 public:
  decoder(const arch_config& c, const arch_graph_options& o) : c_(c), o_(o), g_(o), t_(o.tokens) {}

  std::string build();

 private:
  // ---- small pieces ----
  std::string w(const std::string& tpl, int layer = -1, int expert = -1, int head = -1) {
    return g_.weight(fill(tpl, layer, expert, head));
  }
  std::string reshape(const std::string& x, long long rows, long long cols) {
    return g_.step("reshape", {x}, [&](param_writer& p) { p.shape("shape", {rows, cols}); }, "rs");
  }
  std::string slice_cols(const std::string& x, long long start, long long length) {
    return g_.step("slice", {x}, [&](param_writer& p) { p.i("start", start).i("length", length).i("axis", -1); }, "sl");
  }
  std::string slice_rows(const std::string& x, long long start, long long length) {
    return g_.step("slice", {x}, [&](param_writer& p) { p.i("start", start).i("length", length); }, "sl");
  }
  std::string concat_cols(const std::string& a, const std::string& b) {
    return g_.step("concat", {a, b}, [](param_writer& p) { p.i("axis", -1); }, "cat");
  }
  std::string scale(const std::string& x, double factor) {
    return g_.step("scale", {x}, [&](param_writer& p) { p.d("factor", factor); }, "sc");
  }
  /// A shared zeros tensor (read-only uses: LayerNorm betas).
  std::string zeros(long long width) {
    auto it = zeros_.find(width);
    if (it != zeros_.end()) return it->second;
    return zeros_[width] = g_.step("zeros", {}, [&](param_writer& p) { p.shape("shape", {width}); }, "zeros");
  }
  /// A tensor of ones, made in the graph (sigmoid(0) · 2 is exactly 1) so that decode graphs
  /// need no uploaded data and stay eligible for the worker-side loop.
  std::string ones(long long rows, long long cols) {
    const auto key = std::pair{rows, cols};
    auto it = ones_.find(key);
    if (it != ones_.end()) return it->second;
    auto z = g_.step("zeros", {}, [&](param_writer& p) {
      if (rows > 0) p.shape("shape", {rows, cols});
      else p.shape("shape", {cols});
    }, "zeros");
    return ones_[key] = scale(g_.step("sigmoid", {z}), 2.0);
  }
  /// x·Wᵀ (+ b) for an [out, in] weight, x·W for GPT-2's [in, out].
  std::string linear(const std::string& x, const arch_linear_names& n, int layer, const std::string& weight_value = "") {
    const std::string wv = weight_value.empty() ? w(n.weight, layer) : weight_value;
    if (n.bias.empty()) return g_.step("matmul", {x, wv}, [&](param_writer& p) { p.b("transB", !n.in_out); }, "mm");
    return g_.step("linear", {x, wv, w(n.bias, layer)}, [&](param_writer& p) { p.b("transB", !n.in_out); }, "lin");
  }
  std::string matmul_t(const std::string& x, const std::string& weight_value) {
    return g_.step("matmul", {x, weight_value}, [](param_writer& p) { p.b("transB", true); }, "mm");
  }
  std::string norm(const std::string& x, const arch_norm_names& n, int layer, long long width);

  // ---- parts of the decoder ----
  std::string embed();
  std::string layer(int l, const std::string& x);
  std::string mixer(int l, const std::string& h);
  std::string attention(int l, const std::string& h);
  std::string mla(int l, const std::string& h);
  std::string short_conv(int l, const std::string& h);
  struct qkv_values { std::string q, k, v; };
  qkv_values project_qkv(int l, const std::string& h);
  std::string qk_norm(int l, const std::string& x, const std::string& weight_tpl, int heads);
  std::string rope(const std::string& x, const arch_rope& r, int head_width);
  std::string attend(int l, const std::string& q, const std::string& k, const std::string& v);
  std::string ffn(int l, const std::string& h);
  std::string dense_mlp(int l, const std::string& h, const arch_linear_names& gate, const arch_linear_names& up,
                        const arch_linear_names& down);
  /// The element-wise op of the config's activation.
  const char* activation_op() const {
    switch (c_.activation) {
      case arch_activation::silu: return "silu";
      case arch_activation::gelu_tanh: return "gelu";
      case arch_activation::gelu_exact: return "gelu_exact";
      case arch_activation::gelu_quick: return "gelu_quick";
      case arch_activation::relu: return "relu";
    }
    return "silu";
  }
  std::string moe(int l, const std::string& h);
  std::string head(const std::string& x);
  std::string outputs(const std::string& logits);
  std::string repeat_cols(const std::string& x, int copies);

  const arch_config& c_;
  const arch_graph_options& o_;
  graph_text g_;
  const long long t_;
  std::map<long long, std::string> zeros_;
  std::map<std::pair<long long, long long>, std::string> ones_;
  std::string hist_;  ///< the history after this pass's cache_write, when kept
};

std::string decoder::norm(const std::string& x, const arch_norm_names& n, int layer, long long width) {
  const std::string gamma = w(n.weight, layer);
  if (c_.norm == arch_norm_kind::rms)
    return g_.step("rmsnorm", {x, gamma}, [&](param_writer& p) {
      p.d("eps", c_.norm_eps);
      if (c_.norm_weight_offset != 0) p.d("weightOffset", c_.norm_weight_offset);
    }, "rms");
  const std::string beta = n.bias.empty() ? zeros(width) : w(n.bias, layer);
  return g_.step("layernorm", {x, gamma, beta}, [&](param_writer& p) { p.d("eps", c_.norm_eps); }, "ln");
}

std::string decoder::embed() {
  std::string e = g_.step("embedding", {"ids", w(c_.names.embed)}, {}, "emb");
  if (c_.embed_scale != 1) e = scale(e, c_.embed_scale);
  if (!c_.names.pos_embed.empty()) {  // learned positions: rows pos .. pos+T-1 of the table
    const std::string rows = g_.step("slice", {w(c_.names.pos_embed)}, [&](param_writer& p) {
      p.bound("start").i("length", t_);
    }, "wpe");
    e = g_.step("add", {e, rows}, {}, "emb");
  }
  if (!c_.names.embed_norm.weight.empty()) e = norm(e, c_.names.embed_norm, -1, c_.hidden);
  return e;
}

std::string decoder::layer(int l, const std::string& x) {
  const auto& n = c_.names;
  const std::string h = norm(x, n.attn_norm, l, c_.hidden);
  if (c_.block == arch_block_kind::parallel) {
    const std::string hm = n.mlp_norm.weight.empty() ? h : norm(x, n.mlp_norm, l, c_.hidden);
    const std::string a = mixer(l, h);
    const std::string m = ffn(l, hm);
    return g_.step("add", {g_.step("add", {x, a}, {}, "res"), m}, {}, "res");
  }
  std::string a = mixer(l, h);
  if (!n.post_attn_norm.weight.empty()) a = norm(a, n.post_attn_norm, l, c_.hidden);
  if (c_.residual_scale != 1) a = scale(a, c_.residual_scale);
  const std::string x1 = g_.step("add", {x, a}, {}, "res");
  std::string m = ffn(l, norm(x1, n.mlp_norm, l, c_.hidden));
  if (!n.post_mlp_norm.weight.empty()) m = norm(m, n.post_mlp_norm, l, c_.hidden);
  if (c_.residual_scale != 1) m = scale(m, c_.residual_scale);
  return g_.step("add", {x1, m}, {}, "res");
}

std::string decoder::mixer(int l, const std::string& h) {
  switch (c_.layer[std::size_t(l)].mixer) {
    case arch_mixer_kind::attention: return attention(l, h);
    case arch_mixer_kind::mla: return mla(l, h);
    case arch_mixer_kind::short_conv: return short_conv(l, h);
  }
  return h;
}

decoder::qkv_values decoder::project_qkv(int l, const std::string& h) {
  const auto& n = c_.names;
  const long long hd = c_.head_dim, nh = c_.heads, nkv = c_.kv_heads;
  if (c_.qkv_layout == arch_qkv_layout::separate)
    return {linear(h, n.q, l), linear(h, n.k, l), linear(h, n.v, l)};
  const std::string y = linear(h, n.qkv, l);
  switch (c_.qkv_layout) {
    case arch_qkv_layout::blocked:
      return {slice_cols(y, 0, nh * hd), slice_cols(y, nh * hd, nkv * hd), slice_cols(y, (nh + nkv) * hd, nkv * hd)};
    case arch_qkv_layout::per_head: {  // row t·nh + h holds head h's [q | k | v]
      const std::string r = reshape(y, t_ * nh, 3 * hd);
      return {reshape(slice_cols(r, 0, hd), t_, nh * hd), reshape(slice_cols(r, hd, hd), t_, nh * hd),
              reshape(slice_cols(r, 2 * hd, hd), t_, nh * hd)};
    }
    case arch_qkv_layout::grouped: {  // row t·g + j holds group j's [q … q | k | v]
      const long long per = nh / nkv;
      const std::string r = reshape(y, t_ * nkv, (per + 2) * hd);
      return {reshape(slice_cols(r, 0, per * hd), t_, nh * hd), reshape(slice_cols(r, per * hd, hd), t_, nkv * hd),
              reshape(slice_cols(r, (per + 1) * hd, hd), t_, nkv * hd)};
    }
    case arch_qkv_layout::codegen: {  // row t·mp + b holds block b's [q | v | k]
      const long long mp = c_.qkv_blocks, local = nh * hd / mp;
      const std::string r = reshape(y, t_ * mp, 3 * local);
      return {reshape(slice_cols(r, 0, local), t_, nh * hd), reshape(slice_cols(r, 2 * local, local), t_, nh * hd),
              reshape(slice_cols(r, local, local), t_, nh * hd)};
    }
    case arch_qkv_layout::separate: break;
  }
  return {};
}

std::string decoder::qk_norm(int l, const std::string& x, const std::string& weight_tpl, int heads) {
  const long long hd = c_.head_dim;
  switch (c_.qk_norm) {
    case arch_qk_norm_kind::none: return x;
    case arch_qk_norm_kind::rms_head:
    case arch_qk_norm_kind::rms_full:
      return g_.step("rmsnorm", {x, w(weight_tpl, l)}, [&](param_writer& p) {
        p.d("eps", c_.norm_eps);
        if (c_.qk_norm == arch_qk_norm_kind::rms_head) p.i("groupSize", hd);
        if (c_.qk_norm_offset) p.d("weightOffset", 1);
      }, "qkn");
    case arch_qk_norm_kind::layer_head: {
      // A LayerNorm per head with unit gamma, then each head's own weight row.
      const std::string normed = g_.step("layernorm", {reshape(x, t_ * heads, hd), ones(0, hd), zeros(hd)},
                                         [&](param_writer& p) { p.d("eps", c_.norm_eps); }, "qkn");
      std::string gamma;
      if (weight_tpl.find("{H}") != std::string::npos) {  // one tensor per head
        gamma = w(weight_tpl, l, -1, 0);
        for (int h = 1; h < heads; ++h) gamma = g_.step("concat", {gamma, w(weight_tpl, l, -1, h)}, {}, "gamma");
      } else {  // one [heads, hd] tensor
        gamma = g_.step("reshape", {w(weight_tpl, l)}, [&](param_writer& p) { p.shape("shape", {heads * hd}); }, "gamma");
      }
      return g_.step("mul", {reshape(normed, t_, heads * hd), gamma}, {}, "qkn");
    }
  }
  return x;
}

std::string decoder::rope(const std::string& x, const arch_rope& r, int head_width) {
  return g_.step("rope", {x}, [&](param_writer& p) {
    p.i("headDim", head_width).d("base", r.theta).bound("offset");
    if (r.rotary_dim != head_width) p.i("rotaryDim", r.rotary_dim);
    if (r.interleaved) p.b("interleaved", true);
    if (!r.scaling_json.empty()) p.raw("scaling", r.scaling_json);
  }, "rope");
}

/// Writes k and v into the layer's caches (when kept) and attends.
std::string decoder::attend(int l, const std::string& q, const std::string& k, const std::string& v) {
  const auto& lay = c_.layer[std::size_t(l)];
  std::string keys = k, values = v;
  if (o_.use_cache) {
    const std::string s = std::to_string(l);
    const std::string kc = g_.session("k" + s, o_.cache_rows, (long long)c_.kv_heads * c_.head_dim);
    const std::string vc = g_.session("v" + s, o_.cache_rows, (long long)c_.kv_heads * c_.v_head_dim);
    keys = g_.step("cache_write", {kc, k}, [](param_writer& p) { p.bound("offset"); }, "kc");
    values = g_.step("cache_write", {vc, v}, [](param_writer& p) { p.bound("offset"); }, "vc");
  }
  return g_.step("attention", {q, keys, values}, [&](param_writer& p) {
    p.i("heads", c_.heads).i("headDim", c_.head_dim).i("kvHeads", c_.kv_heads).b("causal", true);
    if (c_.v_head_dim != c_.head_dim) p.i("vHeadDim", c_.v_head_dim);
    if (o_.use_cache) p.bound("posOffset");
    if (lay.attn_scale != 0) p.d("scale", lay.attn_scale);
    if (c_.attn_softcap != 0) p.d("softcap", c_.attn_softcap);
    if (lay.window > 0) p.i("window", lay.window);
    if (c_.alibi) p.b("alibi", true);
  }, "att");
}

std::string decoder::attention(int l, const std::string& h) {
  const auto& lay = c_.layer[std::size_t(l)];
  auto [q, k, v] = project_qkv(l, h);
  q = qk_norm(l, q, c_.names.q_norm, c_.heads);
  k = qk_norm(l, k, c_.names.k_norm, c_.kv_heads);
  if (lay.rope.enabled) {
    q = rope(q, lay.rope, c_.head_dim);
    k = rope(k, lay.rope, c_.head_dim);
  }
  return linear(attend(l, q, k, v), c_.names.o, l);
}

/// `copies` copies of x side by side on the feature axis, by doubling.
std::string decoder::repeat_cols(const std::string& x, int copies) {
  std::string out, power = x;
  for (int n = copies; n > 0; n >>= 1) {
    if (n & 1) out = out.empty() ? power : concat_cols(out, power);
    if (n > 1) power = concat_cols(power, power);
  }
  return out;
}

/// DeepSeek MLA with the latent expanded to per-head K/V: each head's key is its own no-rope
/// part next to the one shared roped key; rope rotates only the last rope_dim channels.
std::string decoder::mla(int l, const std::string& h) {
  const auto& m = c_.mla;
  const auto& n = c_.names;
  const auto& lay = c_.layer[std::size_t(l)];
  const long long nh = c_.heads, dn = m.nope_dim, dr = m.rope_dim, dv = m.v_dim, qd = dn + dr;
  auto latent_norm = [&](const std::string& x, const std::string& tpl) {
    return g_.step("rmsnorm", {x, w(tpl, l)}, [&](param_writer& p) { p.d("eps", m.latent_eps); }, "rms");
  };
  // Queries: per head [nope | rope], the rope part rotated.
  std::string q;
  if (!n.q_a.empty()) q = matmul_t(latent_norm(matmul_t(h, w(n.q_a, l)), n.q_a_norm), w(n.q_b, l));
  else q = matmul_t(h, w(n.q.weight, l));
  const std::string qf = reshape(q, t_ * nh, qd);
  const std::string q_rot = reshape(rope(reshape(slice_cols(qf, dn, dr), t_, nh * dr), lay.rope, int(dr)), t_ * nh, dr);
  const std::string qc = reshape(concat_cols(slice_cols(qf, 0, dn), q_rot), t_, nh * qd);
  // Keys and values from the normalised latent; the shared rope key is repeated per head.
  const std::string ckv = matmul_t(h, w(n.kv_a, l));
  const std::string lat = latent_norm(slice_cols(ckv, 0, m.kv_lora_rank), n.kv_a_norm);
  const std::string k_pe = rope(slice_cols(ckv, m.kv_lora_rank, dr), lay.rope, int(dr));
  const std::string kv = reshape(matmul_t(lat, w(n.kv_b, l)), t_ * nh, dn + dv);
  const std::string k_rep = reshape(repeat_cols(k_pe, int(nh)), t_ * nh, dr);
  const std::string k = reshape(concat_cols(slice_cols(kv, 0, dn), k_rep), t_, nh * qd);
  const std::string v = reshape(slice_cols(kv, dn, dv), t_, nh * dv);
  return matmul_t(attend(l, qc, k, v), w(n.o.weight, l));
}

std::string decoder::short_conv(int l, const std::string& h) {
  const auto& n = c_.names;
  const long long rows = c_.conv_kernel - 1;
  // The state is advanced in place: the session's, or a fresh zeros tensor for a stateless pass.
  const std::string state = o_.use_cache ? g_.session("conv" + std::to_string(l), rows, c_.hidden)
                                         : g_.step("zeros", {}, [&](param_writer& p) { p.shape("shape", {rows, (long long)c_.hidden}); }, "state");
  return g_.step("short_conv", {h, w(n.conv_in, l), w(n.conv_kernel, l), w(n.conv_out, l), state}, {}, "conv");
}

std::string decoder::dense_mlp(int l, const std::string& h, const arch_linear_names& gate, const arch_linear_names& up,
                               const arch_linear_names& down) {
  if (!c_.gated_mlp) {
    const std::string u = linear(h, up, l);
    return linear(g_.step(activation_op(), {u}, {}, "act"), down, l);
  }
  std::string gv, uv;
  if (!gate.weight.empty()) {
    gv = linear(h, gate, l);
    uv = linear(h, up, l);
  } else {  // fused [gate | up] rows, split on the weight itself
    const std::string wgu = w(c_.names.gate_up.weight, l);
    gv = matmul_t(h, slice_rows(wgu, 0, c_.intermediate));
    uv = matmul_t(h, slice_rows(wgu, c_.intermediate, c_.intermediate));
  }
  std::string act;
  switch (c_.activation) {
    case arch_activation::silu: act = g_.step("swiglu", {gv, uv}, {}, "act"); break;
    case arch_activation::gelu_tanh: act = g_.step("geglu", {gv, uv}, {}, "act"); break;
    default: act = g_.step("mul", {g_.step(activation_op(), {gv}), uv}, {}, "act"); break;
  }
  return linear(act, down, l);
}

std::string decoder::moe(int l, const std::string& h) {
  const auto& n = c_.names;
  const auto& m = c_.moe;
  std::vector<std::string> in{h, matmul_t(h, w(n.router, l))};
  if (!n.router_bias.empty()) in.push_back(w(n.router_bias, l));
  for (int e = 0; e < m.experts; ++e)
    for (const auto* tpl : {&n.expert_gate, &n.expert_up, &n.expert_down}) in.push_back(w(*tpl, l, e));
  std::string y = g_.step_v("moe", in, [&](param_writer& p) {
    p.i("topK", m.top_k).s("scoring", m.sigmoid_scoring ? "sigmoid" : "softmax").b("normalize", m.normalize);
    if (m.scale != 1) p.d("scale", m.scale);
    if (m.n_group > 1) p.i("nGroup", m.n_group).i("topKGroup", m.topk_group).i("groupTopK", m.group_top_k);
    if (!n.router_bias.empty()) p.b("selectionBias", true);
    p.s("layout", "separate").s("activation", c_.activation == arch_activation::silu ? "silu" : "gelu");
  }, "moe");
  if (!m.shared) return y;
  std::string s = dense_mlp(l, h, n.shared_gate, n.shared_up, n.shared_down);
  if (m.shared_gated) {  // a per-token scalar gate, spread across the row by a [T,1]·[1,C] product
    const std::string gate = g_.step("sigmoid", {matmul_t(h, w(n.shared_expert_gate, l))}, {}, "sg");
    const std::string spread = g_.step("matmul", {gate, ones(1, c_.hidden)}, {}, "sg");
    s = g_.step("mul", {s, spread}, {}, "shared");
  }
  return g_.step("add", {y, s}, {}, "moe");
}

std::string decoder::ffn(int l, const std::string& h) {
  if (c_.layer[std::size_t(l)].moe) return moe(l, h);
  return dense_mlp(l, h, c_.names.gate, c_.names.up, c_.names.down);
}

std::string decoder::head(const std::string& x_all) {
  const auto& n = c_.names;
  const std::string x = o_.last_only && o_.tokens > 1 ? slice_rows(x_all, o_.tokens - 1, 1) : x_all;
  const std::string hn = norm(x, n.final_norm, -1, c_.hidden);
  const bool tied = n.lm_head.weight.empty();
  const bool post = c_.logit_scale != 1 || c_.final_softcap != 0;
  const std::string out = post ? "" : "logits";
  const std::string table = w(tied ? n.embed : n.lm_head.weight);
  std::string logits;
  if (n.lm_head.bias.empty()) logits = g_.step("matmul", {hn, table}, [](param_writer& p) { p.b("transB", true); }, "", out);
  else logits = g_.step("linear", {hn, table, w(n.lm_head.bias)}, [](param_writer& p) { p.b("transB", true); }, "", out);
  if (c_.logit_scale != 1)
    logits = g_.step("scale", {logits}, [&](param_writer& p) { p.d("factor", c_.logit_scale); }, "",
                     c_.final_softcap != 0 ? "" : "logits");
  if (c_.final_softcap != 0)
    logits = g_.step("softcap", {logits}, [&](param_writer& p) { p.d("cap", c_.final_softcap); }, "", "logits");
  return logits;
}

/// The chosen output: logits, argmax, one sample step, or one penalised sample step per row.
std::string decoder::outputs(const std::string& logits) {
  if (o_.sample && !hist_.empty()) {
    // Row r penalises the history up to its own position pos + r, exactly as a one-token
    // step there would; the rows' tokens are concatenated in order.
    // (last_only: the one row is the last fed, at pos + tokens - 1)
    const int first = o_.last_only ? o_.tokens - 1 : 0;
    const bool one = first + 1 == o_.tokens;
    std::string toks;
    for (int r = first; r < o_.tokens; ++r) {
      const std::string row = one ? logits : slice_rows(logits, r, 1);
      const std::string tok = g_.step("sample", {row, hist_}, [&](param_writer& p) {
        p.d("temperature", 0.0).d("repetitionPenalty", o_.repetition_penalty);
        p.bound("step", "step", r);  // generate binds step = pos (decisions.md)
        p.bound("penaltyEnd", "pos", r + 1);
      }, "", one ? "tok" : "");
      toks = r == first ? tok : g_.step("concat", {toks, tok}, {}, "", r + 1 == o_.tokens ? "tok" : "");
    }
    return "tok";
  }
  if (o_.sample) {
    g_.step("sample", {logits}, [&](param_writer& p) {
      p.d("temperature", 0.0);
      if (o_.compiled) {
        if (o_.last_only && o_.tokens > 1) p.bound("step", "pos", o_.tokens - 1);  // the row sampled sits there
        else p.bound("step", "pos");
      }
    }, "", "tok");
    return "tok";
  }
  if (o_.argmax) {
    g_.step("argmax", {logits}, {}, "", "tok");
    return "tok";
  }
  return logits;
}

std::string decoder::build() {
  auto& in = g_.inputs();
  in.StartObject();
  in.Key("name"); in.String("ids");
  in.Key("shape"); in.StartArray(); in.Int64(t_); in.EndArray();
  if (o_.compiled) { in.Key("bind"); in.String("ids"); }
  else { in.Key("data"); in.StartArray(); for (int id : o_.ids) in.Int(id); in.EndArray(); }
  in.EndObject();
  if (o_.use_cache && o_.repetition_penalty > 0) {
    const std::string hist = g_.session("hist", o_.cache_rows, 1);
    hist_ = g_.step("cache_write", {hist, reshape("ids", t_, 1)}, [](param_writer& p) { p.bound("offset"); }, "histw");
  }
  std::string x = embed();
  for (int l = 0; l < c_.layers; ++l) x = layer(l, x);
  return g_.finish(outputs(head(x)));
}

}  // namespace

std::string arch_graph(const arch_config& c, const arch_graph_options& o) { return decoder(c, o).build(); }

std::string arch_cache_graph(const arch_config& c, int cache_rows, bool history, dtype kv) {
  rapidjson::StringBuffer b;
  json_writer wr(b);
  struct alloc {
    std::string name;
    std::pair<long long, long long> shape;
    bool kv = false;
  };
  std::vector<alloc> tensors;
  for (int l = 0; l < c.layers; ++l) {
    const std::string s = std::to_string(l);
    if (c.layer[std::size_t(l)].mixer == arch_mixer_kind::short_conv) {
      tensors.push_back({"conv" + s, {c.conv_kernel - 1, c.hidden}});
    } else {
      tensors.push_back({"k" + s, {cache_rows, (long long)c.kv_heads * c.head_dim}, true});
      tensors.push_back({"v" + s, {cache_rows, (long long)c.kv_heads * c.v_head_dim}, true});
    }
  }
  if (history) tensors.push_back({"hist", {cache_rows, 1}});
  wr.StartObject();
  wr.Key("inputs"); wr.StartArray(); wr.EndArray();
  wr.Key("steps");
  wr.StartArray();
  for (const auto& t : tensors) {
    wr.StartObject();
    wr.Key("op"); wr.String("zeros");
    wr.Key("in"); wr.StartArray(); wr.EndArray();
    wr.Key("out"); wr.String(t.name.c_str());
    wr.Key("params"); wr.StartObject();
    wr.Key("shape"); wr.StartArray(); wr.Int64(t.shape.first); wr.Int64(t.shape.second); wr.EndArray();
    if (t.kv && kv != dtype::f32) { wr.Key("dtype"); wr.String(std::string(dtype_name(kv)).c_str()); }
    wr.EndObject();
    wr.EndObject();
  }
  wr.EndArray();
  wr.Key("retain");
  wr.StartObject();
  for (const auto& t : tensors) { wr.Key(t.name.c_str()); wr.String(t.name.c_str()); }
  wr.EndObject();
  wr.EndObject();
  return std::string(b.GetString(), b.GetSize());
}

}  // namespace mpakt::models
