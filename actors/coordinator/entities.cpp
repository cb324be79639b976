#include "actors/coordinator/entities.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>

#include "actors/errors.hpp"

namespace mpakt {

namespace {

/// The calls an entity actor has taken and not answered yet. A CAF 0.17 response promise
/// destroyed unanswered sends nothing — its caller would wait for its own timeout (minutes
/// for a graph call) — so an entity that quits (deleted) first answers each call it holds.
template <class... Ts>
struct open_calls {
  using promise = caf::typed_response_promise<Ts...>;
  struct call {
    promise rp;
    std::function<void()> stop;  ///< stops the work on its worker (a graph run: by its run id)
  };
  std::uint64_t next = 0;
  std::map<std::uint64_t, call> calls;

  std::uint64_t open(promise rp, std::function<void()> stop = {}) {
    calls.emplace(++next, call{std::move(rp), std::move(stop)});
    return next;
  }
  /// The call's promise, once: nothing when it was answered already (by fail_all).
  std::optional<promise> close(std::uint64_t id) {
    auto it = calls.find(id);
    if (it == calls.end()) return std::nullopt;
    promise rp = std::move(it->second.rp);
    calls.erase(it);
    return rp;
  }
  /// Answers every open call with `e` and stops its work.
  void fail_all(const caf::error& e) {
    for (auto& [_, c] : calls) {
      if (c.stop) c.stop();
      c.rp.deliver(e);
    }
    calls.clear();
  }
};

/// Stops a graph run on its worker (it applies nothing: docs/protocol.md, "Worker").
std::function<void()> stop_run(const worker_actor& w, const std::string& run_id) {
  if (run_id.empty()) return {};
  return [w, run_id] { caf::anon_send(w, runcancel_atom::value, run_id); };
}

struct session_state {
  std::string id;
  worker_actor worker;
  std::uint64_t steps = 0;
  entity_timeouts t;
  open_calls<run_reply> runs;
  describe_tally tally;
};

struct graph_state {
  std::string id;
  std::string graph_json;
  std::vector<caf::actor_addr> compiled_on;
  compile_reply last_compile;
  entity_timeouts t;
  open_calls<run_reply> runs;
  open_calls<compile_reply> compiles;
  describe_tally tally;
};

struct model_state {
  std::string id;
  std::vector<worker_actor> workers;
  entity_timeouts t;
  describe_tally tally;
};

}  // namespace

void limit_call(run_request& r, const entity_timeouts& t) {
  if (r.timeout_ms == 0) r.timeout_ms = std::uint64_t(t.graph.count());
}

caf::error graph_timeout_error(const entity_timeouts& t, const std::string& where) {
  return to_caf(errc::timeout, "the graph did not finish within the --graph-timeout-ms limit (" + std::to_string(t.graph.count()) +
                                   " ms) and " + where + " did not answer in time; it stops the graph at its next step "
                                   "and applies nothing");
}

namespace {
/// A session's calls fail this way once its worker is gone: its caches went with it; a call
/// its worker never answered says the limit.
caf::error session_error(const std::string& id, const caf::error& e, const entity_timeouts& t) {
  if (e == caf::sec::request_timeout) return graph_timeout_error(t, "the worker holding session " + id);
  if (!actor_gone(e)) return e;
  return to_caf(errc::unavailable, lost_message("session " + id));
}
}  // namespace

session_actor spawn_session(caf::actor_system& sys, std::string session_id, worker_actor worker, entity_timeouts t) {
  return sys.spawn([id = std::move(session_id), worker, t](session_actor::stateful_pointer<session_state> self)
                       -> session_actor::behavior_type {
    self->state.id = id;
    self->state.worker = worker;
    self->state.t = t;
    return {
        // A call that fails (stopped past its limit included) applies nothing and counts no step.
        [=](run_atom, run_request& r) -> caf::result<run_reply> {
          self->state.tally.count();
          auto rp = self->make_response_promise<run_reply>();
          const auto call = self->state.runs.open(rp, stop_run(self->state.worker, r.run_id));
          limit_call(r, self->state.t);
          self->request(self->state.worker, self->state.t.graph + self->state.t.answer_grace, run_atom::value, std::move(r))
              .then(
                  [=](run_reply& reply) mutable {
                    auto rp = self->state.runs.close(call);
                    if (!rp) return;
                    self->state.steps++;
                    rp->deliver(std::move(reply));
                  },
                  [=](caf::error& e) mutable {
                    if (auto rp = self->state.runs.close(call)) {
                      auto err = session_error(self->state.id, e, self->state.t);
                      self->state.tally.failed(from_caf(err).message);
                      rp->deliver(std::move(err));
                    }
                  });
          return rp;
        },
        [=](run_atom, run_request& r, graph_actor g) -> caf::result<run_reply> {
          self->state.tally.count();
          auto rp = self->make_response_promise<run_reply>();
          const auto call = self->state.runs.open(rp, stop_run(self->state.worker, r.run_id));
          limit_call(r, self->state.t);
          self->request(g, self->state.t.graph + self->state.t.answer_grace + std::chrono::seconds(1), run_atom::value, std::move(r),
                        self->state.worker)
              .then(
                  [=](run_reply& reply) mutable {
                    auto rp = self->state.runs.close(call);
                    if (!rp) return;
                    self->state.steps++;
                    rp->deliver(std::move(reply));
                  },
                  [=](caf::error& e) mutable {
                    if (auto rp = self->state.runs.close(call)) {
                      auto err = session_error(self->state.id, e, self->state.t);
                      self->state.tally.failed(from_caf(err).message);
                      rp->deliver(std::move(err));
                    }
                  });
          return rp;
        },
        [=](info_atom) -> caf::result<session_info, std::uint64_t> {
          self->state.tally.count();
          auto rp = self->make_response_promise<session_info, std::uint64_t>();
          self->request(self->state.worker, self->state.t.control, sinfo_atom::value, self->state.id)
              .then([=](session_info& info) mutable { rp.deliver(std::move(info), self->state.steps); },
                    [=](caf::error& e) mutable { rp.deliver(session_error(self->state.id, e, self->state.t)); });
          return rp;
        },
        [=](describe_atom) {
          auto& S = self->state;
          S.tally.count();
          actor_snapshot s;
          s.kind = "session";
          s.id = S.id;
          s.number("steps", double(S.steps));
          s.number("callsOpen", double(S.runs.calls.size()));
          S.tally.fill(s, self->mailbox().size());
          return s;
        },
        [=](move_atom, worker_actor w, std::uint64_t steps) {
          self->state.tally.count();
          self->state.worker = std::move(w);
          self->state.steps = steps;
          return true;
        },
        [=](delete_atom) -> caf::result<bool> {
          self->state.tally.count();
          auto rp = self->make_response_promise<bool>();
          // (what the worker still runs for those calls is dropped with the session there)
          self->state.runs.fail_all(to_caf(errc::not_found, "session " + self->state.id + " was deleted during this call"));
          self->request(self->state.worker, self->state.t.control, sclose_atom::value, self->state.id)
              .then(
                  [=](bool) mutable {
                    rp.deliver(true);
                    self->quit();
                  },
                  [=](caf::error&) mutable {
                    rp.deliver(true);  // the worker is gone: so is the session
                    self->quit();
                  });
          return rp;
        },
    };
  });
}

graph_actor spawn_graph(caf::actor_system& sys, std::string graph_id, std::string graph_json, entity_timeouts t) {
  return sys.spawn([id = std::move(graph_id), json = std::move(graph_json), t](graph_actor::stateful_pointer<graph_state> self)
                       -> graph_actor::behavior_type {
    self->state.id = id;
    self->state.graph_json = json;
    self->state.t = t;
    auto compiled_on = [=](const worker_actor& w) {
      const auto& v = self->state.compiled_on;
      return std::find(v.begin(), v.end(), w.address()) != v.end();
    };
    return {
        [=](compile_atom, worker_actor w) -> caf::result<compile_reply> {
          self->state.tally.count();
          if (compiled_on(w)) return self->state.last_compile;  // already planned there
          auto rp = self->make_response_promise<compile_reply>();
          const auto call = self->state.compiles.open(rp);
          self->request(w, self->state.t.graph, compile_atom::value, compile_request{self->state.id, self->state.graph_json, {}})
              .then(
                  [=](compile_reply& c) mutable {
                    auto rp = self->state.compiles.close(call);
                    if (!rp) return;
                    self->state.compiled_on.push_back(w.address());
                    self->state.last_compile = c;
                    rp->deliver(std::move(c));
                  },
                  [=](caf::error& e) mutable {
                    if (auto rp = self->state.compiles.close(call)) rp->deliver(caf::error(e));
                  });
          return rp;
        },
        [=](run_atom, run_request& r, worker_actor w) -> caf::result<run_reply> {
          self->state.tally.count();
          auto rp = self->make_response_promise<run_reply>();
          const auto call = self->state.runs.open(rp, stop_run(w, r.run_id));
          r.graph_id = self->state.id;
          limit_call(r, self->state.t);
          auto run = [=](run_request req) mutable {
            self->request(w, self->state.t.graph + self->state.t.answer_grace, run_atom::value, std::move(req))
                .then(
                    [=](run_reply& reply) mutable {
                      if (auto rp = self->state.runs.close(call)) rp->deliver(std::move(reply));
                    },
                    [=](caf::error& e) mutable {
                      if (auto rp = self->state.runs.close(call)) {
                        auto err =
                            e == caf::sec::request_timeout ? graph_timeout_error(self->state.t, "its worker") : caf::error(e);
                        self->state.tally.failed(from_caf(err).message);
                        rp->deliver(std::move(err));
                      }
                    });
          };
          if (compiled_on(w)) {
            run(std::move(r));
          } else {
            // (the call, whose bindings may be large, waits for the compile behind a pointer)
            auto held = std::make_shared<run_request>(std::move(r));
            self->request(w, self->state.t.graph, compile_atom::value, compile_request{self->state.id, self->state.graph_json, {}})
                .then(
                    [=](compile_reply&) mutable {
                      if (!self->state.runs.calls.count(call)) return;  // answered: the graph was deleted
                      self->state.compiled_on.push_back(w.address());
                      run(std::move(*held));
                    },
                    [=](caf::error& e) mutable {
                      if (auto rp = self->state.runs.close(call)) rp->deliver(caf::error(e));
                    });
          }
          return rp;
        },
        [=](describe_atom) {
          auto& S = self->state;
          S.tally.count();
          actor_snapshot s;
          s.kind = "graph";
          s.id = S.id;
          s.number("steps", double(S.last_compile.steps));
          s.number("bindings", double(S.last_compile.bindings.size()));
          std::string names;
          for (const auto& b : S.last_compile.bindings) names += (names.empty() ? "" : ", ") + b;
          s.text("bound", names);  // (what each call binds)
          s.number("compiledOn", double(S.compiled_on.size()));
          s.number("graphBytes", double(S.graph_json.size()));
          s.number("callsOpen", double(S.runs.calls.size() + S.compiles.calls.size()));
          S.tally.fill(s, self->mailbox().size());
          return s;
        },
        [=](delete_atom) {
          self->state.tally.count();
          const std::string gone = "graph " + self->state.id + " was deleted during this call";
          self->state.runs.fail_all(to_caf(errc::not_found, gone));
          self->state.compiles.fail_all(to_caf(errc::not_found, gone));
          // Workers drop their compiled copy; nothing to wait for.
          for (const auto& addr : self->state.compiled_on)
            if (auto w = caf::actor_cast<worker_actor>(addr)) caf::anon_send(w, dropgraph_atom::value, self->state.id);
          self->quit();
          return true;
        },
    };
  });
}

model_actor spawn_model(caf::actor_system& sys, std::string model_id, std::vector<worker_actor> workers, entity_timeouts t) {
  return sys.spawn([id = std::move(model_id), workers, t](model_actor::stateful_pointer<model_state> self)
                       -> model_actor::behavior_type {
    self->state.id = id;
    self->state.workers = workers;
    self->state.t = t;
    return {
        [=](describe_atom) {
          auto& S = self->state;
          S.tally.count();
          actor_snapshot s;
          s.kind = "model";
          s.id = S.id;
          s.number("holders", double(S.workers.size()));
          S.tally.fill(s, self->mailbox().size());
          return s;
        },
        [=](delete_atom) {
          self->state.tally.count();
          for (const auto& w : self->state.workers) caf::anon_send(w, dropmodel_atom::value, self->state.id);
          self->quit();
          return true;
        },
    };
  });
}

}  // namespace mpakt
