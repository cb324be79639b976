/// Compiled graph and v2 tensor replies as JSON (a graph call's answer, whose outputs come
/// from the worker as text, is written by http/api/graph_calls.cpp).

#include "http/api/render.hpp"

#include "actors/json_text.hpp"

namespace mpakt::http {

std::string render(const compile_graph_reply& r) {
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "graphId"); str(w, r.graph_id);
    if (!r.label.empty()) { key(w, "label"); str(w, r.label); }
    key(w, "steps"); w.Uint(r.steps);
    key(w, "bindings"); strings(w, r.bindings);
    key(w, "bodyBytes"); w.Uint64(r.body_bytes);
    key(w, "perCallBytes"); w.Uint64(r.per_call_bytes);
    // what sending the template once saves each call, in request bytes
    key(w, "savedPerCall"); w.Int64(std::int64_t(r.body_bytes) - std::int64_t(r.per_call_bytes));
    key(w, "features"); strings(w, r.features);
    w.EndObject();
  });
}

std::string render(const list_graphs_reply& r) {
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "graphs");
    w.StartArray();
    for (const auto& g : r.graphs) {
      w.StartObject();
      key(w, "graphId"); str(w, g.graph_id);
      key(w, "label"); str(w, g.label);
      key(w, "steps"); w.Uint(g.steps);
      key(w, "bindings"); strings(w, g.bindings);
      key(w, "bodyBytes"); w.Uint64(g.body_bytes);
      key(w, "perCallBytes"); w.Uint64(g.per_call_bytes);
      key(w, "createdAt"); str(w, g.created_at);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  });
}

std::string render(const upload_tensor_reply& r) {
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "tensorId"); str(w, r.tensor_id);
    key(w, "shape");
    w.StartArray();
    for (auto x : r.shape) w.Int64(x);
    w.EndArray();
    key(w, "bytes"); w.Uint64(r.bytes);
    w.EndObject();
  });
}

}  // namespace mpakt::http
