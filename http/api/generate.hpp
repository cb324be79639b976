#pragma once
/// The HTTP side of POST /api/v3/generate: a generation actor per request that runs the
/// decode loop — on the worker (workerLoop: one request, tokens stream back as messages) or
/// from here (one round trip per token) — and writes SSE `token`/`done` events, or one JSON
/// body when `stream` is false. A client that disconnects cancels the generation.

#include <memory>

#include "actors/protocol.hpp"
#include "http/server.hpp"

namespace mpakt::http {

/// Runs one generation for `who`; `coordinator` hears what it fed the session (the journal of
/// a checkpointed session) and re-plans it when its worker leaves the grid.
/// `slot` is held until the generation ends (the key's count of generations running at once).
void start_generation(caf::actor_system& sys, gen_plan plan, std::shared_ptr<responder> res, coordinator_actor coordinator,
                      caller who, std::shared_ptr<void> slot = nullptr);

}  // namespace mpakt::http
