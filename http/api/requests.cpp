#include "http/api/requests.hpp"

#include <rapidjson/document.h>

#include <algorithm>
#include <optional>
#include <set>

#include "runtime/executor.hpp"
#include "runtime/graph.hpp"
#include "runtime/json.hpp"
#include "runtime/schema.hpp"

namespace mpakt::http {

namespace {

/// Bytes of a minimal compiled call of this template: ids and a session id as long as the
/// coordinator's, every bound input filled with zeros, every bound parameter 0.
std::uint64_t per_call_bytes(const graph_decl& d) {
  const std::string graph_id = "gt_" + std::string(24, '0');  // the length of new_id("gt_")
  std::string call = "{\"graphId\":\"" + graph_id + "\",\"session\":\"s_000000000000000000000000\",\"bind\":{";
  bool first = true;
  for (const auto& in : d.inputs) {
    if (in.kind != input_kind::bound) continue;
    call += (first ? "\"" : ",\"") + in.bind + "\":[";
    const std::int64_t n = shape_numel(in.shape);
    for (std::int64_t i = 0; i < n && i < 1'000'000; ++i) call += i ? ",0" : "0";
    call += "]";
    first = false;
  }
  std::set<std::string> params;
  for (const auto& st : d.steps)
    for (const auto& b : st.binds) params.insert(b.name);
  for (const auto& p : params) {
    call += (first ? "\"" : ",\"") + p + "\":0";
    first = false;
  }
  return call.size() + 2;
}

/// Checks a sessions list against its primary (filled in from the list when empty).
status check_sessions(std::string& primary, const std::vector<std::string>& sessions) {
  if (sessions.empty()) return {};
  if (primary.empty()) primary = sessions.front();
  if (std::find(sessions.begin(), sessions.end(), primary) == sessions.end())
    return invalid("sessions must include the primary session " + primary);
  if (sessions.size() > 64) return invalid("a graph may list at most 64 sessions");
  return {};
}

/// Parses the graph object, rewrites aliased tensorIds into {model, weight}, and returns its
/// references and its text. `version` 2 allows only data and tensorId inputs and v2 ops.
struct decoded_graph {
  graph_decl decl;
  graph_refs refs;
  std::string text;
};
result<decoded_graph> decode_graph(rapidjson::Document& body, rapidjson::Value& graph, bool allow_bind, int version,
                                   const weight_aliases& aliases) {
  auto decl = parse_graph(graph, allow_bind);
  if (!decl) return std::move(decl).err();
  decoded_graph out;
  auto& r = out.refs;
  r.needs = graph_needs(*decl);
  r.has_session = decl->session.has_value();
  r.session = decl->session.value_or("");
  r.sessions = decl->sessions;
  // (a graph may have no inputs member: then decl->inputs is empty and it is never read)
  const auto inputs = graph.FindMember("inputs");
  for (std::size_t i = 0; i < decl->inputs.size(); ++i) {
    auto& in = decl->inputs[i];
    if (version == 2 && in.kind != input_kind::data && in.kind != input_kind::tensor_id)
      return invalid("inputs[" + std::to_string(i) + "] (" + in.name +
                     "): API v2 inputs carry data or a tensorId; model and session inputs need /api/v3/graph");
    if (in.kind == input_kind::tensor_id) {
      if (auto a = aliases.find(in.tensor_id); a != aliases.end()) {
        auto& obj = inputs->value[rapidjson::SizeType(i)];
        auto& alloc = body.GetAllocator();
        obj.RemoveMember("tensorId");
        obj.AddMember("model", rapidjson::Value(a->second.first.c_str(), alloc), alloc);
        obj.AddMember("weight", rapidjson::Value(a->second.second.c_str(), alloc), alloc);
        in.kind = input_kind::weight;
        in.model = a->second.first;
        in.weight = a->second.second;
      }
    }
    if (in.kind == input_kind::weight) r.inputs.push_back({std::uint32_t(i), in.name, true, in.model});
    else if (in.kind == input_kind::tensor_id) r.inputs.push_back({std::uint32_t(i), in.name, false, in.tensor_id});
  }
  if (version == 2) {
    const auto& sc = schema::instance();
    for (std::size_t i = 0; i < decl->steps.size(); ++i) {
      const auto* spec = sc.find(decl->steps[i].op);
      if (spec && spec->added_in != "v2")
        return invalid("step " + std::to_string(i) + " (" + decl->steps[i].op + "): op " + decl->steps[i].op +
                       " was added in API " + spec->added_in + "; use /api/v3/graph");
    }
  }
  out.text = text_of(graph);
  out.decl = std::move(*decl);
  return out;
}

}  // namespace

std::vector<std::string> tensor_ids(const graph_refs& refs) {
  std::vector<std::string> out;
  for (const auto& in : refs.inputs)
    if (!in.weight) out.push_back(in.id);
  return out;
}

result<graph_call> decode_graph_call(std::string_view body, std::int32_t version, const weight_aliases& aliases) {
  auto d = parse_json_object(body, "request body");
  if (!d) return std::move(d).err();
  MPAKT_TRY(check_fields(*d, {"graph", "graphId", "bind", "session", "sessions", "encoding"}, "graph request"));
  auto enc = opt_string(*d, "encoding", "graph request");
  if (!enc) return std::move(enc).err();
  if (!enc->empty() && *enc != "base64") return invalid("encoding must be \"base64\" (or absent for JSON numbers)");
  auto session = opt_string(*d, "session", "graph request");
  if (!session) return std::move(session).err();
  auto sessions = opt_strings(*d, "sessions", "graph request");
  if (!sessions) return std::move(sessions).err();
  graph_call call;
  call.version = version;
  call.base64 = *enc == "base64";
  call.session = std::move(*session);
  call.sessions = std::move(*sessions);
  if (d->HasMember("graphId")) {
    if (version != 3) return invalid("compiled graphs are an API v3 feature; use /api/v3/graph");
    if (d->HasMember("graph")) return invalid("give either graph or graphId, not both");
    auto gid = opt_string(*d, "graphId", "graph request");
    if (!gid) return std::move(gid).err();
    call.graph_id = std::move(*gid);
    if (d->HasMember("bind") && !(*d)["bind"].IsObject())
      return invalid("bind must be an object mapping binding names to values");
    call.bind_json = d->HasMember("bind") ? text_of((*d)["bind"]) : "{}";
    MPAKT_TRY(check_sessions(call.session, call.sessions));
    return call;
  }
  if (!d->HasMember("graph")) return invalid("graph request needs graph (inline) or graphId (compiled)");
  if (d->HasMember("bind")) return invalid("bind belongs to compiled graphs (graphId)");
  auto g = decode_graph(*d, (*d)["graph"], false, version, aliases);
  if (!g) return std::move(g).err();
  // Sessions: inside the graph or at the top level (decisions.md), not conflicting.
  auto& refs = g->refs;
  if (refs.has_session && !call.session.empty() && refs.session != call.session)
    return invalid("graph.session and session name different sessions");
  std::string primary = refs.has_session ? refs.session : call.session;
  std::vector<std::string> list = refs.sessions.empty() ? call.sessions : refs.sessions;
  MPAKT_TRY(check_sessions(primary, list));
  if (version == 2 && (!primary.empty() || !list.empty())) return invalid("sessions are an API v3 feature; use /api/v3/graph");
  call.session = std::move(primary);
  call.sessions = std::move(list);
  call.graph_json = std::move(g->text);
  call.refs = std::move(refs);
  return call;
}

result<compile_call> decode_compile_call(std::string_view body, const weight_aliases& aliases) {
  auto d = parse_json_object(body, "request body");
  if (!d) return std::move(d).err();
  MPAKT_TRY(check_fields(*d, {"label", "graph"}, "compile request"));
  if (!d->HasMember("graph")) return invalid("compile request needs a graph");
  auto label = opt_string(*d, "label", "compile request");
  if (!label) return std::move(label).err();
  auto g = decode_graph(*d, (*d)["graph"], true, 3, aliases);
  if (!g) return std::move(g).err();
  if (g->refs.has_session || !g->refs.sessions.empty())
    return invalid("a compiled graph names its session per call, not in the template");
  compile_call call;
  call.label = std::move(*label);
  call.body_bytes = body.size();
  call.per_call_bytes = per_call_bytes(g->decl);
  call.graph_json = std::move(g->text);
  call.refs = std::move(g->refs);
  return call;
}

result<tensor_call> decode_tensor_upload(std::string_view body) {
  auto d = parse_json_object(body, "request body");
  if (!d) return std::move(d).err();
  MPAKT_TRY(check_fields(*d, {"shape", "data", "dataB64"}, "tensor upload"));
  // One upload is one {name, shape, data|dataB64} graph input: the same reader, the same checks.
  rapidjson::Document g;
  g.SetObject();
  auto& alloc = g.GetAllocator();
  rapidjson::Value in(rapidjson::kObjectType);
  in.AddMember("name", "tensor", alloc);
  for (auto it = d->MemberBegin(); it != d->MemberEnd(); ++it)
    in.AddMember(rapidjson::Value(it->name, alloc), rapidjson::Value(std::move(it->value)), alloc);
  rapidjson::Value inputs(rapidjson::kArrayType);
  inputs.PushBack(in, alloc);
  g.AddMember("inputs", inputs, alloc);
  g.AddMember("steps", rapidjson::Value(rapidjson::kArrayType), alloc);
  auto decl = parse_graph(g, false);
  if (!decl) {
    std::string msg = decl.err().message;
    const std::string prefix = "inputs[0] (tensor)";
    if (msg.rfind(prefix, 0) == 0) msg = "tensor upload" + msg.substr(prefix.size());
    return invalid(msg);
  }
  auto& t = decl->inputs[0];
  return tensor_call{t.shape, std::move(t.data)};
}

result<load_call> decode_load_call(std::string_view body) {
  auto d = parse_json_object(body, "request body");
  if (!d) return std::move(d).err();
  MPAKT_TRY(check_fields(*d, {"source", "include", "exclude", "names", "quantize", "token", "kvDtype"}, "load request"));
  load_call c;
  auto src = opt_string(*d, "source", "load request");
  if (!src) return std::move(src).err();
  if (src->empty()) return invalid("load request needs a source, e.g. \"hf:Org/Model\"");
  c.source = std::move(*src);
  for (auto [k, out] : {std::pair{"include", &c.include}, {"exclude", &c.exclude}, {"names", &c.names}}) {
    auto v = opt_strings(*d, k, "load request");
    if (!v) return std::move(v).err();
    *out = std::move(*v);
  }
  for (auto [k, out] : {std::pair{"quantize", &c.quantize}, {"token", &c.token}, {"kvDtype", &c.kv_dtype}}) {
    auto v = opt_string(*d, k, "load request");
    if (!v) return std::move(v).err();
    *out = std::move(*v);
  }
  if (!c.kv_dtype.empty() && c.kv_dtype != "f32" && c.kv_dtype != "bf16" && c.kv_dtype != "f16")
    return invalid("load request kvDtype must be \"f32\", \"bf16\" or \"f16\", not \"" + c.kv_dtype + "\"");
  return c;
}

namespace {

/// A token id of a generate request (ids, stopIds, speculative.context): 0 to 2^31 - 1.
result<std::vector<std::int64_t>> token_ids(const rapidjson::Value& v, const std::string& field) {
  if (!v.IsArray()) return invalid(field + " must be an array of token ids");
  std::vector<std::int64_t> out;
  out.reserve(v.Size());
  for (rapidjson::SizeType i = 0; i < v.Size(); ++i) {
    auto id = json_integer(v[i], field + "[" + std::to_string(i) + "]", 0, INT32_MAX);
    if (!id) return std::move(id).err();
    out.push_back(*id);
  }
  return out;
}

}  // namespace

result<generate_call> decode_generate_call(std::string_view body) {
  auto d = parse_json_object(body, "request body");
  if (!d) return std::move(d).err();
  MPAKT_TRY(check_fields(*d, {"graphId", "sessionId", "ids", "startPos", "maxNewTokens", "stopIds", "temperature", "topK",
                              "topP", "seed", "stream", "workerLoop", "speculative"},
                         "generate request"));
  generate_call c;
  for (auto [k, out] : {std::pair{"graphId", &c.graph_id}, {"sessionId", &c.session_id}}) {
    auto v = opt_string(*d, k, "generate request");
    if (!v) return std::move(v).err();
    if (v->empty()) return invalid(std::string("generate request needs ") + k);
    *out = std::move(*v);
  }
  auto integer = [&](const char* k, std::int64_t lo, std::int64_t hi) -> result<std::optional<std::int64_t>> {
    auto it = d->FindMember(k);
    if (it == d->MemberEnd()) return std::optional<std::int64_t>{};
    auto v = json_integer(it->value, k, lo, hi);
    if (!v) return std::move(v).err();
    return std::optional<std::int64_t>{*v};
  };
  auto ids = d->FindMember("ids");
  if (ids == d->MemberEnd()) return invalid("generate request needs ids (the last prompt token first)");
  auto fed = token_ids(ids->value, "ids");
  if (!fed) return std::move(fed).err();
  if (fed->empty()) return invalid("ids must hold at least the token to feed");
  c.ids = std::move(*fed);
  if (auto st = d->FindMember("stopIds"); st != d->MemberEnd()) {
    auto stops = token_ids(st->value, "stopIds");
    if (!stops) return std::move(stops).err();
    c.stop_ids = std::move(*stops);
  }
  auto start = integer("startPos", 0, std::int64_t(1) << 40);
  if (!start) return std::move(start).err();
  if (!*start) return invalid("generate request needs startPos");
  c.start_pos = **start;
  auto max_new = integer("maxNewTokens", 1, 4096);
  if (!max_new) return std::move(max_new).err();
  c.max_new = std::uint32_t(max_new->value_or(256));
  for (auto [k, out] : {std::pair{"stream", &c.stream}, {"workerLoop", &c.worker_loop}}) {
    auto it = d->FindMember(k);
    if (it == d->MemberEnd()) continue;
    if (!it->value.IsBool()) return invalid(std::string(k) + " must be true or false");
    *out = it->value.GetBool();
  }
  for (const char* k : {"temperature", "topP"}) {
    auto it = d->FindMember(k);
    if (it == d->MemberEnd()) continue;
    if (!it->value.IsNumber()) return invalid(std::string(k) + " must be a number");
    const double v = it->value.GetDouble();
    if (std::string_view(k) == "temperature" && v < 0) return invalid("temperature must be 0 or more");
    if (std::string_view(k) == "topP" && (v <= 0 || v > 1)) return invalid("topP must be in (0, 1]");
    c.sampling.emplace_back(k, v);
  }
  auto top_k = integer("topK", 0, 1 << 30);
  if (!top_k) return std::move(top_k).err();
  if (*top_k) c.sampling.emplace_back("topK", double(**top_k));
  auto seed = integer("seed", 0, std::int64_t(1) << 53);
  if (!seed) return std::move(seed).err();
  c.has_seed = seed->has_value();
  c.seed = seed->value_or(0);
  // Speculative decoding: verify graphs (at most 16), the context for drafting.
  if (auto sp = d->FindMember("speculative"); sp != d->MemberEnd()) {
    const auto& o = sp->value;
    if (!o.IsObject()) return invalid("speculative must be an object {graphIds, context, always}");
    MPAKT_TRY(check_fields(o, {"graphIds", "context", "always"}, "speculative"));
    auto vids = opt_strings(o, "graphIds", "speculative");
    if (!vids) return std::move(vids).err();
    if (vids->empty()) return invalid("speculative.graphIds must name at least one verify graph");
    if (vids->size() > 16) return invalid("speculative.graphIds lists " + std::to_string(vids->size()) + " graphs; at most 16");
    c.speculative = true;
    c.verify_graphs = std::move(*vids);
    if (auto a = o.FindMember("always"); a != o.MemberEnd()) {
      if (!a->value.IsBool()) return invalid("speculative.always must be true or false");
      c.always = a->value.GetBool();
    }
    if (auto ctx = o.FindMember("context"); ctx != o.MemberEnd()) {
      auto v = token_ids(ctx->value, "speculative.context");
      if (!v) return std::move(v).err();
      c.has_context = true;
      c.context = std::move(*v);
    }
  }
  return c;
}

result<session_call> decode_session_call(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return session_call{};
  auto d = parse_json_object(body, "request body");
  if (!d) return std::move(d).err();
  MPAKT_TRY(check_fields(*d, {"modelId", "label"}, "session request"));
  session_call c;
  for (auto [k, out] : {std::pair{"modelId", &c.model_id}, {"label", &c.label}}) {
    auto v = opt_string(*d, k, "session request");
    if (!v) return std::move(v).err();
    *out = std::move(*v);
  }
  return c;
}

}  // namespace mpakt::http
