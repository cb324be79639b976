#pragma once
/// The coordinator's message handlers, one file per entity: models.cpp, sessions.cpp (with
/// checkpoints and journals), graphs.cpp (routing and running graph calls, templates),
/// generate.cpp and tensors.cpp (v2). coordinator_actor.cpp holds the behavior table that
/// hands each message to them, discovery, metrics and cancellation. Each handler takes the
/// coordinator actor (it runs in it, on its state: coordinator_state.hpp) and the message's
/// values, and answers as the message's reply type says (actors/protocol.hpp): a typed reply
/// (actors/replies.hpp), which the HTTP edge writes as JSON.

#include <rapidjson/document.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/coordinator/coordinator_state.hpp"
#include "actors/errors.hpp"
#include "actors/requests.hpp"
#include "runtime/status.hpp"

namespace mpakt::coord {

// Shared by the handlers (coordinator_actor.cpp).
std::string now_iso();
/// What the workers `ws` allow a caller, with the coordinator's own limits.
grid_limits limits_of(const coordinator_config& cfg, const std::vector<worker_status>& ws);
/// Settles a handler's promise with an error, kept among the coordinator's last errors for
/// describe (as `noted` keeps those a handler answers at once): a failure that comes back
/// later, from a worker or a session, is the coordinator's answer too.
template <class Promise>
void fail(coordinator_pointer self, Promise& rp, caf::error e) {
  self->state.tally.failed(from_caf(e).message);
  rp.deliver(std::move(e));
}

// Routing and running graph calls (graphs.cpp).
/// Resolves the references of a graph (models, tensorIds, sessions; decoded at the edge,
/// http/api/requests.hpp) against the caller's directory and picks the worker.
struct routed {
  bool wait = false;    ///< it touches a lost worker whose models and sessions are being placed again
  worker_actor worker;  ///< may be invalid: any worker will do
  std::set<std::string> models;
};
result<routed> route(coordinator_pointer self, const caller& who, const graph_refs& refs, const std::string& primary,
                     const std::vector<std::string>& sessions);
/// Runs a routed graph request on `w` and delivers the worker's reply (graphs.cpp says how).
void run_on(coordinator_pointer self, caf::typed_response_promise<run_reply> rp, run_request req, worker_actor w,
            std::optional<graph_actor> compiled, caf::actor_addr requester);
/// The worker to use when a graph names no session or weights: the one with most free among
/// those offering every op and feature it uses.
void with_any_worker(coordinator_pointer self, std::vector<std::string> needs, std::function<void(result<worker_actor>)> k);

// models.cpp
caf::result<inspect_model_reply> inspect_model(coordinator_pointer self, const caller& who, const std::string& source, const std::string& token);
caf::result<load_model_reply> load_model(coordinator_pointer self, const caller& who, load_call& call);
caf::result<list_models_reply> list_models(coordinator_pointer self, const caller& who);
caf::result<std::string, std::string, std::string, std::string> model_files(coordinator_pointer self, const caller& who, const std::string& id);
caf::result<deleted_reply> delete_model(coordinator_pointer self, const caller& who, const std::string& id);

// sessions.cpp
caf::result<open_session_reply> open_session(coordinator_pointer self, const caller& who, const session_call& call);
caf::result<session_state_reply> describe_session(coordinator_pointer self, const caller& who, const std::string& id);
caf::result<deleted_reply> close_session(coordinator_pointer self, const caller& who, const std::string& id);
void journal_generation(coordinator_pointer self, const caller& who, gen_journal& j);
void report_due(coordinator_pointer self, const std::string& sid);
caf::result<checkpoint_reply> checkpoint_session(coordinator_pointer self, const caller& who, const std::string& id);
caf::result<checkpoint_reply> restore_session(coordinator_pointer self, const caller& who, const std::string& id);

// graphs.cpp
caf::result<run_reply> run_graph(coordinator_pointer self, const caller& who, graph_call& call);
std::vector<std::string> resolve_weights(coordinator_pointer self, const caller& who, const std::vector<std::string>& ids);
caf::result<compile_graph_reply> compile_graph(coordinator_pointer self, const caller& who, compile_call& call);
caf::result<list_graphs_reply> list_graphs(coordinator_pointer self, const caller& who);
caf::result<deleted_reply> delete_graph(coordinator_pointer self, const caller& who, const std::string& id);

// generate.cpp
caf::result<gen_plan> plan_generation(coordinator_pointer self, const caller& who, const generate_call& call);

// console.cpp: describing the grid and relaying its events (docs/protocol.md, "Describing the grid")
actor_snapshot describe_coordinator(coordinator_pointer self);
/// Every long-lived actor's snapshot, the coordinator's first; each asked with a short timeout.
caf::result<std::vector<actor_snapshot>> describe_grid(coordinator_pointer self);
/// An event from the pool or a generation: noted in the directory, numbered, passed on.
void on_grid_event(coordinator_pointer self, grid_event& e, describable who);
void add_listener(coordinator_pointer self, grid_listener l);
/// Forgets a console listener or a described generation that ended (monitored, not
/// watched workers); false when `addr` was neither.
bool drop_listener(coordinator_pointer self, const caf::actor_addr& addr);
caf::result<gen_plan> replan_generation(coordinator_pointer self, const caller& who, gen_plan& plan);

// tensors.cpp
caf::result<upload_tensor_reply> upload_tensor(coordinator_pointer self, const caller& who, tensor_call& t);
caf::result<deleted_reply> delete_tensor(coordinator_pointer self, const caller& who, const std::string& id);

}  // namespace mpakt::coord
