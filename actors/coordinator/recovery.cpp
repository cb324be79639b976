#include "actors/coordinator/recovery.hpp"

#include <memory>
#include <set>

#include "actors/coordinator/load_job.hpp"
#include "actors/errors.hpp"
#include "actors/generate/gen_values.hpp"
#include "actors/loader/source.hpp"
#include "actors/off_thread.hpp"
#include "runtime/graph.hpp"
#include "runtime/json.hpp"
#include "runtime/log.hpp"
#include "runtime/metrics.hpp"

namespace mpakt {

/// Runs the requests that waited for recoveries once none is left.
static void release_waiting(coordinator_pointer self) {
  auto& S = self->state;
  if (!S.recovering.empty()) return;
  auto waiting = std::move(S.waiting);
  S.waiting.clear();
  for (auto& f : waiting) f();
}

void place_model(coordinator_pointer self, const std::string& id, model_entry& m, const load_outcome& out) {
  auto& S = self->state;
  // (a spread model is never placed whole again: its lost parts are, one by one)
  m.parts.clear();
  m.worker = out.worker;
  m.worker_id = out.worker_id;
  S.watch(self, out.worker);
  if (out.part_workers.empty()) return;
  for (std::size_t p = 0; p < out.part_workers.size(); ++p) {
    m.parts.push_back({out.part_workers[p], out.part_ids[p], out.part_tensors[p], out.part_bytes[p]});
    S.watch(self, out.part_workers[p]);
  }
  m.pipeline = spawn_pipeline(self->system(), id, m.parts, S.cfg.timeouts);
  self->link_to(m.pipeline);
  m.worker = caf::actor_cast<worker_actor>(m.pipeline);
  m.worker_id = "";
}

std::function<bool()> track_call(coordinator_pointer self, caf::actor_addr where, std::function<void()> on_lost) {
  auto& S = self->state;
  auto settled = std::make_shared<bool>(false);
  const std::uint64_t id = S.next_call++;
  S.inflight[where][id] = [settled, on_lost] {
    if (*settled) return;
    *settled = true;
    on_lost();
  };
  return [self, settled, where, id] {
    if (*settled) return false;
    *settled = true;
    if (auto it = self->state.inflight.find(where); it != self->state.inflight.end()) {
      it->second.erase(id);
      if (it->second.empty()) self->state.inflight.erase(it);
    }
    return true;
  };
}

/// Replays a restored session's journal, one call after another, then calls `done` with
/// whether every call succeeded.
static void replay_journal(coordinator_pointer self, std::string sid, std::size_t i, std::function<void(bool)> done) {
  auto& S = self->state;
  auto it = S.sessions.find(sid);
  if (it == S.sessions.end()) return done(false);
  if (i == it->second.journal.size()) return done(true);
  const std::shared_ptr<const run_request> kept = it->second.journal[i];
  metrics::m().calls_replayed.with({"journal"}).inc();
  // The journal keeps its call; the worker gets a copy — of a big one, made on a helper thread
  // (the session may go meanwhile: it is looked up again before the call is sent).
  maybe_off_thread<result<run_request>>(
      self, session_entry::journal_cost(*kept) >= off_thread_bytes, [kept] { return result<run_request>(*kept); },
      [=](result<run_request>& call) mutable {
        auto& S = self->state;
        auto it = S.sessions.find(sid);
        if (!call || it == S.sessions.end()) return done(false);
        auto next = [=](run_reply&) { replay_journal(self, sid, i + 1, done); };
        auto fail = [=](caf::error&) { done(false); };
        const auto timeout = S.cfg.timeouts.graph + std::chrono::seconds(5);
        if (call->graph_id.empty()) {
          self->request(it->second.actor, timeout, run_atom::value, std::move(*call)).then(next, fail);
          return;
        }
        auto g = S.graphs.find(call->graph_id);
        if (g == S.graphs.end()) return done(false);
        self->request(it->second.actor, timeout, run_atom::value, std::move(*call), g->second.actor).then(next, fail);
      });
}

namespace {
void send_checkpoint(coordinator_pointer self, const std::string& sid, const worker_actor& target, session_dump dump,
                     std::function<void(caf::error)> done);
caf::error deleted_during_restore(const std::string& sid) {
  return to_caf(errc::not_found, "session " + sid + " was deleted during the restore");
}
}  // namespace

void put_checkpoint_back(coordinator_pointer self, const std::string& sid, const worker_actor& target,
                         std::function<void(caf::error)> done) {
  auto& S = self->state;
  // The owner may delete the session (and with it the checkpoint) at any moment of a
  // recovery: each step looks again instead of assuming it is still there.
  auto ck = S.checkpoints.find(sid);
  if (ck == S.checkpoints.end() || !S.sessions.count(sid)) return done(deleted_during_restore(sid));
  // The worker's message needs a copy of its own (the checkpoint stays here): a big one is
  // made on a helper thread, as copying hundreds of MB on this one would hold up every other
  // call to the coordinator meanwhile.
  const std::shared_ptr<const session_dump> kept = ck->second.dump;
  maybe_off_thread<result<session_dump>>(
      self, kept->bytes >= off_thread_bytes, [kept] { return result<session_dump>(*kept); },
      [=](result<session_dump>& copy) mutable {
        if (!copy) return done(to_caf(copy.err()));
        send_checkpoint(self, sid, target, std::move(*copy), std::move(done));
      });
}

namespace {
void send_checkpoint(coordinator_pointer self, const std::string& sid, const worker_actor& target, session_dump dump,
                     std::function<void(caf::error)> done) {
  auto& S = self->state;
  self->request(target, S.cfg.timeouts.graph, sload_atom::value, sid, std::move(dump))
      .then(
          [=](bool) {
            auto& S = self->state;
            auto it = S.sessions.find(sid);
            auto ck = S.checkpoints.find(sid);
            if (it == S.sessions.end() || ck == S.checkpoints.end()) {
              // Deleted while its tensors travelled: the worker must not keep them.
              caf::anon_send(target, sclose_atom::value, sid);
              return done(deleted_during_restore(sid));
            }
            it->second.worker = target;
            S.watch(self, target);
            caf::anon_send(it->second.actor, move_atom::value, target, ck->second.steps);
            done(caf::error{});
          },
          [=](caf::error& e) { done(e); });
}
}  // namespace

static void restore_one(coordinator_pointer self, const std::string& sid, std::function<void()> finish);

/// Puts a lost worker's checkpointed sessions back (on their models' new workers, or any
/// worker with room for one opened without a model) and replays what was called since each
/// checkpoint; a session whose calls since cannot be replayed is put back at its checkpoint
/// and its next call says so. Ends the recovery of `addr`.
/// The grid's `recovered` event for a lost worker whose models and checkpointed sessions
/// were placed again (as far as they could be).
static void recovered(coordinator_pointer self, const caf::actor_addr& addr, std::size_t sessions) {
  auto& S = self->state;
  std::string id = "(unnamed)";
  if (auto it = S.lost_ids.find(addr); it != S.lost_ids.end()) id = it->second;
  S.emit(grid_event{0, 0, "recovered", "worker", id,
                    "what it held was placed again (" + std::to_string(sessions) + " checkpointed sessions restored)"});
}

static void restore_sessions(coordinator_pointer self, caf::actor_addr addr) {
  auto& S = self->state;
  std::vector<std::string> ids;
  for (const auto& [sid, e] : S.sessions)
    if (e.worker && e.worker.address() == addr && S.checkpoints.count(sid)) ids.push_back(sid);
  auto pending = std::make_shared<std::size_t>(ids.size());
  auto finish = [self, addr, pending, n = ids.size()] {
    if (*pending > 0 && --*pending > 0) return;
    self->state.recovering.erase(addr);
    recovered(self, addr, n);
    release_waiting(self);
  };
  if (ids.empty()) {
    S.recovering.erase(addr);
    recovered(self, addr, 0);
    return release_waiting(self);
  }
  for (const auto& sid : ids) {
    auto& e = S.sessions.at(sid);
    if (e.generating > 0) {
      // Its generations report what they fed when they notice the loss; restore after that.
      e.after_reports = [self, sid, finish] {
        auto& S = self->state;
        auto it = S.sessions.find(sid);
        if (it == S.sessions.end()) return finish();
        restore_one(self, sid, finish);
      };
      // A report that never comes (its generation's process died too) must not hold every
      // waiting request: past the deadline the session goes back to its checkpoint without it.
      self->delayed_send(self, std::chrono::seconds(10), reportdue_atom::value, sid);
      continue;
    }
    restore_one(self, sid, finish);
  }
}

/// The models a journaled call reads (compiled: the template's; inline: its weight inputs).
static std::set<std::string> models_read(coordinator_pointer self, const run_request& call) {
  auto& S = self->state;
  if (!call.graph_id.empty()) {
    auto g = S.graphs.find(call.graph_id);
    return g == S.graphs.end() ? std::set<std::string>{} : g->second.models;
  }
  std::set<std::string> out;
  auto doc = parse_json_object(call.graph_json, "graph");
  if (!doc) return out;
  auto decl = parse_graph(*doc, false);
  if (!decl) return out;
  for (const auto& in : decl->inputs)
    if (in.kind == input_kind::weight) out.insert(in.model);
  return out;
}

/// Where a lost session goes back to: its model's (new) worker; for a session opened without
/// a model, the worker of a model its calls since the checkpoint read, else any worker with
/// room for the checkpoint (as an explicit restore picks). No worker: `k` gets none.
static void restore_target(coordinator_pointer self, const std::string& sid, std::function<void(worker_actor)> k) {
  auto& S = self->state;
  auto& e = S.sessions.at(sid);
  if (!e.model_id.empty()) {
    auto m = S.models.find(e.model_id);
    if (m == S.models.end() || S.is_lost(m->second.worker)) return k(worker_actor{});
    return k(m->second.worker);
  }
  for (const auto& call : e.journal)
    for (const auto& mid : models_read(self, *call))
      if (auto m = S.models.find(mid); m != S.models.end() && !S.is_lost(m->second.worker)) return k(m->second.worker);
  self->request(S.pool, S.cfg.timeouts.control, pick_atom::value, S.checkpoints.at(sid).dump->bytes)
      .then([k](worker_actor& w, worker_status&) { k(w); }, [k](caf::error&) { k(worker_actor{}); });
}

/// Restores one checkpointed session and replays its journal; a journal that cannot be
/// replayed (broken, or a call that fails) leaves the session at its checkpoint with a note
/// for its next call. `finish` runs when it is done either way.
static void restore_one(coordinator_pointer self, const std::string& sid, std::function<void()> finish_all) {
  auto& S0 = self->state;
  if (!S0.sessions.count(sid) || !S0.checkpoints.count(sid)) return finish_all();
  // Calls on the session wait until its checkpoint is back and its journal replayed: its
  // worker becomes the target as soon as the checkpoint is there, before the replay's first
  // call goes out (a big one is copied on a helper thread first), and a call slipping in
  // between would run on the checkpoint's state and then be overwritten by the replay.
  S0.sessions.at(sid).restoring = true;
  auto finish = [self, sid, finish_all] {
    if (auto it = self->state.sessions.find(sid); it != self->state.sessions.end()) it->second.restoring = false;
    finish_all();
  };
  const worker_actor gone = S0.sessions.at(sid).worker;
  restore_target(self, sid, [=](worker_actor target) {
    auto& S = self->state;
    if (!target || !S.sessions.count(sid) || !S.checkpoints.count(sid)) {
      metrics::m().recoveries.with({"session", "failed"}).inc();
      return finish();
    }
    // Back at the checkpoint, the journal emptied, the next call told why.
    auto at_checkpoint = [=](std::string why) {  // (a copy: it may be journal_broken itself)
      auto& S = self->state;
      auto it = S.sessions.find(sid);
      auto ck = S.checkpoints.find(sid);
      if (it == S.sessions.end() || ck == S.checkpoints.end()) return;
      it->second.journal_reset();
      it->second.restored_note = "session " + sid + " was held by a worker that left the grid and was restored from its "
                                 "checkpoint, at step " + std::to_string(ck->second.steps) + ", but the calls made since could "
                                 "not be replayed (" + why + "): it is at step " + std::to_string(ck->second.steps) +
                                 " now; make those calls again from there";
    };
    put_checkpoint_back(self, sid, target, [=](caf::error failed) {
      if (failed) {
        metrics::m().recoveries.with({"session", "failed"}).inc();
        return finish();  // stays lost: its next call says to prefill again
      }
      auto& S = self->state;
      auto it = S.sessions.find(sid);
      if (it == S.sessions.end()) return finish();
      if (!it->second.journal_broken.empty()) {
        at_checkpoint(it->second.journal_broken);
        metrics::m().recoveries.with({"session", "at_checkpoint"}).inc();
        return finish();
      }
      replay_journal(self, sid, 0, [=](bool ok) {
        if (ok) metrics::m().recoveries.with({"session", "ok"}).inc();
        if (ok || !self->state.sessions.count(sid)) return finish();  // (deleted meanwhile: nothing to put back)
        // Half-replayed caches must not pass for good ones: the checkpoint goes back again.
        put_checkpoint_back(self, sid, target, [=](caf::error again) {
          if (again) {
            if (auto it = self->state.sessions.find(sid); it != self->state.sessions.end()) it->second.worker = gone;
            metrics::m().recoveries.with({"session", "failed"}).inc();
          } else {
            at_checkpoint("a call since the checkpoint failed when replayed");
            metrics::m().recoveries.with({"session", "at_checkpoint"}).inc();
          }
          finish();
        });
      });
    });
  });
}

/// A worker holding part of spread models left the grid: for each such model, calls in flight
/// through its pipeline are sent again once recovered, the part's tensors are fetched again
/// from the model host onto one other worker, the pipeline uses that worker in the lost one's
/// stead, and the model's checkpointed sessions are restored (restore_sessions on the
/// pipeline). Sessions with tensors on the lost worker and no checkpoint stay lost.
static void recover_parts(coordinator_pointer self, const caf::actor_addr& addr) {
  auto& S = self->state;
  for (auto& [id, m] : S.models) {
    for (std::size_t p = 0; p < m.parts.size(); ++p) {
      if (m.parts[p].worker.address() != addr) continue;
      const caf::actor_addr pipe = m.pipeline.address();
      S.recovering.insert(pipe);
      if (auto it = S.inflight.find(pipe); it != S.inflight.end()) {
        auto calls = std::move(it->second);
        S.inflight.erase(it);
        for (auto& [_, abort] : calls) abort();
      }
      caf::anon_send(m.pipeline, partlost_atom::value, std::uint32_t(p), true);
      load_job_request req;
      req.model_id = id;
      req.source = loader::pinned_source(m.source, m.commit);  // the very files it had
      req.token = m.token;
      req.quantize = m.quantize;
      req.names = m.parts[p].tensors;
      req.allow_spread = false;
      const std::string model_id = id;
      const pipeline_actor pipeline = m.pipeline;
      auto finish = [self, pipe] {
        self->state.recovering.erase(pipe);
        release_waiting(self);
      };
      auto job = spawn_load_job(self->system(), S.cfg.load, S.pool);
      self->request(job, std::chrono::minutes(30), load_atom::value, req)
          .then(
              [=](load_outcome& out) {
                auto m = self->state.models.find(model_id);
                if (m == self->state.models.end()) return finish();
                auto& part = m->second.parts[p];
                part.worker = out.worker;
                part.worker_id = out.worker_id;
                part.resident_bytes = out.resident_bytes;
                self->state.watch(self, out.worker);
                self->request(pipeline, self->state.cfg.timeouts.control, place_atom::value, std::uint32_t(p), out.worker)
                    .then([self, pipe](bool) { restore_sessions(self, pipe); }, [finish](caf::error&) { finish(); });
              },
              [self, pipeline, p, finish](caf::error&) {
                // Nowhere to put it: the model's calls say to load it again.
                caf::anon_send(pipeline, partlost_atom::value, std::uint32_t(p), false);
                finish();
              });
    }
  }
}

/// A worker left the grid: its models are fetched again from their model host onto other
/// workers (the same tensors, the same quantization), then its checkpointed sessions are
/// restored (restore_sessions). Requests arriving meanwhile wait and then run normally.
void on_worker_lost(coordinator_pointer self, const caf::actor_addr& addr) {
  auto& S = self->state;
  if (!S.lost.insert(addr).second) return;
  S.recovering.insert(addr);
  if (auto it = S.workers.find(addr); it != S.workers.end()) S.lost_ids[addr] = it->second.first;
  metrics::m().workers_lost.with().inc();
  log::line("warn", "coordinator", "a worker left the grid: recovering what it held");
  // Calls in flight there will never be answered: send them again once recovered.
  if (auto it = S.inflight.find(addr); it != S.inflight.end()) {
    auto calls = std::move(it->second);
    S.inflight.erase(it);
    metrics::m().calls_replayed.with({"in_flight"}).inc(double(calls.size()));
    for (auto& [_, abort] : calls) abort();
  }
  recover_parts(self, addr);
  std::vector<std::string> models;
  for (auto& [id, m] : S.models)
    if (m.worker && m.worker.address() == addr) {
      m.replacing = true;
      models.push_back(id);
    }
  if (models.empty()) return restore_sessions(self, addr);
  auto pending = std::make_shared<std::size_t>(models.size());
  for (const auto& id : models) {
    load_job_request req;
    req.model_id = id;
    req.source = loader::pinned_source(S.models.at(id).source, S.models.at(id).commit);  // the very files it had
    req.token = S.models.at(id).token;
    req.quantize = S.models.at(id).quantize;
    for (const auto& [tid, where] : S.weight_ids)
      if (where.first == id) req.names.push_back(where.second);
    auto done = [self, addr, pending] {
      if (--*pending == 0) restore_sessions(self, addr);
    };
    // The pool drops the dead worker before this request reaches it (its own monitor fired
    // first), so the job places on the workers that are left.
    auto progress = std::make_shared<load_progress>();
    S.loads[id] = load_entry{req.source, S.models.at(id).account, true, unix_ms_now(), progress};
    auto job = spawn_load_job(self->system(), S.cfg.load, S.pool, progress);
    self->request(job, std::chrono::minutes(30), load_atom::value, req)
        .then(
            [=](load_outcome& out) {
              self->state.loads.erase(id);
              // The workers left may hold it only spread: then every part is recorded, and
              // a pipeline serves it (sessions are restored onto that).
              if (auto m = self->state.models.find(id); m != self->state.models.end()) {
                place_model(self, id, m->second, out);
                m->second.replacing = false;
              }
              metrics::m().recoveries.with({"model", "ok"}).inc();
              done();
            },
            [=](caf::error&) {
              self->state.loads.erase(id);
              // Nowhere to put it: the model stays lost and its calls say to load it again.
              if (auto m = self->state.models.find(id); m != self->state.models.end()) m->second.replacing = false;
              metrics::m().recoveries.with({"model", "failed"}).inc();
              done();
            });
  }
}

}  // namespace mpakt
