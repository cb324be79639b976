#pragma once
/// The edge's side of the calls whose bodies can be large (graph calls, templates, v2
/// uploads): decode the body into its typed request (http/api/requests.hpp) — on a helper
/// thread of its own when the body is large, so neither the Beast I/O thread nor the
/// scheduler thread the coordinator shares ever parses megabytes — resolve tensorIds that
/// name loaded weights, send the typed request, and render a graph's reply the same way.
///
/// Used by the routes (http/api/routes.cpp) and the chat actor (http/api/chat.cpp).

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/off_thread.hpp"
#include "actors/protocol.hpp"
#include "runtime/status.hpp"

namespace mpakt::http {

/// {"outputs": …, "steps": n}, the answer of a graph call.
std::string graph_reply_json(const run_reply& r);

/// POST /api/v3/graph or /api/v2/graph on behalf of `self`: decodes `body`, sends it, and
/// calls `done` with the reply or the error. A call whose worker left the grid mid-run is
/// sent again (decoded again from `body`), up to three times. `server_made`: the server built
/// the graph itself (chat's cache allocation), so it may name server-only parameters; never
/// for a body a client sent.
void send_graph_call(caf::event_based_actor* self, coordinator_actor coord, caller who,
                     std::shared_ptr<const std::string> body, std::int32_t version, std::chrono::milliseconds timeout,
                     std::function<void(result<run_reply>)> done, bool server_made = false);

/// POST /api/v3/graphs on behalf of `self`: the coordinator's answer or the error.
void send_compile_call(caf::event_based_actor* self, coordinator_actor coord, caller who,
                       std::shared_ptr<const std::string> body, std::chrono::milliseconds timeout,
                       std::function<void(result<compile_graph_reply>)> done);

/// POST /api/v2/tensors on behalf of `self`: the coordinator's answer or the error.
void send_tensor_upload(caf::event_based_actor* self, coordinator_actor coord, caller who,
                        std::shared_ptr<const std::string> body, std::chrono::milliseconds timeout,
                        std::function<void(result<upload_tensor_reply>)> done);

}  // namespace mpakt::http
