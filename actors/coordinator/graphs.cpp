/// Graph handlers of the coordinator: routing a graph call by its references to the worker
/// that holds them and running it there (inline or compiled, journaled for checkpointed
/// sessions, sent again after a lost worker), tensorId resolution, templates (compile, list,
/// delete).

#include "actors/coordinator/handlers.hpp"

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

namespace mpakt::coord {

using namespace std::chrono_literals;

result<routed> route(coordinator_pointer self, const caller& who, const graph_refs& refs, const std::string& primary,
                     const std::vector<std::string>& sessions) {
  auto& S = self->state;
  routed r;
  auto pin = [&](const worker_actor& w, const std::string& what) -> status {
    if (S.is_recovering(w)) {
      r.wait = true;
      return {};
    }
    if (S.is_lost(w)) return make_error(errc::unavailable, lost_message(what));
    if (!r.worker) {
      r.worker = w;
    } else if (r.worker != w) {
      return make_error(errc::conflict, what + " lives on a different worker from the rest of the graph");
    }
    return {};
  };
  std::vector<std::string> all_sessions = sessions;
  if (all_sessions.empty() && !primary.empty()) all_sessions.push_back(primary);
  for (const auto& sid : all_sessions) {
    auto* s = S.find(S.sessions, sid, who);
    if (!s) return make_error(errc::not_found, "session " + sid + " does not exist");
    if (s->restoring) r.wait = true;
    MPAKT_TRY(pin(s->worker, "session " + sid));
    if (!r.wait) MPAKT_TRY(s->take_restored_note());
  }
  // Inputs: owned models and v2 tensors (tensorIds of weights the edge rewrote already).
  for (const auto& in : refs.inputs) {
    const std::string at = "inputs[" + std::to_string(in.input) + "] (" + in.name + ")";
    if (in.weight) {
      auto* m = S.find(S.models, in.id, who);
      if (!m) return make_error(errc::not_found, at + ": model " + in.id + " does not exist");
      MPAKT_TRY(pin(m->worker, "model " + in.id));
      r.models.insert(in.id);
    } else if (auto* t = S.find(S.tensors, in.id, who)) {
      MPAKT_TRY(pin(t->worker, "tensor " + in.id));
    } else {
      return make_error(errc::not_found, at + ": tensor " + in.id + " does not exist");
    }
  }
  return r;
}

/// Runs a routed graph request on `w` (through the session's actor when there is one, or
/// the compiled graph's) and delivers the worker's reply. A success on a checkpointed
/// session is journaled (for replay after an automatic restore). A failure because the
/// worker left the grid starts its recovery and answers errc::retry: the edge, which still
/// holds the request, sends it again, and it then waits for the recovery and is routed
/// afresh — so a client does not notice a lost worker whose weights and checkpointed
/// sessions could be placed again, and the coordinator keeps no copy of a graph in flight.
void run_on(coordinator_pointer self, caf::typed_response_promise<run_reply> rp, run_request req, worker_actor w,
            std::optional<graph_actor> compiled, caf::actor_addr requester) {
  auto& S = self->state;
  const std::string primary = req.session.empty() && !req.sessions.empty() ? req.sessions.front() : req.session;
  // Only a call on a checkpointed session is kept, for its journal, and only while the key's
  // checkpoints and journals fit its durable budget (a bigger one is not even copied).
  std::shared_ptr<run_request> journaled;
  bool over_budget = false;
  if (auto s = S.sessions.find(primary); !primary.empty() && s != S.sessions.end() && S.checkpoints.count(primary)) {
    over_budget = S.durable_held(s->second.key_id) + session_entry::journal_cost(req) > S.cfg.durable_budget_bytes;
    if (!over_budget) journaled = std::make_shared<run_request>(req);
  }
  const bool multi = req.sessions.size() > 1;
  // The worker stops the call at the graph limit; the requester (an HTTP request) may
  // cancel it by this id when its client goes away.
  req.timeout_ms = std::uint64_t(S.cfg.timeouts.graph.count());
  req.run_id = "r_" + std::to_string(++S.next_run);
  const std::string run_id = req.run_id;
  if (requester && requester != self->address() && w) S.running[requester] = {w, run_id};
  auto forget = [self, requester, run_id] {
    auto it = self->state.running.find(requester);
    if (it != self->state.running.end() && it->second.second == run_id) self->state.running.erase(it);
  };
  auto retry = [] {
    return to_caf(errc::retry, "the graph's worker left the grid while running it; send the call again");
  };
  // Exactly one of: the reply, the error, or the worker's loss settles the call.
  std::function<bool()> settle = [] { return true; };
  if (w) settle = track_call(self, w.address(), [self, rp, retry]() mutable { fail(self, rp, retry()); });
  auto done = [self, rp, primary, journaled, over_budget, multi, settle, forget](run_reply& reply) mutable {
    forget();
    if (!settle()) return;
    auto& S = self->state;
    if (auto it = S.sessions.find(primary); it != S.sessions.end() && S.checkpoints.count(primary)) {
      auto& e = it->second;
      if (multi) e.journal_broken = "a multi-session graph ran on it";
      else if (over_budget) e.journal_broken = journal_over_budget(S.cfg.durable_budget_bytes);
      else if (!journaled) e.journal_broken = "a call ran on it while its checkpoint was being taken";
      else if (e.journal.size() >= max_journal) e.journal_broken = "more than " + std::to_string(max_journal) + " calls since the checkpoint";
      else if (e.journal_broken.empty()) e.journal_add(std::move(journaled));
    }
    rp.deliver(std::move(reply));
  };
  auto failed = [self, rp, w, retry, settle, forget](caf::error& e) mutable {
    forget();
    if (!settle()) return;
    if (actor_gone(e) && w) {
      on_worker_lost(self, w.address());
      fail(self, rp, retry());
      return;
    }
    if (e == caf::sec::request_timeout) {
      fail(self, rp, graph_timeout_error(self->state.cfg.timeouts, "its worker"));
      return;
    }
    fail(self, rp, e);
  };
  const auto limit = S.cfg.timeouts.graph + S.cfg.timeouts.answer_grace;
  if (compiled && !primary.empty()) {
    // Through the session's actor, which counts the step and runs on its worker.
    auto it = S.sessions.find(primary);
    self->request(it->second.actor, limit + std::chrono::seconds(5), run_atom::value, std::move(req), *compiled)
        .then(done, failed);
    return;
  }
  if (compiled) {
    self->request(*compiled, limit + std::chrono::seconds(5), run_atom::value, std::move(req), w).then(done, failed);
    return;
  }
  if (!primary.empty()) {
    auto it = S.sessions.find(primary);
    self->request(it->second.actor, limit + std::chrono::seconds(5), run_atom::value, std::move(req)).then(done, failed);
    return;
  }
  self->request(w, limit, run_atom::value, std::move(req)).then(done, failed);
}

/// The worker to use when a graph names no session or weights: the one with most free
/// among those offering every op and feature the graph uses.
void with_any_worker(coordinator_pointer self, std::vector<std::string> needs, std::function<void(result<worker_actor>)> k) {
  // (one callback shared by both handlers: what it holds is never copied)
  auto kp = std::make_shared<std::function<void(result<worker_actor>)>>(std::move(k));
  self->request(self->state.pool, std::chrono::seconds(10), pick_atom::value, std::uint64_t(0), std::move(needs))
      .then([kp](worker_actor& w, worker_status&) { (*kp)(w); }, [kp](caf::error& e) { (*kp)(from_caf(e)); });
}

caf::result<run_reply> run_graph(coordinator_pointer self, const caller& who, graph_call& call) {
  auto& S = self->state;
  // A call touching a lost worker whose models and sessions are being placed again waits
  // for that (holding the call, not a copy of it), then is routed afresh; other calls go
  // on meanwhile.
  auto wait = [&] {
    auto rp = self->make_response_promise<run_reply>();
    auto held = std::make_shared<graph_call>(std::move(call));
    S.waiting.push_back([self, rp, who, held] { resend(self, rp, graph_atom::value, who, std::move(*held)); });
    return rp;
  };
  run_request req;
  req.base64 = call.base64;
  req.session = call.session;
  req.sessions = call.sessions;
  // A plain call promises no row its bits alone unless it lists several sessions (SES-20).
  req.free_rows = call.sessions.size() <= 1;
  // The promise is made only after the synchronous checks: an error returned once a
  // promise exists would never reach the caller.
  if (!call.graph_id.empty()) {
    auto* g = S.find(S.graphs, call.graph_id, who);
    if (!g) return to_caf(errc::not_found, "graph " + call.graph_id + " does not exist");
    req.bind_json = call.bind_json;
    req.graph_id = call.graph_id;  // the graph actor sets it too; the journal needs it here
    worker_actor w = g->worker;
    std::vector<std::string> all = req.sessions;
    if (all.empty() && !req.session.empty()) all.push_back(req.session);
    for (std::size_t i = 0; i < all.size(); ++i) {
      auto* s = S.find(S.sessions, all[i], who);
      if (!s) return to_caf(errc::not_found, "session " + all[i] + " does not exist");
      if (S.is_recovering(s->worker) || s->restoring) return wait();
      if (S.is_lost(s->worker)) return to_caf(errc::unavailable, lost_message("session " + all[i]));
      if (auto note = s->take_restored_note(); !note) return to_caf(note.err());
      if (i == 0) w = s->worker;
      else if (s->worker != w)
        return to_caf(errc::conflict, "session " + all[i] + " lives on a different worker from session " + all[0]);
    }
    for (const auto& mid : g->models) {
      auto* m = S.find(S.models, mid, who);
      if (!m) return to_caf(errc::not_found, "model " + mid + ", which graph " + call.graph_id + " reads, no longer exists");
      if (S.is_recovering(m->worker)) return wait();
      if (S.is_lost(m->worker)) return to_caf(errc::unavailable, lost_message("model " + mid));
    }
    // (before the promise, which takes the sender over)
    const auto requester = caf::actor_cast<caf::actor_addr>(self->current_sender());
    auto rp = self->make_response_promise<run_reply>();
    run_on(self, rp, std::move(req), w, g->actor, requester);
    return rp;
  }
  auto r = route(self, who, call.refs, call.session, call.sessions);
  if (!r) return to_caf(r.err());
  if (r->wait) return wait();
  req.graph_json = std::move(call.graph_json);
  req.server_params = call.server_params;
  // (before the promise, which takes the sender over)
  const auto requester = caf::actor_cast<caf::actor_addr>(self->current_sender());
  auto rp = self->make_response_promise<run_reply>();
  if (r->worker) {
    run_on(self, rp, std::move(req), r->worker, std::nullopt, requester);
  } else {
    // The request may hold a body of hundreds of MB (an inline graph with its inputs): it
    // waits for the pick behind a pointer, so the callbacks that carry it copy none of it.
    auto held = std::make_shared<run_request>(std::move(req));
    with_any_worker(self, call.refs.needs, [=](result<worker_actor> w) mutable {
      if (!w) fail(self, rp, to_caf(w.err()));
      else run_on(self, rp, std::move(*held), *w, std::nullopt, requester);
    });
  }
  return rp;
}

std::vector<std::string> resolve_weights(coordinator_pointer self, const caller& who, const std::vector<std::string>& ids) {
  auto& S = self->state;
  std::vector<std::string> out;
  for (const auto& id : ids) {
    if (S.find(S.tensors, id, who)) continue;  // a v2 upload: read as is
    auto w = S.weight_ids.find(id);
    if (w == S.weight_ids.end() || !S.find(S.models, w->second.first, who)) continue;
    out.insert(out.end(), {id, w->second.first, w->second.second});
  }
  return out;
}

caf::result<compile_graph_reply> compile_graph(coordinator_pointer self, const caller& who, compile_call& call) {
  auto& S = self->state;
  if (S.count_for_key(S.graphs, who.key_id) >= S.cfg.max_graphs_per_key)
    return to_caf(errc::limit, "this key already holds " + std::to_string(S.cfg.max_graphs_per_key) +
                                   " compiled graphs, the limit; delete one first");
  // The templates' text is held here for as long as they exist (and by each worker that ran
  // one): a key's together stay within its graph budget.
  std::uint64_t held = 0;
  for (const auto& [_, g] : S.graphs)
    if (g.key_id == who.key_id) held += g.text_bytes;
  if (held + call.graph_json.size() > S.cfg.graph_budget_bytes)
    return to_caf(errc::too_large, "compiled graph needs " + std::to_string(call.graph_json.size()) + " bytes but only " +
                                       std::to_string(S.cfg.graph_budget_bytes > held ? S.cfg.graph_budget_bytes - held : 0) +
                                       " bytes of this key's compiled-graph budget are available; delete one first");
  auto r = route(self, who, call.refs, "", {});
  if (!r) return to_caf(r.err());
  const std::string gid = new_id("gt_");
  graph_entry e;
  e.account = who.account;
  e.key_id = who.key_id;
  e.created_at = now_iso();
  e.label = call.label;
  e.body_bytes = call.body_bytes;
  e.per_call_bytes = call.per_call_bytes;
  e.text_bytes = call.graph_json.size();
  e.models = r->models;
  e.actor = spawn_graph(self->system(), gid, std::move(call.graph_json), S.cfg.timeouts);
  self->link_to(e.actor);
  auto rp = self->make_response_promise<compile_graph_reply>();
  auto compile = [=](worker_actor w) mutable {
    self->request(e.actor, S.cfg.timeouts.graph + std::chrono::seconds(5), compile_atom::value, w)
        .then(
            [=](compile_reply& c) mutable {
              graph_entry g = e;
              g.worker = w;
              g.steps = c.steps;
              g.bindings = c.bindings;
              self->state.graphs[gid] = g;
              rp.deliver(compile_graph_reply{gid, g.label, g.steps, g.bindings, g.body_bytes, g.per_call_bytes, c.features});
            },
            [=](caf::error& err) mutable {
              caf::anon_send(e.actor, delete_atom::value);
              fail(self, rp, err);
            });
  };
  if (r->worker) {
    compile(r->worker);
  } else {
    with_any_worker(self, call.refs.needs, [=](result<worker_actor> w) mutable {
      if (!w) {
        caf::anon_send(e.actor, delete_atom::value);
        fail(self, rp, to_caf(w.err()));
      } else {
        compile(*w);
      }
    });
  }
  return rp;
}

caf::result<list_graphs_reply> list_graphs(coordinator_pointer self, const caller& who) {
  list_graphs_reply r;
  for (const auto& [id, g] : self->state.graphs)
    if (g.account == who.account)
      r.graphs.push_back(graph_view{id, g.label, g.steps, g.bindings, g.body_bytes, g.per_call_bytes, g.created_at});
  return r;
}

caf::result<deleted_reply> delete_graph(coordinator_pointer self, const caller& who, const std::string& id) {
  auto& S = self->state;
  auto* g = S.find(S.graphs, id, who);
  if (!g) return to_caf(errc::not_found, "graph " + id + " does not exist");
  caf::anon_send(g->actor, delete_atom::value);
  S.graphs.erase(id);
  return deleted_reply{"graph", id};
}

}  // namespace mpakt::coord
