// The console's side of the coordinator: it describes itself, gathers every long-lived
// actor's snapshot into one picture (each asked with a short timeout, so a slow or dead one
// costs at most that and is listed as not answering), links them by id from its directory,
// and relays grid events to the listeners (docs/protocol.md, "Describing the grid").

#include <algorithm>
#include <chrono>
#include <memory>

#include "actors/coordinator/handlers.hpp"

namespace mpakt::coord {

namespace {

/// How long the picture waits for any one actor. A worker's front answers at once even while
/// its compute side is busy; an actor that takes longer is listed with answered = false.
constexpr auto describe_timeout = std::chrono::milliseconds(1500);

/// What the coordinator knows of an actor, before (or instead of) its own answer.
struct target {
  describable handle;
  actor_snapshot known;
  /// Described from state shared with it, not asked (a load job: it answers no message
  /// while it loads).
  bool from_state = false;
};

/// Adds what the directory knows to what the actor said of itself.
void merge(actor_snapshot& said, actor_snapshot known) {
  for (auto& l : known.links)
    if (std::find(said.links.begin(), said.links.end(), l) == said.links.end()) said.links.push_back(std::move(l));
  for (auto& n : known.numbers) said.numbers.push_back(std::move(n));
  for (auto& t : known.texts) said.texts.push_back(std::move(t));
  if (said.id.empty()) said.id = known.id;
}

actor_snapshot known(std::string kind, std::string id) {
  actor_snapshot s;
  s.kind = std::move(kind);
  s.id = std::move(id);
  return s;
}

/// Every actor to ask, each with what the directory says of it (its links, above all).
std::vector<target> targets(coordinator_state& S) {
  std::vector<target> out;
  auto pool = known("pool", "pool");
  out.push_back({caf::actor_cast<describable>(S.pool), std::move(pool)});
  for (const auto& [addr, w] : S.workers) {
    auto s = known("worker", w.first);
    for (const auto& [mid, m] : S.models) {
      bool here = m.worker && m.worker.address() == addr;
      for (const auto& p : m.parts) here = here || (p.worker && p.worker.address() == addr);
      if (here) s.link("model", mid);
    }
    for (const auto& [sid, e] : S.sessions)
      if (e.worker && e.worker.address() == addr) s.link("session", sid);
    out.push_back({w.second, std::move(s)});
  }
  for (const auto& [mid, m] : S.models) {
    auto s = known("model", mid);
    s.text("source", m.source);
    if (!m.quantize.empty()) s.text("quantize", m.quantize);
    s.text("owner", m.account);
    s.number("residentBytes", double(m.resident_bytes));
    s.number("publishedBytes", double(m.published_bytes));
    s.number("tensors", double(m.tensors));
    s.number("replacing", m.replacing ? 1 : 0);
    if (m.parts.empty()) {
      s.text("placement", m.worker_id);
      s.link("worker", m.worker_id);
    } else {
      std::string placement;
      for (const auto& p : m.parts) {
        placement += (placement.empty() ? "" : ", ") + p.worker_id;
        s.link("worker", p.worker_id);
      }
      s.text("placement", "spread over " + placement);
      s.link("pipeline", "pipeline of " + mid);
      auto pipe = known("pipeline", "pipeline of " + mid);
      pipe.link("model", mid);
      for (const auto& p : m.parts) pipe.link("worker", p.worker_id);
      out.push_back({caf::actor_cast<describable>(m.pipeline), std::move(pipe)});
    }
    out.push_back({caf::actor_cast<describable>(m.actor), std::move(s)});
  }
  for (const auto& [sid, e] : S.sessions) {
    auto s = known("session", sid);
    const std::string wid = S.worker_id_of(e.worker);
    if (!wid.empty()) {
      s.link(wid.rfind("pipeline of ", 0) == 0 ? "pipeline" : "worker", wid);
      s.text("worker", wid);
    }
    if (!e.model_id.empty()) {
      s.link("model", e.model_id);
      s.text("model", e.model_id);
    }
    if (!e.label.empty()) s.text("label", e.label);
    s.text("owner", e.account);
    s.number("checkpointed", S.checkpoints.count(sid) ? 1 : 0);
    s.number("journalCalls", double(e.journal.size()));
    s.number("journalBytes", double(e.journal_bytes));
    if (!e.journal_broken.empty()) s.text("journalBroken", e.journal_broken);
    s.number("generating", double(e.generating));
    s.number("lost", S.is_lost(e.worker) ? 1 : 0);
    out.push_back({caf::actor_cast<describable>(e.actor), std::move(s)});
  }
  for (const auto& [gid, g] : S.graphs) {
    auto s = known("graph", gid);
    if (!g.label.empty()) s.text("label", g.label);
    s.text("owner", g.account);
    const std::string wid = S.worker_id_of(g.worker);
    if (!wid.empty()) {
      s.text("validatedOn", wid);
      s.link(wid.rfind("pipeline of ", 0) == 0 ? "pipeline" : "worker", wid);
    }
    for (const auto& m : g.models) s.link("model", m);
    s.number("bodyBytes", double(g.body_bytes));
    s.number("perCallBytes", double(g.per_call_bytes));
    out.push_back({caf::actor_cast<describable>(g.actor), std::move(s)});
  }
  for (const auto& [mid, l] : S.loads) {
    // (its job blocks on the model host while it loads: described from what it reports)
    auto s = known("load", mid);
    if (S.models.count(mid)) s.link("model", mid);
    const auto& p = *l.progress;
    static const char* phases[] = {"placing", "transferring", "finishing"};
    s.text("phase", phases[std::clamp(p.phase.load(), 0, 2)]);
    s.text("source", l.source);
    s.text("owner", l.account);
    s.number("recovery", l.recovery ? 1 : 0);
    s.number("tensors", double(p.tensors_total.load()));
    s.number("tensorsDone", double(p.tensors_done.load()));
    s.number("publishedBytes", double(p.published_total.load()));
    s.number("transferredBytes", double(p.transferred.load()));
    s.number("residentBytes", double(p.resident.load()));
    s.number("workers", double(p.workers.load()));
    const std::uint64_t now = unix_ms_now();
    s.number("elapsedMs", double(now > l.started_unix_ms ? now - l.started_unix_ms : 0));
    s.messages = 1;  // (a job answers one request: this load)
    out.push_back({describable(), std::move(s), true});
  }
  for (const auto& [id, gen] : S.generations) {
    auto s = known("generation", id);
    s.link("session", gen.first);
    if (auto e = S.sessions.find(gen.first); e != S.sessions.end()) {
      const std::string wid = S.worker_id_of(e->second.worker);
      if (!wid.empty()) s.link(wid.rfind("pipeline of ", 0) == 0 ? "pipeline" : "worker", wid);
    }
    out.push_back({gen.second, std::move(s)});
  }
  return out;
}

/// Gives each worker's snapshot its heartbeat age: how long ago it last answered the pool
/// (the pool's probe, every few seconds, or a status call), from the pool's own snapshot.
void add_heartbeats(std::vector<actor_snapshot>& out) {
  const auto pool = std::find_if(out.begin(), out.end(), [](const actor_snapshot& s) { return s.kind == "pool"; });
  if (pool == out.end()) return;
  for (auto& s : out) {
    if (s.kind != "worker") continue;
    const std::string key = "lastAnswerAgoMs." + s.id;
    for (const auto& [name, v] : pool->numbers)
      if (name == key) s.number("heartbeatAgeMs", v);
  }
}

}  // namespace

actor_snapshot describe_coordinator(coordinator_pointer self) {
  auto& S = self->state;
  actor_snapshot s;
  s.kind = "coordinator";
  s.id = "coordinator";
  s.link("pool", "pool");
  for (const auto& [_, w] : S.workers) s.link("worker", w.first);
  s.number("models", double(S.models.size()));
  s.number("sessions", double(S.sessions.size()));
  s.number("graphs", double(S.graphs.size()));
  s.number("v2Tensors", double(S.tensors.size()));
  s.number("checkpoints", double(S.checkpoints.size()));
  int loads = 0;
  for (const auto& [_, n] : S.pending_loads) loads += n;
  s.number("loadsInProgress", double(loads));
  s.number("workersRecovering", double(S.recovering.size()));
  s.number("workersLost", double(S.lost.size()));
  s.number("callsWaitingForRecovery", double(S.waiting.size()));
  std::size_t inflight = 0;
  for (const auto& [_, calls] : S.inflight) inflight += calls.size();
  s.number("graphCallsInFlight", double(inflight));
  s.number("generations", double(S.generations.size()));
  s.number("listeners", double(S.listeners.size()));
  s.number("lastEvent", double(S.events.last_seq()));
  S.tally.fill(s, self->mailbox().size());
  return s;
}

caf::result<std::vector<actor_snapshot>> describe_grid(coordinator_pointer self) {
  auto rp = self->make_response_promise<std::vector<actor_snapshot>>();
  struct picture {
    std::vector<actor_snapshot> out;
    std::size_t pending = 0;
  };
  auto pic = std::make_shared<picture>();
  pic->out.push_back(describe_coordinator(self));
  auto ts = targets(self->state);
  pic->pending = ts.size();
  pic->out.resize(1 + ts.size());
  if (ts.empty()) {
    rp.deliver(std::move(pic->out));
    return rp;
  }
  auto one_done = [pic, rp]() mutable {
    if (--pic->pending > 0) return;
    add_heartbeats(pic->out);
    rp.deliver(std::move(pic->out));
  };
  for (std::size_t i = 0; i < ts.size(); ++i) {
    auto& t = ts[i];
    const std::size_t slot = i + 1;
    if (t.from_state || !t.handle) {
      if (!t.from_state) {
        t.known.answered = false;
        t.known.errors.push_back("no actor to ask");
      }
      pic->out[slot] = std::move(t.known);
      one_done();
      continue;
    }
    auto fallback = std::make_shared<actor_snapshot>(std::move(t.known));
    self->request(t.handle, describe_timeout, describe_atom::value)
        .then(
            [pic, slot, fallback, one_done](actor_snapshot& s) mutable {
              merge(s, std::move(*fallback));
              s.answered = true;
              pic->out[slot] = std::move(s);
              one_done();
            },
            [pic, slot, fallback, one_done](caf::error& e) mutable {
              fallback->answered = false;
              fallback->errors.push_back(e == caf::sec::request_timeout ? "did not answer describe in time"
                                                                       : from_caf(e).message);
              pic->out[slot] = std::move(*fallback);
              one_done();
            });
  }
  return rp;
}

void on_grid_event(coordinator_pointer self, grid_event& e, describable who) {
  auto& S = self->state;
  S.tally.count();
  if (e.kind == "worker" && e.what == "joined" && who) {
    S.workers[who.address()] = {e.id, who};
  } else if (e.kind == "worker" && e.what == "lost") {
    for (auto it = S.workers.begin(); it != S.workers.end(); ++it)
      if (it->second.first == e.id) {
        S.lost_ids[it->first] = e.id;
        S.workers.erase(it);
        break;
      }
  } else if (e.kind == "generation" && e.what == "started") {
    if (who) self->monitor(who);  // (one that ends without saying so is dropped all the same)
    S.generations[e.id] = {e.detail, who};
  } else if (e.kind == "generation" && e.what == "ended") {
    S.generations.erase(e.id);
  }
  e.seq = 0;  // (numbered here)
  S.emit(std::move(e));
}

void add_listener(coordinator_pointer self, grid_listener l) {
  auto& S = self->state;
  S.tally.count();
  self->monitor(l);
  S.listeners.push_back(std::move(l));
}

bool drop_listener(coordinator_pointer self, const caf::actor_addr& addr) {
  auto& S = self->state;
  for (auto it = S.generations.begin(); it != S.generations.end(); ++it)
    if (it->second.second && it->second.second.address() == addr) {
      S.generations.erase(it);
      return true;
    }
  auto& ls = S.listeners;
  const auto before = ls.size();
  ls.erase(std::remove_if(ls.begin(), ls.end(), [&](const grid_listener& l) { return l.address() == addr; }), ls.end());
  return ls.size() != before;
}

}  // namespace mpakt::coord
