#pragma once
/// The edge's side of the typed replies (actors/replies.hpp): each reply written as its
/// endpoint's JSON response body. The actors answer values; the bodies' field names, order
/// and number formats are decided here alone (docs/api-reference.md). One file per entity:
/// render_grid.cpp (versions, status, spot-checks, deletions), render_models.cpp,
/// render_sessions.cpp, render_graphs.cpp (with v2 tensors), render_accounts.cpp.
///
/// Pure functions: safe on any thread (a large inspect answer is written on a helper thread).

#include <string>

#include "actors/json_text.hpp"
#include "actors/replies.hpp"

namespace mpakt::http {

/// A tensor as inspect and a session's description list it: {name, shape, dtype, bytes}.
template <class Tensor>
void tensor_entry(json_writer& w, const Tensor& t) {
  w.StartObject();
  key(w, "name");
  str(w, t.name);
  key(w, "shape");
  w.StartArray();
  for (auto d : t.shape) w.Int64(d);
  w.EndArray();
  key(w, "dtype");
  str(w, t.dtype);
  key(w, "bytes");
  w.Uint64(t.bytes);
  w.EndObject();
}

// the grid (render_grid.cpp)
std::string render(const versions_reply& r);
std::string render(const status_reply& r);
std::string render(const recheck_reply& r);
std::string render(const deleted_reply& r);

// models (render_models.cpp)
std::string render(const inspect_model_reply& r);
std::string render(const load_model_reply& r);
std::string render(const list_models_reply& r);

// sessions (render_sessions.cpp)
std::string render(const open_session_reply& r);
std::string render(const session_state_reply& r);
std::string render(const checkpoint_reply& r);

// graphs and v2 tensors (render_graphs.cpp)
std::string render(const compile_graph_reply& r);
std::string render(const list_graphs_reply& r);
std::string render(const upload_tensor_reply& r);

// accounts (render_accounts.cpp)
std::string render(const account_reply& r);
std::string render(const login_reply& r);
std::string render(const key_reply& r);
std::string render(const keys_reply& r);

}  // namespace mpakt::http
