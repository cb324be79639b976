#include "actors/coordinator/coordinator_actor.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <cstdio>
#include <set>

#include "actors/coordinator/coordinator_state.hpp"
#include "actors/coordinator/handlers.hpp"
#include "actors/coordinator/pipeline_actor.hpp"
#include "actors/coordinator/recovery.hpp"
#include "actors/errors.hpp"
#include "actors/loader/source.hpp"
#include "actors/sequence.hpp"
#include "actors/generate/gen_values.hpp"
#include "actors/ids.hpp"
#include "runtime/executor.hpp"
#include "runtime/graph.hpp"
#include "runtime/json.hpp"
#include "runtime/log.hpp"
#include "runtime/metrics.hpp"
#include "runtime/schema.hpp"

namespace mpakt {

namespace coord {

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

grid_limits limits_of(const coordinator_config& cfg, const std::vector<worker_status>& ws) {
  grid_limits l;
  l.quantize_on_load = !ws.empty();
  for (const auto& w : ws) {
    l.packed_weights = l.packed_weights && w.packed_weights;
    l.quantize_on_load = l.quantize_on_load && w.can_quantize;
    l.max_tensor_bytes = std::max(l.max_tensor_bytes, w.max_tensor_bytes);
    l.free_bytes += w.free_bytes;
  }
  l.workers = ws.size();
  l.default_quantize = cfg.load.default_quantize;
  l.default_kv_dtype = cfg.load.default_kv_dtype;
  l.models_per_key = cfg.max_models_per_key;
  l.sessions_per_key = cfg.max_sessions_per_key;
  l.graphs_per_key = cfg.max_graphs_per_key;
  l.graph_budget_bytes = cfg.graph_budget_bytes;
  l.graph_timeout_ms = cfg.timeouts.graph.count();
  l.v2_quota_bytes = cfg.v2_quota_bytes;
  return l;
}

/// A worker as `who` may see it (GET /api/v3/status): graph and session ids only to their
/// owner, and the caller's models placed on it.
worker_view view_of(coordinator_state& S, const worker_status& s, const caller& who) {
  worker_view v;
  v.worker_id = s.worker_id;
  v.backend = s.backend;
  v.backend_note = s.backend_note;
  v.host_ops = s.host_ops;
  v.free_bytes = s.free_bytes;
  v.total_bytes = s.total_bytes;
  v.max_tensor_bytes = s.max_tensor_bytes;
  v.features = s.features;
  v.generations = s.generations;
  v.packed_weights = s.packed_weights;
  v.quantize_on_load = s.can_quantize;
  v.measured_ms = s.measured_ms;
  v.kernels = s.kernels;
  v.cpu = s.cpu;
  v.threads = s.threads;
  v.busy_since_ms = s.busy_since_ms;
  v.busy_ms = s.busy_ms;
  if (s.busy_since_ms != 0) {
    // ids are shown only to their owner (they are unguessable on purpose)
    std::string graph = s.busy_graph;
    v.busy_compiling = graph.rfind("compile ", 0) == 0;
    if (v.busy_compiling) graph = graph.substr(8);
    graph = graph.substr(0, graph.find('/'));  // a spread model's stage
    if (graph != "inline" && !S.find(S.graphs, graph, who)) graph = "another account's graph";
    v.busy_graph = graph;
    if (!s.busy_session.empty() && S.find(S.sessions, s.busy_session, who)) v.busy_session = s.busy_session;
  }
  v.busy_steps_done = s.busy_steps_done;
  v.busy_steps = s.busy_steps;
  v.queued = s.queued;
  v.checked = s.checked;
  v.checks_passed = s.checks_passed;
  v.checks_unchecked = s.checks_unchecked;
  v.checks_inconclusive = s.checks_inconclusive;
  v.checks_first_left = s.checks_first_left;
  v.checks_exact = s.checks_exact;
  v.weights_checked = s.weights_checked;
  v.weights_unchecked = s.weights_unchecked;
  v.data_link = s.data_link;
  v.data_link_bytes = s.data_link_bytes;
  for (const auto& [id, m] : S.models) {
    if (m.account != who.account) continue;
    bool here = m.worker_id == s.worker_id && !S.is_lost(m.worker);
    for (const auto& part : m.parts) here = here || (part.worker_id == s.worker_id && !S.is_lost(part.worker));
    if (here) v.models.push_back(id);
  }
  return v;
}

/// A handler's answer, with an error it answers at once kept for describe (the last few).
template <class... Ts>
caf::result<Ts...> noted(coordinator_pointer self, caf::result<Ts...> r) {
  if (r.flag == caf::rt_error) self->state.tally.failed(from_caf(r.err).message);
  return r;
}

}  // namespace coord


coordinator_actor spawn_coordinator(caf::actor_system& sys, coordinator_config cfg, pool_actor pool) {
  return sys.spawn([cfg, pool](coordinator_pointer self) -> coordinator_actor::behavior_type {
    self->state.cfg = cfg;
    self->state.pool = pool;
    using namespace coord;
    const auto control = cfg.timeouts.control;
    self->set_down_handler([self](caf::down_msg& dm) {
      // Only a worker holding something here is watched; the console's listeners and the
      // generations it describes are monitored too, and only forgotten when they end.
      if (!self->state.watched.count(dm.source)) return void(drop_listener(self, dm.source));
      on_worker_lost(self, dm.source);
    });
    // Workers joining and leaving, for the console (and the ids that name them there).
    self->send(pool, subscribe_atom::value, caf::actor_cast<grid_listener>(self));

    return {
        // ------------------------------------------------------------ discovery
        [=](versions_atom) -> caf::result<versions_reply> {
          self->state.tally.count();
          auto rp = self->make_response_promise<versions_reply>();
          self->request(self->state.pool, control, workers_atom::value)
              .then(
                  [=](std::vector<worker_status>& ws) mutable { rp.deliver(versions_reply{limits_of(self->state.cfg, ws)}); },
                  [=](caf::error& e) mutable { fail(self, rp, e); });
          return rp;
        },
        [=](recheck_atom, const caller&, const std::string& worker_id) -> caf::result<recheck_reply> {
          self->state.tally.count();
          // The worker by its id among the pool's members; its checked worker does the checking.
          auto rp = self->make_response_promise<recheck_reply>();
          self->request(self->state.pool, control, members_atom::value)
              .then(
                  [=](std::vector<worker_actor>& ws, std::vector<worker_status>& ss) mutable {
                    for (std::size_t i = 0; i < ws.size() && i < ss.size(); ++i) {
                      if (ss[i].worker_id != worker_id) continue;
                      self->request(ws[i], std::chrono::minutes(10), recheck_atom::value)
                          .then([rp](recheck_reply& report) mutable { rp.deliver(std::move(report)); },
                                [self, rp](caf::error& e) mutable { fail(self, rp, std::move(e)); });
                      return;
                    }
                    fail(self, rp, to_caf(errc::not_found, "no worker " + worker_id + " in the pool"));
                  },
                  [self, rp](caf::error& e) mutable { fail(self, rp, std::move(e)); });
          return rp;
        },
        [=](status_atom, const caller& who) -> caf::result<status_reply> {
          self->state.tally.count();
          auto rp = self->make_response_promise<status_reply>();
          self->request(self->state.pool, control, workers_atom::value)
              .then(
                  [=](std::vector<worker_status>& ws) mutable {
                    status_reply r;
                    for (const auto& s : ws) r.pool.push_back(view_of(self->state, s, who));
                    // volunteers ended by spot-checks since the coordinator started
                    if (self->state.cfg.quarantine)
                      for (const auto& q : self->state.cfg.quarantine->list())
                        r.quarantined.push_back(quarantine_view{q.worker_id, q.volunteer, q.reason, q.at_unix_ms});
                    rp.deliver(std::move(r));
                  },
                  [=](caf::error& e) mutable { fail(self, rp, e); });
          return rp;
        },
        // ------------------------------------------------------------ models
        [=](inspect_atom, const caller& who, const std::string& source, const std::string& token) -> caf::result<inspect_model_reply> {
          self->state.tally.count();
          return noted(self, inspect_model(self, who, source, token));
        },
        [=](load_atom, const caller& who, load_call& call) -> caf::result<load_model_reply> {
          self->state.tally.count();
          return noted(self, load_model(self, who, call));
        },
        [=](list_atom, models_atom, const caller& who) -> caf::result<list_models_reply> {
          self->state.tally.count();
          return noted(self, list_models(self, who));
        },
        [=](files_atom, const caller& who, const std::string& id) -> caf::result<std::string, std::string, std::string, std::string> {
          self->state.tally.count();
          return noted(self, model_files(self, who, id));
        },
        [=](delete_atom, models_atom, const caller& who, const std::string& id) -> caf::result<deleted_reply> {
          self->state.tally.count();
          return noted(self, delete_model(self, who, id));
        },
        // ------------------------------------------------------------ sessions
        [=](create_atom, sessions_atom, const caller& who, const session_call& call) -> caf::result<open_session_reply> {
          self->state.tally.count();
          return noted(self, open_session(self, who, call));
        },
        [=](get_atom, sessions_atom, const caller& who, const std::string& id) -> caf::result<session_state_reply> {
          self->state.tally.count();
          return noted(self, describe_session(self, who, id));
        },
        [=](delete_atom, sessions_atom, const caller& who, const std::string& id) -> caf::result<deleted_reply> {
          self->state.tally.count();
          return noted(self, close_session(self, who, id));
        },
        // ------------------------------------------------------------ graphs
        [=](graph_atom, const caller& who, graph_call& call) -> caf::result<run_reply> {
          self->state.tally.count();
          return noted(self, run_graph(self, who, call));
        },
        // (tensorId -> model, weight for the caller's loaded weights, as flat triples: the edge
        // rewrites those inputs before routing)
        [=](resolve_atom, const caller& who, const std::vector<std::string>& ids) -> std::vector<std::string> {
          self->state.tally.count();
          return resolve_weights(self, who, ids);
        },
        [=](create_atom, graphs_atom, const caller& who, compile_call& call) -> caf::result<compile_graph_reply> {
          self->state.tally.count();
          return noted(self, compile_graph(self, who, call));
        },
        [=](list_atom, graphs_atom, const caller& who) -> caf::result<list_graphs_reply> {
          self->state.tally.count();
          return noted(self, list_graphs(self, who));
        },
        [=](delete_atom, graphs_atom, const caller& who, const std::string& id) -> caf::result<deleted_reply> {
          self->state.tally.count();
          return noted(self, delete_graph(self, who, id));
        },
        // ------------------------------------------------------------ generate
        [=](generate_atom, const caller& who, const generate_call& call) -> caf::result<gen_plan> {
          self->state.tally.count();
          return noted(self, plan_generation(self, who, call));
        },
        // ------------------------------------------------------------ checkpoints
        [=](journal_atom, const caller& who, gen_journal& j) {
          self->state.tally.count();
          journal_generation(self, who, j);
        },
        [=](reportdue_atom, const std::string& sid) {
          self->state.tally.count();
          report_due(self, sid);
        },
        [=](replan_atom, const caller& who, gen_plan& plan) -> caf::result<gen_plan> {
          self->state.tally.count();
          return noted(self, replan_generation(self, who, plan));
        },
        [=](checkpt_atom, const caller& who, const std::string& id) -> caf::result<checkpoint_reply> {
          self->state.tally.count();
          return noted(self, checkpoint_session(self, who, id));
        },
        [=](restore_atom, const caller& who, const std::string& id) -> caf::result<checkpoint_reply> {
          self->state.tally.count();
          return noted(self, restore_session(self, who, id));
        },
        // ------------------------------------------------------------ v2 tensors
        [=](create_atom, tensors_atom, const caller& who, tensor_call& t) -> caf::result<upload_tensor_reply> {
          self->state.tally.count();
          return noted(self, upload_tensor(self, who, t));
        },
        [=](delete_atom, tensors_atom, const caller& who, const std::string& id) -> caf::result<deleted_reply> {
          self->state.tally.count();
          return noted(self, delete_tensor(self, who, id));
        },
        // ------------------------------------------------------------ cancellation
        [=](cancel_atom, const caf::actor_addr& requester) {
          self->state.tally.count();
          auto& S = self->state;
          auto it = S.running.find(requester);
          if (it == S.running.end()) return;  // answered already
          caf::anon_send(it->second.first, runcancel_atom::value, it->second.second);
          S.running.erase(it);
        },
        // ------------------------------------------------------------ the console
        [=](describe_atom) {
          self->state.tally.count();
          return describe_coordinator(self);
        },
        [=](actors_atom) -> caf::result<std::vector<actor_snapshot>> {
          self->state.tally.count();
          return describe_grid(self);
        },
        [=](gridevent_atom, grid_event& e, describable who) { on_grid_event(self, e, std::move(who)); },
        [=](subscribe_atom, grid_listener l) { add_listener(self, std::move(l)); },
        // ------------------------------------------------------------ metrics
        [=](metrics_atom) -> caf::result<std::uint64_t, std::uint64_t, std::uint64_t, std::vector<worker_status>> {
          self->state.tally.count();
          auto& S = self->state;
          const std::uint64_t sessions = S.sessions.size(), graphs = S.graphs.size(), models = S.models.size();
          auto rp = self->make_response_promise<std::uint64_t, std::uint64_t, std::uint64_t, std::vector<worker_status>>();
          // (the pool asks each worker's front, which answers while its compute side is busy)
          self->request(S.pool, control, workers_atom::value)
              .then([=](std::vector<worker_status>& ws) mutable { rp.deliver(sessions, graphs, models, std::move(ws)); },
                    [=](caf::error& e) mutable { fail(self, rp, std::move(e)); });
          return rp;
        },
    };
  });
}

}  // namespace mpakt
