#include "http/api/generate.hpp"

#include <rapidjson/document.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

#include "actors/errors.hpp"
#include "actors/generate/gen_values.hpp"
#include "actors/generate/gen_loop.hpp"
#include "actors/ids.hpp"
#include "runtime/metrics.hpp"

namespace mpakt::http {

namespace {

using clock_type = std::chrono::steady_clock;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;

struct generation_state {
  gen_plan plan;
  std::string id;
  std::shared_ptr<responder> res;
  std::shared_ptr<sse_stream> sse;
  std::vector<std::int64_t> tokens;
  clock_type::time_point started;
  std::uint64_t round_trips = 0;
  bool finished = false;
  bool cancelled = false;
  gen_runner runner;  ///< what runs the loop: the plan's worker, or a gen_loop here
  coordinator_actor coordinator;
  caller who;
  /// The current run on a worker (a generation that loses its worker goes on in a new run):
  /// the token it was started with, where, and how many tokens came before it.
  std::int64_t run_first = 0, run_start = 0;
  std::size_t run_offset = 0;
  bool reported = false;  ///< the current run's fed tokens went to the coordinator
  bool replanning = false;  ///< the run's worker left; tokens until the next run are stale
  int runs = 0;           ///< runs started (a late answer from an earlier run is ignored)
  /// Speculation as its tokens report it: drafts proposed and accepted in the current run so
  /// far, and in the runs before it.
  std::uint64_t run_drafted = 0, run_accepted = 0, drafted_before = 0, accepted_before = 0;
  std::shared_ptr<void> slot;  ///< one of the key's generations running at once, freed at the end
  describe_tally tally;
};

/// The generation as the console shows it: its progress and rate so far.
actor_snapshot describe_generation(generation_state& st, std::uint64_t mailbox) {
  actor_snapshot s;
  s.kind = "generation";
  s.id = st.id;
  s.link("session", st.plan.session_id);
  s.link("graph", st.plan.graph_id);
  const double secs = std::chrono::duration<double>(clock_type::now() - st.started).count();
  s.number("tokens", double(st.tokens.size()));
  s.number("maxNewTokens", double(st.plan.max_new));
  s.number("elapsedMs", std::round(secs * 1000));
  s.number("tokensPerSecond", secs > 0 ? std::round(double(st.tokens.size()) / secs * 10) / 10 : 0.0);
  s.number("startPos", double(st.plan.start_pos));
  s.number("workerLoop", st.plan.worker_loop ? 1 : 0);
  s.number("speculative", st.plan.verify_graphs.empty() ? 0 : 1);
  if (!st.plan.verify_graphs.empty()) {
    const double drafted = double(st.drafted_before + st.run_drafted), accepted = double(st.accepted_before + st.run_accepted);
    s.number("drafted", drafted);
    s.number("accepted", accepted);
    s.number("acceptance", drafted > 0 ? std::round(accepted / drafted * 1000) / 1000 : 0.0);
  }
  s.number("runs", double(st.runs));
  s.number("roundTrips", double(st.round_trips));
  s.text("owner", st.who.account);
  s.text("answer", st.plan.stream ? "sse" : "json");
  if (st.replanning) s.text("waiting", "its worker left the grid: waiting for the session's recovery");
  st.tally.fill(s, mailbox);
  return s;
}

/// Tells the coordinator (the console's event stream) that a generation started or ended.
void announce(generation_state& st, const std::string& what, std::string detail, describable self) {
  if (!st.coordinator) return;
  caf::anon_send(st.coordinator, gridevent_atom::value, grid_event{0, unix_ms_now(), what, "generation", st.id, std::move(detail)},
                 std::move(self));
}

/// Tells the coordinator what the current run of a worker-side loop fed its session (journal of
/// a checkpointed session): its first token, then every token it produced but the last. (The
/// ordinary loop reports for itself: actors/generate/gen_loop.hpp.)
void report_fed(generation_state& st) {
  if (st.reported || !st.coordinator || !st.plan.worker_loop) return;
  st.reported = true;
  const std::span<const std::int64_t> produced(st.tokens.data() + st.run_offset, st.tokens.size() - st.run_offset);
  caf::anon_send(st.coordinator, journal_atom::value, st.who, fed_journal(st.plan, st.run_first, st.run_start, produced));
}

std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string token_json(const gen_token& t) {
  return "{\"token\":" + std::to_string(t.token) + ",\"index\":" + std::to_string(t.index) + ",\"pos\":" + std::to_string(t.pos) +
         ",\"ms\":" + fmt_double(t.ms) + "}";
}

std::string done_json(const generation_state& st, const gen_done& d) {
  const double secs = std::chrono::duration<double>(clock_type::now() - st.started).count();
  std::string tokens = "[";
  for (std::size_t i = 0; i < st.tokens.size(); ++i) tokens += (i ? "," : "") + std::to_string(st.tokens[i]);
  tokens += "]";
  std::string out = "{\"ok\":" + std::string(d.stopped == "error" ? "false" : "true") + ",\"tokens\":" + tokens +
                    ",\"stopped\":\"" + d.stopped + "\",\"elapsedMs\":" + std::to_string(std::llround(secs * 1000)) +
                    ",\"tokensPerSecond\":" + fmt_double(secs > 0 ? double(st.tokens.size()) / secs : 0.0) +
                    ",\"roundTrips\":" + std::to_string(st.round_trips) + ",\"workerLoop\":" +
                    (st.plan.worker_loop ? "true" : "false") + ",\"nextPos\":" + std::to_string(d.next_pos) +
                    ",\"seed\":" + std::to_string(st.plan.seed) + ",\"batched\":" + std::to_string(d.batched);
  if (d.speculative)
    out += ",\"speculation\":{\"verifies\":" + std::to_string(d.verifies) + ",\"drafted\":" + std::to_string(d.drafted) +
           ",\"accepted\":" + std::to_string(d.accepted) + ",\"produced\":" + std::to_string(d.produced) +
           ",\"plain\":" + std::to_string(d.plain) + ",\"sharedVerifies\":" + std::to_string(d.batched_verifies) + "}";
  if (!d.error.empty()) {
    const std::string e = error_json(d.error);  // {"error":"..."}: reuse its escaping
    out += "," + e.substr(1, e.size() - 2);
  }
  return out + "}";
}

}  // namespace

void start_generation(caf::actor_system& sys, gen_plan plan, std::shared_ptr<responder> res, coordinator_actor coordinator,
                      caller who, std::shared_ptr<void> slot) {
  // (the slot moves into the state, which goes when the actor ends)
  sys.spawn([plan, res, coordinator, who, slot = std::move(slot)](caf::stateful_actor<generation_state>* self) mutable
            -> caf::behavior {
    auto& st = self->state;
    st.slot = std::move(slot);
    st.plan = plan;
    st.res = res;
    st.coordinator = coordinator;
    st.who = who;
    st.run_first = plan.first_id;
    st.run_start = plan.start_pos;
    st.id = new_id("g_");
    st.started = clock_type::now();
    // (the coordinator describes it while it runs, and links it to its session)
    announce(st, "started", plan.session_id, caf::actor_cast<describable>(self));

    auto open_stream = [self] {
      auto& st = self->state;
      if (!st.plan.stream || st.sse) return;
      st.sse = st.res->start_sse(200);
      auto me = caf::actor_cast<caf::actor>(self);
      st.sse->on_disconnect([me] { caf::anon_send(me, cancel_atom::value); });
    };
    auto finish = [self](gen_done d) {
      auto& st = self->state;
      if (st.finished) return;
      st.finished = true;
      report_fed(st);
      if (!st.plan.worker_loop) st.round_trips = d.passes;
      auto& m = metrics::m();
      m.drafts_proposed.with().inc(double(d.drafted));
      m.drafts_accepted.with().inc(double(d.accepted));
      if (d.stopped == "error") m.errors.with({"generation"}).inc();  // (its answer or stream said 200)
      const std::string body = done_json(st, d);
      if (!d.error.empty()) st.tally.failed(d.error);
      {
        const double secs = std::chrono::duration<double>(clock_type::now() - st.started).count();
        announce(st, "ended",
                 d.stopped + " after " + std::to_string(st.tokens.size()) + " tokens, " +
                     fmt_double(secs > 0 ? double(st.tokens.size()) / secs : 0.0) + " tokens/s",
                 describable());
      }
      if (st.sse) {
        if (!st.cancelled) {
          st.sse->send("done", body);
          st.sse->close();
        }
      } else if (!st.cancelled) {
        st.res->respond(response{200, "application/json", body, {}});
      }
      self->quit();
    };
    auto on_token = [self, finish](gen_token t) {
      auto& st = self->state;
      // Tokens of a run come in order, counted from 0. Once the run's worker is seen to leave,
      // the run is replanned from the tokens before: any later token of it is dropped (a
      // volunteer's checked generation streams the verifier's tokens through a comparer, which
      // may pass on one after the worker's loss arrived here), as is one not next in its run.
      if (st.finished || st.replanning || t.index != st.tokens.size() - st.run_offset) return;
      t.index += std::uint32_t(st.run_offset);  // a continued generation counts on
      st.tokens.push_back(t.token);
      st.run_drafted = t.drafted;
      st.run_accepted = t.accepted;
      metrics::m().tokens_generated.with({st.plan.worker_loop ? "worker_loop" : "per_call"}).inc();
      if (st.sse && !st.cancelled) st.sse->send("token", token_json(t));
    };
    auto fail_before_start = [self](const caf::error& e) {
      auto& st = self->state;
      const error err = from_caf(e);
      st.finished = true;
      st.tally.failed(err.message);
      announce(st, "ended", "error before its first token: " + err.message, describable());
      st.res->respond(response{http_status(err.code), "application/json", error_json(err.message), {}});
      self->quit();
    };

    if (plan.worker_loop) {
      // Starts a run of the loop on the plan's worker: the first, or one continuing a
      // generation whose worker left the grid (the coordinator restored the session first).
      auto run = std::make_shared<std::function<void(bool)>>();
      *run = [self, open_stream, fail_before_start, finish, run](bool first) {
        auto& st = self->state;
        const gen_plan& p = st.plan;
        const int this_run = ++st.runs;
        gen_request r = start_request(p, st.id, caf::actor_cast<gen_listener>(self));
        st.round_trips++;
        // A worker that leaves mid-generation sends no gendone: notice it directly, report
        // what was fed, and go on where the session is restored (or end with the reason).
        self->monitor(p.worker);
        self->set_down_handler([self, finish, run](caf::down_msg& dm) {
          auto& st = self->state;
          if (st.finished || dm.source != st.plan.worker.address()) return;
          const std::size_t got = st.tokens.size();
          // Every token was already here (only the end was missing): the generation is over.
          const std::int64_t at = st.run_start + std::int64_t(got - st.run_offset);
          if (got > st.run_offset && std::find(st.plan.stop_ids.begin(), st.plan.stop_ids.end(), st.tokens.back()) !=
                                         st.plan.stop_ids.end())
            return finish(gen_done{"stop token", "", at});
          if (got - st.run_offset >= st.plan.max_new) return finish(gen_done{"max tokens", "", at});
          st.replanning = true;  // (what the run goes on from is what came before this)
          report_fed(st);
          gen_plan next = st.plan;
          next.first_id = got > 0 ? st.tokens.back() : st.run_first;
          next.start_pos = st.run_start + std::int64_t(got - st.run_offset);
          next.max_new = st.plan.max_new - std::uint32_t(got - st.run_offset);
          next.context.insert(next.context.end(), st.tokens.begin() + std::ptrdiff_t(st.run_offset), st.tokens.end());
          self->request(st.coordinator, caf::infinite, replan_atom::value, st.who, std::move(next))
              .then(
                  [self, run](gen_plan& p) {
                    auto& st = self->state;
                    if (st.finished) return;
                    st.replanning = false;
                    st.drafted_before += std::exchange(st.run_drafted, 0);
                    st.accepted_before += std::exchange(st.run_accepted, 0);
                    st.run_offset = st.tokens.size();
                    st.run_first = p.first_id;
                    st.run_start = p.start_pos;
                    st.reported = false;
                    st.plan = std::move(p);
                    (*run)(false);
                  },
                  [self, finish](caf::error& e) {
                    auto& st = self->state;
                    finish(gen_done{"error", "the worker running this generation left the grid: " + from_caf(e).message,
                                    st.run_start + std::int64_t(st.tokens.size() - st.run_offset)});
                  });
        });
        self->request(p.worker, std::chrono::seconds(60), genstart_atom::value, std::move(r))
            .then([open_stream](bool) { open_stream(); },
                  [self, first, this_run, fail_before_start, finish](caf::error& e) {
                    auto& st = self->state;
                    if (st.runs != this_run || st.finished) return;  // superseded by a later run
                    auto fail = [self, first, fail_before_start, finish, e] {
                      if (first) return fail_before_start(e);
                      finish(gen_done{"error", from_caf(e).message, self->state.run_start});
                    };
                    // A worker leaving the grid may answer the start with an error just before
                    // its down message arrives: then the down handler goes on elsewhere. Only
                    // a worker that still answers refused the run.
                    if (from_caf(e).code != errc::unavailable) return fail();
                    self->request(st.plan.worker, std::chrono::seconds(2), describe_atom::value)
                        .then(
                            [self, this_run, fail](actor_snapshot&) {
                              if (self->state.runs == this_run && !self->state.finished && !self->state.replanning) fail();
                            },
                            [](caf::error&) { /* gone: its down message replans the generation */ });
                  });
      };
      st.round_trips = 0;
      (*run)(true);
    } else {
      // The ordinary loop, in this process: one run per pass through the session's actor.
      st.runner = spawn_gen_loop(self->system(), plan, coordinator, who);
      open_stream();
      self->request(st.runner, std::chrono::seconds(60), genstart_atom::value,
                    start_request(plan, st.id, caf::actor_cast<gen_listener>(self)))
          .then([](bool) {}, [fail_before_start](caf::error& e) { fail_before_start(e); });
    }

    return {
        [=](gentoken_atom, const std::string&, const gen_token& t) {
          self->state.tally.count();
          on_token(t);
        },
        [=](gendone_atom, const std::string&, const gen_done& d) {
          self->state.tally.count();
          finish(d);
        },
        [=](describe_atom) {
          self->state.tally.count();
          return describe_generation(self->state, self->mailbox().size());
        },
        [=](cancel_atom) {
          auto& st = self->state;
          st.tally.count();
          st.cancelled = true;
          if (st.plan.worker_loop) caf::anon_send(st.plan.worker, gencancel_atom::value, st.id);
          else caf::anon_send(st.runner, gencancel_atom::value, st.id);
          finish(gen_done{"cancelled", "", st.run_start + std::int64_t(st.tokens.size() - st.run_offset)});
        },
    };
  });
}

}  // namespace mpakt::http
