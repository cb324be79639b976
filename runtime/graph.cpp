#include "runtime/graph.hpp"

#include <cmath>
#include <cstring>

#include "runtime/json.hpp"

namespace mpakt {

namespace {

// RapidJSON 1.1.0 under C++20: never compare a Value with == (it recurses forever).
const rapidjson::Value* member(const rapidjson::Value& o, const char* key) {
  auto it = o.FindMember(key);
  return it == o.MemberEnd() ? nullptr : &it->value;
}

std::string json_type_name(const rapidjson::Value& v) {
  if (v.IsNull()) return "null";
  if (v.IsBool()) return "a boolean";
  if (v.IsNumber()) return "a number";
  if (v.IsString()) return "a string";
  if (v.IsArray()) return "an array";
  return "an object";
}

result<std::string> get_string(const rapidjson::Value& o, const char* key, const std::string& where) {
  const auto* v = member(o, key);
  if (!v) return invalid(where + " lacks \"" + key + "\"");
  if (!v->IsString()) return invalid(where + "." + key + " must be a string, not " + json_type_name(*v));
  std::string s(v->GetString(), v->GetStringLength());
  if (s.empty()) return invalid(where + "." + key + " must not be empty");
  return s;
}

/// The largest dimension a shape may name (larger ones fail the size checks anyway).
constexpr std::int64_t max_dimension = 9'000'000'000'000'000;

result<shape_t> get_shape(const rapidjson::Value& v, const std::string& where) {
  if (!v.IsArray()) return invalid(where + " must be an array of non-negative integers");
  if (v.Size() > max_rank)
    return invalid(where + " has " + std::to_string(v.Size()) + " dimensions; at most " + std::to_string(max_rank) +
                   " are supported");
  shape_t s;
  for (rapidjson::SizeType i = 0; i < v.Size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    auto d = json_integer(v[i], at, 0);
    if (!d) return std::move(d).err();
    if (*d > max_dimension) return invalid(at + " is " + std::to_string(*d) + ", larger than any tensor can be");
    s.push_back(*d);
  }
  if (shape_numel(s) < 0) return invalid(where + " " + shape_str(s) + " has an element count that overflows");
  return s;
}

result<input_decl> parse_input(const rapidjson::Value& v, std::size_t i, bool allow_bind) {
  const std::string where = "inputs[" + std::to_string(i) + "]";
  if (!v.IsObject()) return invalid(where + " must be an object");
  input_decl in;
  auto name = get_string(v, "name", where);
  if (!name) return std::move(name).err();
  in.name = std::move(*name);
  const std::string at = where + " (" + in.name + ")";

  for (auto it = v.MemberBegin(); it != v.MemberEnd(); ++it) {
    std::string_view k(it->name.GetString(), it->name.GetStringLength());
    if (k != "name" && k != "shape" && k != "data" && k != "dataB64" && k != "model" && k != "weight" &&
        k != "session" && k != "of" && k != "tensorId" && k != "bind")
      return invalid(at + " has unknown field \"" + std::string(k) + "\"");
  }
  const bool has_data = member(v, "data") || member(v, "dataB64");
  const bool has_weight = member(v, "model") || member(v, "weight");
  const bool has_session = member(v, "session") != nullptr;
  const bool has_tid = member(v, "tensorId") != nullptr;
  const bool has_bind = member(v, "bind") != nullptr;
  const int forms = int(has_data) + int(has_weight) + int(has_session) + int(has_tid) + int(has_bind);
  if (forms == 0)
    return invalid(at + " needs one of data, dataB64, model+weight, session, tensorId or bind");
  if (forms > 1) return invalid(at + " mixes input forms; give exactly one of data/dataB64, model+weight, session, tensorId, bind");
  if (member(v, "of") && !has_session) return invalid(at + " has \"of\" but is not a session input");

  if (const auto* s = member(v, "shape")) {
    auto shape = get_shape(*s, at + ".shape");
    if (!shape) return std::move(shape).err();
    in.shape = std::move(*shape);
    in.has_shape = true;
  }

  if (has_data) {
    in.kind = input_kind::data;
    if (!in.has_shape) return invalid(at + " uploads data but has no shape");
    if (member(v, "data") && member(v, "dataB64")) return invalid(at + " gives both data and dataB64");
    const std::int64_t n = shape_numel(in.shape);
    if (const auto* d = member(v, "data")) {
      if (!d->IsArray()) return invalid(at + ".data must be an array of numbers");
      if (std::int64_t(d->Size()) != n)
        return invalid(at + ".data has " + std::to_string(d->Size()) + " values but shape " + shape_str(in.shape) +
                       " needs " + std::to_string(n));
      in.data.resize(std::size_t(n));
      for (rapidjson::SizeType j = 0; j < d->Size(); ++j) {
        const auto& e = (*d)[j];
        if (!e.IsNumber()) return invalid(at + ".data[" + std::to_string(j) + "] must be a number");
        in.data[j] = static_cast<float>(e.GetDouble());
      }
    } else {
      const auto* b = member(v, "dataB64");
      if (!b->IsString()) return invalid(at + ".dataB64 must be a base64 string");
      // Check the size before decoding so a hostile shape cannot make us allocate.
      const std::size_t chars = b->GetStringLength();
      const std::uint64_t bytes_max = std::uint64_t(chars) / 4 * 3 + 3;
      if (std::uint64_t(n) * 4 > bytes_max)
        return invalid(at + ".dataB64 holds at most " + std::to_string(bytes_max / 4) + " f32 values but shape " +
                       shape_str(in.shape) + " needs " + std::to_string(n));
      auto vals = decode_f32_base64(std::string_view(b->GetString(), chars));
      if (!vals) return invalid(at + ".dataB64: " + vals.err().message);
      if (std::int64_t(vals->size()) != n)
        return invalid(at + ".dataB64 holds " + std::to_string(vals->size()) + " f32 values but shape " +
                       shape_str(in.shape) + " needs " + std::to_string(n));
      in.data = std::move(*vals);
    }
  } else if (has_weight) {
    in.kind = input_kind::weight;
    auto model = get_string(v, "model", at);
    if (!model) return std::move(model).err();
    auto weight = get_string(v, "weight", at);
    if (!weight) return std::move(weight).err();
    in.model = std::move(*model);
    in.weight = std::move(*weight);
  } else if (has_session) {
    in.kind = input_kind::session;
    auto s = get_string(v, "session", at);
    if (!s) return std::move(s).err();
    in.session_name = std::move(*s);
    if (const auto* of = member(v, "of")) {
      auto index = json_integer(*of, at + ".of", 0, 1'000'000);
      if (!index) return invalid(index.err().message + " (an index into sessions)");
      in.of = int(*index);
    }
  } else if (has_tid) {
    in.kind = input_kind::tensor_id;
    auto t = get_string(v, "tensorId", at);
    if (!t) return std::move(t).err();
    in.tensor_id = std::move(*t);
  } else {
    in.kind = input_kind::bound;
    if (!allow_bind) return invalid(at + " has \"bind\": bound inputs belong in compiled graphs (POST /api/v3/graphs)");
    auto b = get_string(v, "bind", at);
    if (!b) return std::move(b).err();
    in.bind = std::move(*b);
    if (!in.has_shape) return invalid(at + " is bound but has no shape; a bound input keeps a fixed shape");
  }
  return in;
}

result<step_decl> parse_step(const rapidjson::Value& v, std::size_t i, bool allow_bind) {
  std::string where = "step " + std::to_string(i);
  if (!v.IsObject()) return invalid(where + " must be an object");
  step_decl st;
  auto op = get_string(v, "op", where);
  if (!op) return std::move(op).err();
  st.op = std::move(*op);
  where += " (" + st.op + ")";
  for (auto it = v.MemberBegin(); it != v.MemberEnd(); ++it) {
    std::string_view k(it->name.GetString(), it->name.GetStringLength());
    if (k != "op" && k != "in" && k != "out" && k != "params")
      return invalid(where + " has unknown field \"" + std::string(k) + "\"");
  }
  if (const auto* in = member(v, "in")) {
    if (!in->IsArray()) return invalid(where + ": \"in\" must be an array of value names");
    for (rapidjson::SizeType j = 0; j < in->Size(); ++j) {
      if (!(*in)[j].IsString() || (*in)[j].GetStringLength() == 0)
        return invalid(where + ": in[" + std::to_string(j) + "] must be a value name");
      st.in.emplace_back((*in)[j].GetString(), (*in)[j].GetStringLength());
    }
  }
  auto out = get_string(v, "out", where);
  if (!out) return std::move(out).err();
  st.out = std::move(*out);
  if (const auto* p = member(v, "params")) {
    if (!p->IsObject()) return invalid(where + ": params must be an object");
    for (auto it = p->MemberBegin(); it != p->MemberEnd(); ++it) {
      std::string name(it->name.GetString(), it->name.GetStringLength());
      const auto& val = it->value;
      if (val.IsObject() && member(val, "$bind")) {
        if (!allow_bind)
          return invalid(where + ": parameter " + name + " uses $bind, which belongs in compiled graphs (POST /api/v3/graphs)");
        bind_ref b;
        b.param = name;
        const auto* bn = member(val, "$bind");
        if (!bn->IsString() || bn->GetStringLength() == 0)
          return invalid(where + ": parameter " + name + ": $bind must name a binding");
        b.name = bn->GetString();
        for (auto m = val.MemberBegin(); m != val.MemberEnd(); ++m) {
          std::string_view k(m->name.GetString(), m->name.GetStringLength());
          if (k == "$bind") continue;
          if (k != "add" && k != "mul")
            return invalid(where + ": parameter " + name + " has unknown $bind field \"" + std::string(k) + "\"");
          if (!m->value.IsNumber() || !std::isfinite(m->value.GetDouble()))
            return invalid(where + ": parameter " + name + ": $bind " + std::string(k) + " must be a number");
          (k == "add" ? b.add : b.mul) = m->value.GetDouble();
        }
        st.binds.push_back(std::move(b));
        continue;
      }
      st.params.set(std::move(name), to_param_value(val));
    }
  }
  return st;
}

}  // namespace

param_value to_param_value(const rapidjson::Value& v) {
  param_value p;
  if (v.IsBool()) return param_value::boolean(v.GetBool());
  if (v.IsNumber()) return param_value::number(v.GetDouble());
  if (v.IsString()) return param_value::string(std::string(v.GetString(), v.GetStringLength()));
  if (v.IsArray()) {
    p.k = param_value::kind::array;
    for (const auto& e : v.GetArray()) p.items.push_back(to_param_value(e));
    return p;
  }
  if (v.IsObject()) {
    p.k = param_value::kind::object;
    for (auto it = v.MemberBegin(); it != v.MemberEnd(); ++it)
      p.fields.emplace_back(std::string(it->name.GetString(), it->name.GetStringLength()), to_param_value(it->value));
    return p;
  }
  return p;  // null
}

result<param_map> parse_params_text(std::string_view json) {
  auto parsed = parse_json(json, "params");
  if (!parsed) return std::move(parsed).err();
  const rapidjson::Document& d = *parsed;
  if (!d.IsObject()) return invalid("params must be a JSON object");
  param_map m;
  for (auto it = d.MemberBegin(); it != d.MemberEnd(); ++it)
    m.set(std::string(it->name.GetString(), it->name.GetStringLength()), to_param_value(it->value));
  return m;
}

result<graph_decl> parse_graph(const rapidjson::Value& g, bool allow_bind, const parse_limits& limits) {
  if (!g.IsObject()) return invalid("graph must be an object");
  graph_decl out;
  for (auto it = g.MemberBegin(); it != g.MemberEnd(); ++it) {
    std::string_view k(it->name.GetString(), it->name.GetStringLength());
    if (k != "inputs" && k != "steps" && k != "outputs" && k != "retain" && k != "session" && k != "sessions")
      return invalid("graph has unknown field \"" + std::string(k) + "\"");
  }
  if (const auto* ins = member(g, "inputs")) {
    if (!ins->IsArray()) return invalid("graph.inputs must be an array");
    if (ins->Size() > limits.max_inputs) return invalid("graph has " + std::to_string(ins->Size()) + " inputs; at most " + std::to_string(limits.max_inputs));
    for (rapidjson::SizeType i = 0; i < ins->Size(); ++i) {
      auto in = parse_input((*ins)[i], i, allow_bind);
      if (!in) return std::move(in).err();
      out.inputs.push_back(std::move(*in));
    }
  }
  const auto* steps = member(g, "steps");
  if (!steps) return invalid("graph lacks \"steps\"");
  if (!steps->IsArray()) return invalid("graph.steps must be an array");
  if (steps->Size() > limits.max_steps) return invalid("graph has " + std::to_string(steps->Size()) + " steps; at most " + std::to_string(limits.max_steps));
  for (rapidjson::SizeType i = 0; i < steps->Size(); ++i) {
    auto st = parse_step((*steps)[i], i, allow_bind);
    if (!st) return std::move(st).err();
    out.steps.push_back(std::move(*st));
  }
  if (const auto* o = member(g, "outputs")) {
    if (!o->IsArray()) return invalid("graph.outputs must be an array of value names");
    out.has_outputs = true;
    for (rapidjson::SizeType i = 0; i < o->Size(); ++i) {
      if (!(*o)[i].IsString() || (*o)[i].GetStringLength() == 0)
        return invalid("graph.outputs[" + std::to_string(i) + "] must be a value name");
      out.outputs.emplace_back((*o)[i].GetString(), (*o)[i].GetStringLength());
    }
  }
  if (const auto* r = member(g, "retain")) {
    if (!r->IsObject()) return invalid("graph.retain must be an object mapping session names to value names");
    for (auto it = r->MemberBegin(); it != r->MemberEnd(); ++it) {
      std::string k(it->name.GetString(), it->name.GetStringLength());
      if (k.empty()) return invalid("graph.retain has an empty session name");
      if (!it->value.IsString() || it->value.GetStringLength() == 0)
        return invalid("graph.retain." + k + " must name a graph value");
      out.retain.emplace_back(std::move(k), std::string(it->value.GetString(), it->value.GetStringLength()));
    }
  }
  if (const auto* s = member(g, "session")) {
    if (!s->IsString() || s->GetStringLength() == 0) return invalid("graph.session must be a session id");
    out.session = std::string(s->GetString(), s->GetStringLength());
  }
  if (const auto* ss = member(g, "sessions")) {
    if (!ss->IsArray()) return invalid("graph.sessions must be an array of session ids");
    if (ss->Size() > limits.max_sessions)
      return invalid("graph.sessions lists " + std::to_string(ss->Size()) + " sessions; at most " + std::to_string(limits.max_sessions) + " are allowed");
    for (rapidjson::SizeType i = 0; i < ss->Size(); ++i) {
      if (!(*ss)[i].IsString() || (*ss)[i].GetStringLength() == 0)
        return invalid("graph.sessions[" + std::to_string(i) + "] must be a session id");
      out.sessions.emplace_back((*ss)[i].GetString(), (*ss)[i].GetStringLength());
    }
  }
  return out;
}

result<graph_decl> parse_graph_text(std::string_view json, bool allow_bind, const parse_limits& limits) {
  auto d = parse_json(json, "graph");
  if (!d) return std::move(d).err();
  return parse_graph(*d, allow_bind, limits);
}

// ---- base64 ----

namespace {
constexpr char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
int b64val(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}
}  // namespace

std::string encode_f32_base64(std::span<const float> values) {
  const auto* p = reinterpret_cast<const unsigned char*>(values.data());
  const std::size_t n = values.size() * 4;
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < n; i += 3) {
    const unsigned v = (p[i] << 16) | (p[i + 1] << 8) | p[i + 2];
    out += b64chars[(v >> 18) & 63];
    out += b64chars[(v >> 12) & 63];
    out += b64chars[(v >> 6) & 63];
    out += b64chars[v & 63];
  }
  if (i < n) {
    unsigned v = p[i] << 16;
    if (i + 1 < n) v |= p[i + 1] << 8;
    out += b64chars[(v >> 18) & 63];
    out += b64chars[(v >> 12) & 63];
    out += (i + 1 < n) ? b64chars[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

result<std::vector<float>> decode_f32_base64(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  std::vector<unsigned char> bytes;
  bytes.reserve(text.size() * 3 / 4);
  unsigned acc = 0;
  int bits = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const int v = b64val(text[i]);
    if (v < 0) return invalid("invalid base64 character at offset " + std::to_string(i));
    acc = (acc << 6) | unsigned(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<unsigned char>((acc >> bits) & 0xff));
    }
  }
  if (bytes.size() % 4 != 0)
    return invalid("base64 decodes to " + std::to_string(bytes.size()) + " bytes, not a whole number of f32 values");
  std::vector<float> out(bytes.size() / 4);
  if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());  // (no null pointers to memcpy)
  return out;
}

}  // namespace mpakt
