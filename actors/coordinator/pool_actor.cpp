#include "actors/coordinator/pool_actor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "actors/errors.hpp"

namespace mpakt {

namespace {

struct pool_state {
  std::vector<worker_actor> workers;
  /// Bytes the pool may use of a volunteer whose join token carries a memory cap.
  std::map<caf::actor_addr, std::uint64_t> caps;
  /// Measured end-to-end time of the probe call per worker (moving average), milliseconds.
  std::map<caf::actor_addr, double> measured_ms;
  /// When each worker last answered the pool (a probe or a status): how stale its numbers
  /// may be, as the console shows it.
  std::map<caf::actor_addr, std::chrono::steady_clock::time_point> last_answer;
  bool probing = false;  ///< the periodic re-probe is scheduled
  /// Each worker's id, as its front last said (named in the joined and lost events).
  std::map<caf::actor_addr, std::string> ids;
  /// Who hears of workers joining and leaving (the coordinator); the workers whose joined
  /// event went out (a listener subscribing later hears of them at once).
  std::vector<grid_listener> listeners;
  std::set<caf::actor_addr> announced;
  describe_tally tally;
};

/// Tells every listener that worker `id` joined or was lost.
void announce(pool_state& st, const std::string& what, const std::string& id, const worker_actor& w) {
  grid_event e;
  e.what = what;
  e.kind = "worker";
  e.id = id;
  e.at_ms = unix_ms_now();
  for (const auto& l : st.listeners) caf::anon_send(l, gridevent_atom::value, e, caf::actor_cast<describable>(w));
}

using pool_pointer = pool_actor::stateful_pointer<pool_state>;

constexpr auto worker_timeout = std::chrono::seconds(10);
constexpr auto probe_every = std::chrono::seconds(5);

/// The probe: a 64x64 product of data sent with the call, a graph as small as a decode step's
/// messages, so its round trip is what a call to this worker costs beyond its arithmetic (the
/// link, the worker's queue and its speed). Fixed text, built once.
const std::string& probe_graph() {
  static const std::string g = [] {
    std::string data;
    for (int i = 0; i < 64 * 64; ++i) data += (i ? "," : "") + std::to_string((i * 37) % 17 - 8);
    return "{\"inputs\":[{\"name\":\"a\",\"shape\":[64,64],\"data\":[" + data +
           "]}],\"steps\":[{\"op\":\"matmul\",\"in\":[\"a\",\"a\"],\"out\":\"c\"}],\"outputs\":[\"c\"]}";
  }();
  return g;
}

/// Times one probe call on `w` and folds it into the worker's moving average.
void probe(pool_pointer self, worker_actor w) {
  run_request r;
  r.graph_json = probe_graph();
  r.base64 = true;
  r.run_id = probe_run_id;
  // Behind a long graph it is not worth computing once the pool has stopped waiting.
  r.timeout_ms = std::uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(worker_timeout).count());
  const auto t0 = std::chrono::steady_clock::now();
  self->request(w, worker_timeout, run_atom::value, std::move(r))
      .then(
          [self, w, t0](run_reply&) {
            self->state.last_answer[w.address()] = std::chrono::steady_clock::now();
            const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            auto& m = self->state.measured_ms;
            auto it = m.find(w.address());
            if (it == m.end()) m[w.address()] = ms;
            else it->second = 0.5 * it->second + 0.5 * ms;
          },
          [](caf::error&) {});  // a worker that cannot answer is dropped by its monitor
}

/// Whether `a` is clearly faster than `b` by measured time: by more than half again and 2 ms
/// (loopback noise must not reorder equal workers); an unmeasured worker is never clearly
/// faster or slower.
bool clearly_faster(double a, double b) { return a > 0 && b > 0 && b > a * 1.5 && b - a > 2.0; }

/// Gathers every worker's status; replies once all answered (a worker that fails to answer
/// in time is left out). A worker's front answers at once even while it computes.
void gather(pool_actor::stateful_pointer<pool_state> self,
            std::function<void(std::vector<std::pair<worker_actor, worker_status>>)> done) {
  auto workers = self->state.workers;
  if (workers.empty()) return done({});
  auto acc = std::make_shared<std::vector<std::pair<worker_actor, worker_status>>>();
  auto pending = std::make_shared<std::size_t>(workers.size());
  for (auto& w : workers) {
    self->request(w, worker_timeout, status_atom::value)
        .then(
            [=](worker_status& s) {
              if (auto c = self->state.caps.find(w.address()); c != self->state.caps.end() && s.total_bytes > c->second) {
                // what it holds counts against the cap
                const std::uint64_t used = s.total_bytes - std::min(s.free_bytes, s.total_bytes);
                s.total_bytes = c->second;
                s.free_bytes = c->second > used ? c->second - used : 0;
              }
              self->state.ids[w.address()] = s.worker_id;
              self->state.last_answer[w.address()] = std::chrono::steady_clock::now();
              auto m = self->state.measured_ms.find(w.address());
              s.measured_ms = m == self->state.measured_ms.end() ? 0 : std::round(m->second * 100) / 100;
              acc->emplace_back(w, std::move(s));
              if (--*pending == 0) done(std::move(*acc));
            },
            [=](caf::error& e) {
              self->state.tally.failed("worker " + self->state.ids[w.address()] +
                                       " did not answer status: " + from_caf(e).message);
              if (--*pending == 0) done(std::move(*acc));
            });
  }
}

/// The worker with the most free memory among those offering every op and feature in `needs`;
/// errc::unavailable naming what is missing or how much memory when none qualifies.
caf::typed_response_promise<worker_actor, worker_status> pick(pool_actor::stateful_pointer<pool_state> self,
                                                               std::uint64_t bytes, std::vector<std::string> needs) {
  auto rp = self->make_response_promise<worker_actor, worker_status>();
  gather(self, [rp, bytes, needs](std::vector<std::pair<worker_actor, worker_status>> all) mutable {
    if (all.empty()) {
      rp.deliver(to_caf(errc::unavailable, "no worker is connected"));
      return;
    }
    std::string missing;
    std::vector<std::pair<worker_actor, worker_status>> able;
    for (auto& w : all) {
      std::string lacked;
      for (const auto& n : needs)
        if (std::find(w.second.lacks.begin(), w.second.lacks.end(), n) != w.second.lacks.end()) lacked = n;
      if (lacked.empty()) able.push_back(std::move(w));
      else missing = lacked;
    }
    if (able.empty()) {
      rp.deliver(to_caf(errc::unavailable, "no connected worker offers " + missing + ", which the graph uses"));
      return;
    }
    // Ranked by measured end-to-end time first (only a clearly faster worker wins), then by
    // free memory; among those with room for `bytes`.
    auto better = [](const auto& a, const auto& b) {
      if (clearly_faster(a.second.measured_ms, b.second.measured_ms)) return true;
      if (clearly_faster(b.second.measured_ms, a.second.measured_ms)) return false;
      return a.second.free_bytes > b.second.free_bytes;
    };
    const std::pair<worker_actor, worker_status>* best = nullptr;
    for (const auto& w : able)
      if (w.second.free_bytes >= bytes && (!best || better(w, *best))) best = &w;
    if (!best) {
      best = &*std::max_element(able.begin(), able.end(),
                                [](const auto& a, const auto& b) { return a.second.free_bytes < b.second.free_bytes; });
      rp.deliver(to_caf(errc::unavailable, "no worker has " + std::to_string((bytes + 999999) / 1000000) +
                                               " MB free (the largest has " + std::to_string(best->second.free_bytes / 1000000) +
                                               " MB)"));
      return;
    }
    rp.deliver(best->first, best->second);
  });
  return rp;
}

}  // namespace

pool_actor spawn_pool(caf::actor_system& sys) {
  return sys.spawn([](pool_actor::stateful_pointer<pool_state> self) -> pool_actor::behavior_type {
    self->set_down_handler([=](caf::down_msg& dm) {
      auto& ws = self->state.workers;
      if (auto it = std::find_if(ws.begin(), ws.end(), [&](const worker_actor& w) { return w.address() == dm.source; });
          it != ws.end()) {
        auto id = self->state.ids.find(dm.source);
        announce(self->state, "lost", id == self->state.ids.end() ? std::string("(unnamed)") : id->second, worker_actor());
      }
      self->state.ids.erase(dm.source);
      self->state.announced.erase(dm.source);
      ws.erase(std::remove_if(ws.begin(), ws.end(), [&](const worker_actor& w) { return w.address() == dm.source; }), ws.end());
      self->state.caps.erase(dm.source);
      self->state.measured_ms.erase(dm.source);
      self->state.last_answer.erase(dm.source);
    });
    return {
        [=](describe_atom) {
          auto& st = self->state;
          st.tally.count();
          actor_snapshot s;
          s.kind = "pool";
          s.id = "pool";
          for (const auto& w : st.workers) {
            auto id = st.ids.find(w.address());
            const std::string name = id == st.ids.end() ? "(unnamed)" : id->second;
            s.link("worker", name);
            if (auto m = st.measured_ms.find(w.address()); m != st.measured_ms.end())
              s.number("measuredMs." + name, std::round(m->second * 100) / 100);
            if (auto c = st.caps.find(w.address()); c != st.caps.end()) s.number("capBytes." + name, double(c->second));
            if (auto a = st.last_answer.find(w.address()); a != st.last_answer.end()) {
              const auto ago = std::chrono::steady_clock::now() - a->second;
              s.number("lastAnswerAgoMs." + name, double(std::chrono::duration_cast<std::chrono::milliseconds>(ago).count()));
            }
          }
          s.number("workers", double(st.workers.size()));
          s.number("probeEveryMs", double(std::chrono::duration_cast<std::chrono::milliseconds>(probe_every).count()));
          s.number("listeners", double(st.listeners.size()));
          st.tally.fill(s, self->mailbox().size());
          return s;
        },
        [=](subscribe_atom, grid_listener l) {
          auto& st = self->state;
          st.tally.count();
          for (const auto& w : st.workers)
            if (st.announced.count(w.address()))
              caf::anon_send(l, gridevent_atom::value, grid_event{0, unix_ms_now(), "joined", "worker", st.ids[w.address()], ""},
                             caf::actor_cast<describable>(w));
          st.listeners.push_back(std::move(l));
        },
        [=](add_atom, worker_actor w, std::uint64_t cap) {
          self->state.tally.count();
          if (cap > 0) self->state.caps[w.address()] = cap;
          self->send(self, add_atom::value, std::move(w));
        },
        [=](add_atom, worker_actor w) {
          self->state.tally.count();
          self->monitor(w);
          self->state.workers.push_back(w);
          probe(self, w);
          // (named once its front says who it is: at once, it never computes)
          self->request(w, worker_timeout, status_atom::value)
              .then(
                  [=](worker_status& s) {
                    auto& st = self->state;
                    if (std::find(st.workers.begin(), st.workers.end(), w) == st.workers.end()) return;  // gone already
                    st.ids[w.address()] = s.worker_id;
                    if (st.announced.insert(w.address()).second) announce(st, "joined", s.worker_id, w);
                  },
                  [](caf::error&) {});
          if (!self->state.probing) {
            self->state.probing = true;
            self->delayed_send(self, probe_every, probe_atom::value);
          }
        },
        [=](probe_atom) {
          self->state.tally.count();
          for (const auto& w : self->state.workers) probe(self, w);
          self->delayed_send(self, probe_every, probe_atom::value);
        },
        [=](workers_atom) -> caf::result<std::vector<worker_status>> {
          self->state.tally.count();
          auto rp = self->make_response_promise<std::vector<worker_status>>();
          gather(self, [rp](std::vector<std::pair<worker_actor, worker_status>> all) mutable {
            std::vector<worker_status> out;
            for (auto& [_, s] : all) out.push_back(std::move(s));
            std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.worker_id < b.worker_id; });
            rp.deliver(std::move(out));
          });
          return rp;
        },
        [=](members_atom) -> caf::result<std::vector<worker_actor>, std::vector<worker_status>> {
          self->state.tally.count();
          auto rp = self->make_response_promise<std::vector<worker_actor>, std::vector<worker_status>>();
          gather(self, [rp](std::vector<std::pair<worker_actor, worker_status>> all) mutable {
            std::stable_sort(all.begin(), all.end(),
                             [](const auto& a, const auto& b) { return a.second.free_bytes > b.second.free_bytes; });
            std::vector<worker_actor> ws;
            std::vector<worker_status> ss;
            for (auto& [w, s] : all) {
              ws.push_back(w);
              ss.push_back(std::move(s));
            }
            rp.deliver(std::move(ws), std::move(ss));
          });
          return rp;
        },
        [=](pick_atom, std::uint64_t bytes) -> caf::result<worker_actor, worker_status> {
          self->state.tally.count();
          return pick(self, bytes, {});
        },
        [=](pick_atom, std::uint64_t bytes, std::vector<std::string>& needs) -> caf::result<worker_actor, worker_status> {
          self->state.tally.count();
          return pick(self, bytes, std::move(needs));
        },
    };
  });
}

}  // namespace mpakt
