#pragma once
/// The operator's console at the HTTP edge: the grid's picture (the coordinator's typed
/// snapshots, actors/describe.hpp) and its events rendered as JSON, for
/// GET /api/v3/admin/actors and its SSE stream (docs/api-reference.md, "Operators").
/// Pure functions: no actors, no I/O.

#include <cstdint>
#include <string>
#include <vector>

#include "actors/describe.hpp"

namespace mpakt::http {

/// Milliseconds since the Unix epoch as ISO 8601 UTC with milliseconds.
std::string iso_time(std::uint64_t unix_ms);

/// {"at", "atMs", "actors": [{kind, id, links, state, mailbox, messages, errors, answered}]}.
/// A state name given twice keeps its first value (the actor's own, before what the
/// coordinator's directory adds); whole numbers are written as integers, others as doubles,
/// a value that is not finite as null.
std::string actors_json(std::uint64_t at_ms, const std::vector<actor_snapshot>& actors);

/// {"seq", "at", "what", "kind", "id", "detail"}.
std::string event_json(const grid_event& e);

}  // namespace mpakt::http
