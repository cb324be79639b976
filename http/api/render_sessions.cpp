/// Session replies as JSON: open, describe, checkpoint and restore.

#include "http/api/render.hpp"

#include "actors/json_text.hpp"

namespace mpakt::http {

std::string render(const open_session_reply& r) {
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "session");
    w.StartObject();
    key(w, "sessionId"); str(w, r.session_id);
    if (!r.model_id.empty()) { key(w, "modelId"); str(w, r.model_id); }
    if (!r.label.empty()) { key(w, "label"); str(w, r.label); }
    key(w, "createdAt"); str(w, r.created_at);
    w.EndObject();
    w.EndObject();
  });
}

std::string render(const session_state_reply& r) {
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "sessionId"); str(w, r.session_id);
    if (!r.model_id.empty()) { key(w, "modelId"); str(w, r.model_id); }
    if (!r.label.empty()) { key(w, "label"); str(w, r.label); }
    key(w, "createdAt"); str(w, r.created_at);
    key(w, "tensors");
    w.StartArray();
    for (const auto& t : r.tensors) tensor_entry(w, t);
    w.EndArray();
    key(w, "bytes"); w.Uint64(r.bytes);
    key(w, "steps"); w.Uint64(r.steps);
    w.EndObject();
  });
}

std::string render(const checkpoint_reply& r) {
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "sessionId"); str(w, r.session_id);
    key(w, "tensors"); w.Uint64(r.tensors);
    key(w, "bytes"); w.Uint64(r.bytes);
    key(w, "step"); w.Uint64(r.step);
    w.EndObject();
  });
}

}  // namespace mpakt::http
