#pragma once
/// The actors behind each model, session and compiled graph (interfaces in
/// actors/protocol.hpp). The coordinator owns the directory (ids, owners, limits); these
/// own the entity's state and talk to the worker that holds it.

#include <chrono>
#include <string>
#include <vector>

#include "actors/protocol.hpp"

namespace mpakt {

/// How long a graph may run before the caller gets 504 (the spec's 5 minutes).
struct entity_timeouts {
  std::chrono::milliseconds graph{5 * 60 * 1000};
  std::chrono::milliseconds control{30 * 1000};
  /// How much longer than `graph` a caller waits for a graph call's answer. The worker stops
  /// the call at `graph` (run_request::timeout_ms) and answers saying what happened; this
  /// leaves room for that answer, so the caller's own timeout fires only when the worker
  /// could not answer at all (one kernel longer than the rest of the limit).
  std::chrono::milliseconds answer_grace{3 * 1000};
};

/// Gives a graph call the graph limit when it has none yet (so the worker stops it there).
void limit_call(run_request& r, const entity_timeouts& t);

/// The error for a graph call whose worker did not answer within the limit and the grace.
caf::error graph_timeout_error(const entity_timeouts& t, const std::string& where);

session_actor spawn_session(caf::actor_system& sys, std::string session_id, worker_actor worker, entity_timeouts t);
/// `outputs`: the template's outputs; `graph_json`: the graph object as compiled.
graph_actor spawn_graph(caf::actor_system& sys, std::string graph_id, std::string graph_json, entity_timeouts t);
model_actor spawn_model(caf::actor_system& sys, std::string model_id, std::vector<worker_actor> workers, entity_timeouts t);

}  // namespace mpakt
