#pragma once
/// Typed requests the HTTP edge sends the coordinator for the calls whose bodies can be
/// large: graph calls, compiled templates and v2 tensor uploads. The edge parses and checks
/// each body where it arrives (http/api/requests.hpp), on a thread of its own when the body
/// is large, so the coordinator's one thread never parses, decodes or copies a big body: it
/// reads these structs, routes by their references and passes the graph text on.

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mpakt {

/// A graph input the coordinator resolves against the caller's directory.
struct graph_ref {
  std::uint32_t input = 0;  ///< its index in graph.inputs
  std::string name;         ///< the input's name (for messages)
  bool weight = false;      ///< {model, weight}; else {tensorId}
  std::string id;           ///< the model id, or the tensorId
};

/// What routing a graph needs of it: sessions, the models and tensors it reads, and the ops
/// and features it uses (to pick a worker when nothing pins it).
struct graph_refs {
  bool has_session = false;           ///< graph.session given
  std::string session;                ///< graph.session
  std::vector<std::string> sessions;  ///< graph.sessions
  std::vector<graph_ref> inputs;      ///< every model-weight and tensorId input, in order
  std::vector<std::string> needs;     ///< ops and features used
};

/// POST /api/v3/graph and /api/v2/graph: an inline graph or a compiled one's call.
struct graph_call {
  std::int32_t version = 3;
  bool base64 = false;                ///< outputs as dataB64
  std::string graph_id;               ///< a compiled run; "" = inline
  std::string bind_json;              ///< a compiled run's bind object ("{}" when absent)
  std::string session;                ///< the top-level session
  std::vector<std::string> sessions;  ///< the top-level sessions list
  std::string graph_json;             ///< inline: the graph object, as the worker parses it
  graph_refs refs;                    ///< inline: what the coordinator routes by
  /// Built by the server itself (chat's cache allocation), never decoded from a client's
  /// body: its steps may name server-only parameters (zeros' dtype).
  bool server_params = false;
};

/// POST /api/v3/graphs: a template to compile.
struct compile_call {
  std::string label;
  std::string graph_json;
  graph_refs refs;
  std::uint64_t body_bytes = 0;      ///< the request body's size (the reply reports it)
  std::uint64_t per_call_bytes = 0;  ///< a minimal call's size (the reply reports it)
};

/// POST /api/v2/tensors: the decoded values.
struct tensor_call {
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};

/// POST /api/v3/models: what to load.
struct load_call {
  std::string source;
  std::vector<std::string> include, exclude, names;
  std::string quantize;  ///< empty: the operator's default
  /// How sessions the server opens on this model store their KV caches: "f32", "bf16" or
  /// "f16" (checked at the edge); empty: the operator's default (`serve --kv-dtype`).
  std::string kv_dtype;
  std::string token;     ///< the caller's own hub token (never logged or stored)
};

/// POST /api/v3/generate (and chat's decode loop): what to generate, checked at the edge; the
/// coordinator resolves the session and graphs and plans it (gen_plan).
struct generate_call {
  std::string graph_id;
  std::string session_id;
  std::vector<std::int64_t> ids;       ///< the last prompt token last (the one fed first)
  std::vector<std::int64_t> stop_ids;
  std::int64_t start_pos = 0;
  std::uint32_t max_new = 256;
  std::vector<std::pair<std::string, double>> sampling;  ///< temperature, topP, topK as given
  bool has_seed = false;
  std::int64_t seed = 0;
  bool stream = true;
  bool worker_loop = true;
  bool speculative = false;
  std::vector<std::string> verify_graphs;  ///< speculative.graphIds
  bool has_context = false;
  std::vector<std::int64_t> context;  ///< speculative.context
  bool always = false;                ///< speculative.always
};

/// POST /api/v3/sessions.
struct session_call {
  std::string model_id;  ///< empty: a session of no model (any worker)
  std::string label;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, graph_ref& x) {
  return f(caf::meta::type_name("graph_ref"), x.input, x.name, x.weight, x.id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, graph_refs& x) {
  return f(caf::meta::type_name("graph_refs"), x.has_session, x.session, x.sessions, x.inputs, x.needs);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, graph_call& x) {
  return f(caf::meta::type_name("graph_call"), x.version, x.base64, x.graph_id, x.bind_json, x.session, x.sessions,
           x.graph_json, x.refs, x.server_params);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, compile_call& x) {
  return f(caf::meta::type_name("compile_call"), x.label, x.graph_json, x.refs, x.body_bytes, x.per_call_bytes);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tensor_call& x) {
  return f(caf::meta::type_name("tensor_call"), x.shape, x.data);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, load_call& x) {
  return f(caf::meta::type_name("load_call"), x.source, x.include, x.exclude, x.names, x.quantize, x.token, x.kv_dtype);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, generate_call& x) {
  return f(caf::meta::type_name("generate_call"), x.graph_id, x.session_id, x.ids, x.stop_ids, x.start_pos, x.max_new,
           x.sampling, x.has_seed, x.seed, x.stream, x.worker_loop, x.speculative, x.verify_graphs, x.has_context,
           x.context, x.always);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, session_call& x) {
  return f(caf::meta::type_name("session_call"), x.model_id, x.label);
}

}  // namespace mpakt
