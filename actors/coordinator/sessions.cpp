/// Session handlers of the coordinator: open (on the worker of its model, or any), describe,
/// close; and their durability: checkpoint, restore, a generation's journal of fed tokens.

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

caf::result<open_session_reply> open_session(coordinator_pointer self, const caller& who, const session_call& call) {
  const auto control = self->state.cfg.timeouts.control;
  auto& S = self->state;
  const std::string model_id = call.model_id, label = call.label;  // (copies: the answer comes later)
  if (S.count_for_key(S.sessions, who.key_id) >= S.cfg.max_sessions_per_key)
    return to_caf(errc::limit, "this key already holds " + std::to_string(S.cfg.max_sessions_per_key) +
                                   " sessions, the limit; delete one first");
  auto* m = model_id.empty() ? nullptr : S.find(S.models, model_id, who);
  if (!model_id.empty() && !m) return to_caf(errc::not_found, "model " + model_id + " does not exist");
  auto rp = self->make_response_promise<open_session_reply>();
  auto open = [=](worker_actor w) mutable {
    const std::string sid = new_id("s_");
    self->request(w, control, sopen_atom::value, sid)
        .then(
            [=](bool) mutable {
              auto& S = self->state;
              session_entry e;
              e.account = who.account;
              e.key_id = who.key_id;
              e.created_at = now_iso();
              e.worker = w;
              S.watch(self, w);
              e.model_id = model_id;
              e.label = label;
              e.actor = spawn_session(self->system(), sid, w, S.cfg.timeouts);
              self->link_to(e.actor);
              S.sessions[sid] = e;
              S.emit(grid_event{0, 0, "opened", "session", sid, S.worker_id_of(w)});
              rp.deliver(open_session_reply{sid, e.model_id, e.label, e.created_at});
            },
            [=](caf::error& e) mutable {
              // The model's worker left the grid as the session was asked for: the model is
              // being placed again (or is lost), which says more than "a worker went away".
              if (!model_id.empty() && actor_gone(e))
                return fail(self, rp,
                            to_caf(errc::unavailable, "model " + model_id + " lost its worker just now and is being placed "
                                                      "again where it can be; open the session again in a moment"));
              fail(self, rp, e);
            });
  };
  if (m) {
    open(m->worker);  // a session lives where its model's weights are
  } else {
    with_any_worker(self, {}, [=](result<worker_actor> w) mutable {
      if (!w) fail(self, rp, to_caf(w.err()));
      else open(*w);
    });
  }
  return rp;
}

caf::result<session_state_reply> describe_session(coordinator_pointer self, const caller& who, const std::string& id) {
  const auto control = self->state.cfg.timeouts.control;
  auto& S = self->state;
  auto* s = S.find(S.sessions, id, who);
  if (!s) return to_caf(errc::not_found, "session " + id + " does not exist");
  if (S.is_lost(s->worker)) return to_caf(errc::unavailable, lost_message("session " + id));
  auto rp = self->make_response_promise<session_state_reply>();
  const session_entry e = *s;
  self->request(s->actor, control, info_atom::value)
      .then(
          [=](session_info& info, std::uint64_t steps) mutable {
            session_state_reply r{id, e.model_id, e.label, e.created_at, {}, info.bytes, steps};
            for (auto& t : info.tensors)
              r.tensors.push_back(session_tensor{std::move(t.name), std::move(t.shape), std::move(t.dtype), t.bytes});
            rp.deliver(std::move(r));
          },
          [=](caf::error& e) mutable { fail(self, rp, e); });
  return rp;
}

caf::result<deleted_reply> close_session(coordinator_pointer self, const caller& who, const std::string& id) {
  auto& S = self->state;
  auto* s = S.find(S.sessions, id, who);
  if (!s) return to_caf(errc::not_found, "session " + id + " does not exist");
  caf::anon_send(s->actor, delete_atom::value);
  S.sessions.erase(id);
  S.checkpoints.erase(id);
  S.emit(grid_event{0, 0, "closed", "session", id, ""});
  return deleted_reply{"session", id};
}

void journal_generation(coordinator_pointer self, const caller& who, gen_journal& j) {
  auto& S = self->state;
  auto* s = S.find(S.sessions, j.session_id, who);
  if (!s) return;
  if (S.checkpoints.count(j.session_id) && s->journal_broken.empty()) {
    std::uint64_t held = S.durable_held(s->key_id);
    for (std::size_t i = 0; i < j.fed.size(); ++i) {
      if (s->journal.size() >= max_journal) {
        s->journal_broken = "more than " + std::to_string(max_journal) + " calls since the checkpoint";
        break;
      }
      const gen_call call = make_gen_call(j.bindings, {j.fed[i]}, j.start_pos + std::int64_t(i), j.sampling);
      run_request r;
      r.graph_id = j.graph_id;
      r.bind_json = call.bind_json;
      r.overrides = call.overrides;
      r.session = j.session_id;
      held += session_entry::journal_cost(r);
      if (held > S.cfg.durable_budget_bytes) {
        s->journal_broken = journal_over_budget(S.cfg.durable_budget_bytes);
        break;
      }
      s->journal_add(std::make_shared<const run_request>(std::move(r)));
    }
  }
  // The run that fed them is over (a generation that lost its worker asks for a new
  // plan with replan, which counts it again).
  s->generating = std::max(0, s->generating - 1);
  if (s->generating == 0) {
    if (auto after = std::move(s->after_reports)) {
      s->after_reports = nullptr;
      after();
    }
  }
}

void report_due(coordinator_pointer self, const std::string& sid) {
  auto it = self->state.sessions.find(sid);
  if (it == self->state.sessions.end() || !it->second.after_reports) return;
  // Without the generation's tokens the journal is incomplete: restoring would give
  // caches that differ from the client's view, so the session stays lost.
  it->second.journal_broken = "a generation on it never reported what it fed";
  it->second.generating = 0;
  auto after = std::move(it->second.after_reports);
  it->second.after_reports = nullptr;
  after();
}

caf::result<checkpoint_reply> checkpoint_session(coordinator_pointer self, const caller& who, const std::string& id) {
  const auto control = self->state.cfg.timeouts.control;
  auto& S = self->state;
  auto* s = S.find(S.sessions, id, who);
  if (!s) return to_caf(errc::not_found, "session " + id + " does not exist");
  if (S.is_lost(s->worker)) return to_caf(errc::unavailable, lost_message("session " + id));
  auto rp = self->make_response_promise<checkpoint_reply>();
  const session_entry e = *s;
  // The durable budget is checked before anything is fetched (CKP-06).
  self->request(e.actor, control, info_atom::value)
      .then(
          [=](session_info& info, std::uint64_t steps) mutable {
            auto& S = self->state;
            // (this session's journal goes with its old checkpoint)
            const std::uint64_t held = S.durable_held(who.key_id, id);
            const std::uint64_t budget = S.cfg.durable_budget_bytes;
            if (held + info.bytes > budget) {
              fail(self, rp, to_caf(errc::too_large, "checkpoint of session " + id + " needs " + std::to_string(info.bytes) +
                                                     " bytes but only " + std::to_string(budget > held ? budget - held : 0) +
                                                     " bytes of this key's durable budget are available"));
              return;
            }
            self->request(e.worker, S.cfg.timeouts.graph, sdump_atom::value, id)
                .then(
                    [=](session_dump& d) mutable {
                      // (the bytes the copy holds, whatever the worker said — a volunteer's may
                      // understate them — are what the budget counts)
                      const std::uint64_t carried = d.carried();
                      d.bytes = carried;
                      const std::uint64_t held_now = self->state.durable_held(who.key_id, id);
                      if (held_now + carried > budget) {
                        fail(self, rp, to_caf(errc::too_large, "checkpoint of session " + id + " holds " + std::to_string(carried) +
                                                               " bytes but only " + std::to_string(budget > held_now ? budget - held_now : 0) +
                                                               " bytes of this key's durable budget are available"));
                        return;
                      }
                      // Only a complete copy replaces the previous checkpoint (CKP-07).
                      const std::size_t n = d.tensors.size();
                      const std::uint64_t bytes = d.bytes;
                      self->state.checkpoints[id] = checkpoint_entry{who.key_id, std::make_shared<const session_dump>(std::move(d)), steps};
                      if (auto it = self->state.sessions.find(id); it != self->state.sessions.end())
                        it->second.journal_reset();  // replay starts from this checkpoint
                      rp.deliver(checkpoint_reply{id, n, bytes, steps});
                    },
                    [=](caf::error& err) mutable { fail(self, rp, err); });
          },
          [=](caf::error& err) mutable { fail(self, rp, err); });
  return rp;
}

caf::result<checkpoint_reply> restore_session(coordinator_pointer self, const caller& who, const std::string& id) {
  const auto control = self->state.cfg.timeouts.control;
  auto& S = self->state;
  auto* s = S.find(S.sessions, id, who);
  if (!s) return to_caf(errc::not_found, "session " + id + " does not exist");
  auto c = S.checkpoints.find(id);
  if (c == S.checkpoints.end())
    return to_caf(errc::conflict, "session " + id + " has no checkpoint; POST /api/v3/sessions/" + id + "/checkpoint first");
  auto rp = self->make_response_promise<checkpoint_reply>();
  const worker_actor old = s->worker;
  // Any worker with room; a session that must stay with its model's weights goes
  // back where they are.
  auto place = [=](worker_actor target) mutable {
    put_checkpoint_back(self, id, target, [=](caf::error failed) mutable {
      if (failed) {
        fail(self, rp, failed);
        return;
      }
      auto& S = self->state;
      auto it = S.sessions.find(id);
      auto ck = S.checkpoints.find(id);
      if (old != target) caf::anon_send(old, sclose_atom::value, id);
      it->second.journal_reset();  // the session is at its checkpoint again
      it->second.restored_note.clear();
      const auto& d = *ck->second.dump;
      rp.deliver(checkpoint_reply{id, d.tensors.size(), d.bytes, ck->second.steps});
    });
  };
  auto* m = s->model_id.empty() ? nullptr : S.find(S.models, s->model_id, who);
  if (m) {
    place(m->worker);
  } else {
    self->request(S.pool, control, pick_atom::value, c->second.dump->bytes)
        .then([=](worker_actor& w, worker_status&) mutable { place(w); },
              [=](caf::error& err) mutable { fail(self, rp, err); });
  }
  return rp;
}

}  // namespace mpakt::coord
