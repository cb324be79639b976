#include "runtime/models/llama.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <vector>

namespace mpakt::models {

namespace {

using json_writer = rapidjson::Writer<rapidjson::StringBuffer>;

result<int> get_int(const rapidjson::Document& d, const char* key, std::optional<int> fallback = std::nullopt) {
  auto it = d.FindMember(key);
  if (it == d.MemberEnd() || it->value.IsNull()) {
    if (fallback) return *fallback;
    return invalid(std::string("config.json lacks ") + key);
  }
  if (!it->value.IsInt() || it->value.GetInt() <= 0) return invalid(std::string("config.json ") + key + " must be a positive integer");
  return it->value.GetInt();
}

double get_double(const rapidjson::Document& d, const char* key, double fallback) {
  auto it = d.FindMember(key);
  return it != d.MemberEnd() && it->value.IsNumber() ? it->value.GetDouble() : fallback;
}

bool get_bool(const rapidjson::Document& d, const char* key, bool fallback) {
  auto it = d.FindMember(key);
  return it != d.MemberEnd() && it->value.IsBool() ? it->value.GetBool() : fallback;
}

}  // namespace

result<llama_config> parse_llama_config(std::string_view text) {
  rapidjson::Document d;
  d.Parse(text.data(), text.size());
  if (d.HasParseError() || !d.IsObject()) return invalid("config.json is not a JSON object");
  auto mt = d.FindMember("model_type");
  if (mt == d.MemberEnd() || !mt->value.IsString()) return invalid("config.json lacks model_type");
  const std::string model_type = mt->value.GetString();
  if (model_type != "llama") return invalid("config.json model_type " + model_type + " is not a Llama-family model this builder maps");
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (get_bool(d, key, false)) return invalid(std::string("config.json ") + key + " true is not mapped by this builder");
  auto act = d.FindMember("hidden_act");
  if (act != d.MemberEnd() && (!act->value.IsString() || std::string(act->value.GetString()) != "silu"))
    return invalid("config.json hidden_act must be silu for a Llama model");

  llama_config c;
  auto need = [&](const char* key, int& out, std::optional<int> fb = std::nullopt) -> status {
    auto v = get_int(d, key, fb);
    if (!v) return std::move(v).err();
    out = *v;
    return {};
  };
  MPAKT_TRY(need("hidden_size", c.hidden));
  MPAKT_TRY(need("intermediate_size", c.intermediate));
  MPAKT_TRY(need("num_hidden_layers", c.layers));
  MPAKT_TRY(need("num_attention_heads", c.heads));
  MPAKT_TRY(need("num_key_value_heads", c.kv_heads, c.heads));
  MPAKT_TRY(need("vocab_size", c.vocab));
  if (c.hidden % c.heads != 0) return invalid("config.json hidden_size is not a multiple of num_attention_heads");
  MPAKT_TRY(need("head_dim", c.head_dim, c.hidden / c.heads));
  if (c.heads % c.kv_heads != 0) return invalid("config.json num_key_value_heads must divide num_attention_heads");
  c.rms_eps = get_double(d, "rms_norm_eps", 1e-6);
  c.rope_theta = get_double(d, "rope_theta", 10000);
  c.tied_embeddings = get_bool(d, "tie_word_embeddings", false);
  auto rs = d.FindMember("rope_scaling");
  if (rs != d.MemberEnd() && rs->value.IsObject()) {
    rapidjson::StringBuffer b;
    json_writer w(b);
    rs->value.Accept(w);
    c.rope_scaling_json.assign(b.GetString(), b.GetSize());
  }
  return c;
}

namespace {

/// Writes graph JSON for the decoder. Small helper methods keep the step list readable.
class graph_writer {
 public:
  graph_writer(const llama_config& c, const llama_graph_options& o) : c_(c), o_(o), w_(buf_) {}

  void weight(const std::string& name, const std::string& file_name) {
    w_.StartObject();
    key("name"); str(name);
    key("model"); str(o_.model_id);
    key("weight"); str(file_name);
    w_.EndObject();
  }
  void session_input(const std::string& name, int rows, int width) {
    w_.StartObject();
    key("name"); str(name);
    key("session"); str(name);
    key("shape"); w_.StartArray(); w_.Int(rows); w_.Int(width); w_.EndArray();
    w_.EndObject();
  }
  /// A step: op, inputs, output, then `params` writes its params (may be empty).
  template <class F>
  void step(const char* op, std::initializer_list<std::string> in, const std::string& out, F params) {
    w_.StartObject();
    key("op"); str(op);
    key("in"); w_.StartArray(); for (const auto& i : in) str(i); w_.EndArray();
    key("out"); str(out);
    key("params"); w_.StartObject(); params(); w_.EndObject();
    w_.EndObject();
  }
  void step(const char* op, std::initializer_list<std::string> in, const std::string& out) { step(op, in, out, [] {}); }
  /// A position-valued param: a literal, or {"$bind": "pos"} in a compiled template.
  void pos_param(const char* name) {
    key(name);
    if (o_.compiled) { w_.StartObject(); key("$bind"); str("pos"); w_.EndObject(); }
    else w_.Int(o_.pos);
  }
  void key(const char* k) { w_.Key(k); }
  void str(const std::string& s) { w_.String(s.c_str(), rapidjson::SizeType(s.size())); }
  json_writer& w() { return w_; }
  std::string text() const { return std::string(buf_.GetString(), buf_.GetSize()); }

 private:
  const llama_config& c_;
  const llama_graph_options& o_;
  rapidjson::StringBuffer buf_;
  json_writer w_;
};

}  // namespace

std::string llama_graph(const llama_config& c, const llama_graph_options& o) {
  graph_writer g(c, o);
  auto& w = g.w();
  const int kvw = c.kv_heads * c.head_dim;
  const std::string L = "model.layers.";
  w.StartObject();
  g.key("inputs");
  w.StartArray();
  w.StartObject();
  g.key("name"); g.str("ids");
  g.key("shape"); w.StartArray(); w.Int(o.tokens); w.EndArray();
  if (o.compiled) { g.key("bind"); g.str("ids"); }
  else { g.key("data"); w.StartArray(); for (int id : o.ids) w.Int(id); w.EndArray(); }
  w.EndObject();
  g.weight("embed", "model.embed_tokens.weight");
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = L + std::to_string(l) + ".";
    const std::string s = std::to_string(l);
    g.weight("ln1_" + s, p + "input_layernorm.weight");
    g.weight("wq" + s, p + "self_attn.q_proj.weight");
    g.weight("wk" + s, p + "self_attn.k_proj.weight");
    g.weight("wv" + s, p + "self_attn.v_proj.weight");
    g.weight("wo" + s, p + "self_attn.o_proj.weight");
    g.weight("ln2_" + s, p + "post_attention_layernorm.weight");
    g.weight("wg" + s, p + "mlp.gate_proj.weight");
    g.weight("wu" + s, p + "mlp.up_proj.weight");
    g.weight("wd" + s, p + "mlp.down_proj.weight");
    if (o.use_cache) {
      g.session_input("k" + s, o.cache_rows, kvw);
      g.session_input("v" + s, o.cache_rows, kvw);
    }
  }
  const bool history = o.use_cache && o.repetition_penalty > 0;
  if (history) g.session_input("hist", o.cache_rows, 1);
  g.weight("norm", "model.norm.weight");
  if (!c.tied_embeddings) g.weight("lm_head", "lm_head.weight");
  w.EndArray();

  g.key("steps");
  w.StartArray();
  auto eps = [&] { g.key("eps"); w.Double(c.rms_eps); };
  auto transb = [&] { g.key("transB"); w.Bool(true); };
  auto rope = [&] {
    g.key("headDim"); w.Int(c.head_dim);
    g.key("base"); w.Double(c.rope_theta);
    g.pos_param("offset");
    if (!c.rope_scaling_json.empty()) {
      rapidjson::Document sd;
      sd.Parse(c.rope_scaling_json.c_str());
      g.key("scaling");
      sd.Accept(w);
    }
  };
  if (history) {
    g.step("reshape", {"ids"}, "ids_rows", [&] { g.key("shape"); w.StartArray(); w.Int(o.tokens); w.Int(1); w.EndArray(); });
    g.step("cache_write", {"hist", "ids_rows"}, "histw", [&] { g.pos_param("offset"); });
  }
  g.step("embedding", {"ids", "embed"}, "h0");
  std::string h = "h0";
  for (int l = 0; l < c.layers; ++l) {
    const std::string s = std::to_string(l);
    g.step("rmsnorm", {h, "ln1_" + s}, "a" + s, eps);
    g.step("matmul", {"a" + s, "wq" + s}, "q" + s, transb);
    g.step("matmul", {"a" + s, "wk" + s}, "k" + s + "_", transb);
    g.step("matmul", {"a" + s, "wv" + s}, "v" + s + "_", transb);
    g.step("rope", {"q" + s}, "qr" + s, rope);
    g.step("rope", {"k" + s + "_"}, "kr" + s, rope);
    std::string keys = "kr" + s, values = "v" + s + "_";
    if (o.use_cache) {
      g.step("cache_write", {"k" + s, "kr" + s}, "kc" + s, [&] { g.pos_param("offset"); });
      g.step("cache_write", {"v" + s, "v" + s + "_"}, "vc" + s, [&] { g.pos_param("offset"); });
      keys = "kc" + s;
      values = "vc" + s;
    }
    g.step("attention", {"qr" + s, keys, values}, "att" + s, [&] {
      g.key("heads"); w.Int(c.heads);
      g.key("headDim"); w.Int(c.head_dim);
      g.key("kvHeads"); w.Int(c.kv_heads);
      g.key("causal"); w.Bool(true);
      if (o.use_cache) g.pos_param("posOffset");
    });
    g.step("matmul", {"att" + s, "wo" + s}, "o" + s, transb);
    g.step("add", {h, "o" + s}, "r" + s);
    g.step("rmsnorm", {"r" + s, "ln2_" + s}, "m" + s, eps);
    g.step("matmul", {"m" + s, "wg" + s}, "g" + s, transb);
    g.step("matmul", {"m" + s, "wu" + s}, "u" + s, transb);
    g.step("swiglu", {"g" + s, "u" + s}, "sw" + s);
    g.step("matmul", {"sw" + s, "wd" + s}, "d" + s, transb);
    h = "h" + std::to_string(l + 1);
    g.step("add", {"r" + s, "d" + s}, h);
  }
  g.step("rmsnorm", {h, "norm"}, "hn", eps);
  g.step("matmul", {"hn", c.tied_embeddings ? "embed" : "lm_head"}, "logits", transb);
  // A param worth binding + add ({"$bind": binding, "add": add} when compiled, else pos + add).
  auto bound_plus = [&](const char* name, const char* binding, int add) {
    g.key(name);
    if (!o.compiled) { w.Int(o.pos + add); return; }
    w.StartObject(); g.key("$bind"); g.str(binding); if (add) { g.key("add"); w.Int(add); } w.EndObject();
  };
  if (o.sample && history) {
    // One sample step per row: row r penalises the history up to its own position pos + r,
    // exactly as a one-token step there would.
    for (int r = 0; r < o.tokens; ++r) {
      const std::string row = "logits_" + std::to_string(r), tok = o.tokens == 1 ? "tok" : "tok_" + std::to_string(r);
      if (o.tokens > 1)
        g.step("slice", {"logits"}, row, [&] { g.key("start"); w.Int(r); g.key("length"); w.Int(1); });
      g.step("sample", {o.tokens > 1 ? row : "logits", "histw"}, tok, [&] {
        g.key("temperature"); w.Double(0.0);
        g.key("repetitionPenalty"); w.Double(o.repetition_penalty);
        bound_plus("step", "step", r);  // generate binds step = pos (decisions.md)
        bound_plus("penaltyEnd", "pos", r + 1);
      });
      if (r == 1) g.step("concat", {"tok_0", tok}, o.tokens == 2 ? "tok" : "toks_1");
      else if (r > 1) g.step("concat", {"toks_" + std::to_string(r - 1), tok}, r + 1 == o.tokens ? "tok" : "toks_" + std::to_string(r));
    }
  } else if (o.sample) {
    g.step("sample", {"logits"}, "tok", [&] {
      g.key("temperature"); w.Double(0.0);
      if (o.compiled) { g.key("step"); w.StartObject(); g.key("$bind"); g.str("pos"); w.EndObject(); }
    });
  } else if (o.argmax) {
    g.step("argmax", {"logits"}, "tok");
  }
  w.EndArray();
  g.key("outputs");
  w.StartArray();
  g.str(o.argmax || o.sample ? "tok" : "logits");
  w.EndArray();
  w.EndObject();
  return g.text();
}

std::string llama_cache_graph(const llama_config& c, int cache_rows, bool history) {
  llama_graph_options o;
  graph_writer g(c, o);
  auto& w = g.w();
  const int kvw = c.kv_heads * c.head_dim;
  w.StartObject();
  g.key("inputs"); w.StartArray(); w.EndArray();
  g.key("steps");
  w.StartArray();
  for (int l = 0; l < c.layers; ++l)
    for (const char* kv : {"k", "v"})
      g.step("zeros", {}, kv + std::to_string(l), [&] {
        g.key("shape"); w.StartArray(); w.Int(cache_rows); w.Int(kvw); w.EndArray();
      });
  if (history)
    g.step("zeros", {}, "hist", [&] { g.key("shape"); w.StartArray(); w.Int(cache_rows); w.Int(1); w.EndArray(); });
  w.EndArray();
  g.key("retain");
  w.StartObject();
  if (history) { g.key("hist"); g.str("hist"); }
  for (int l = 0; l < c.layers; ++l)
    for (const char* kv : {"k", "v"}) {
      const std::string n = kv + std::to_string(l);
      g.key(n.c_str());
      g.str(n);
    }
  w.EndObject();
  w.EndObject();
  return g.text();
}

}  // namespace mpakt::models
