#include "actors/generate/gen_loop.hpp"

#include <rapidjson/document.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "actors/errors.hpp"
#include "actors/generate/gen_values.hpp"
#include "actors/generate/speculator.hpp"
#include "runtime/json.hpp"

namespace mpakt {

namespace {

using clock_type = std::chrono::steady_clock;

struct loop_state {
  gen_plan plan;
  gen_request req;
  coordinator_actor coordinator;
  caller who;
  std::unique_ptr<speculator> spec;
  std::int64_t next_token = 0;  ///< the token to feed next
  std::int64_t pos = 0;         ///< where it is fed
  std::uint32_t index = 0;      ///< tokens produced
  std::uint64_t passes = 0;
  bool finished = false;
  /// The current run (since the start or the last replan), for the journal: the token it
  /// began with, where, and the tokens produced since.
  std::int64_t run_first = 0, run_start = 0;
  std::vector<std::int64_t> run_tokens;
  bool reported = false;
  int retries_since_token = 0;
};

/// The runner's interface plus the pass it sends itself.
using loop_actor = gen_runner::extend<caf::reacts_to<genstep_atom>>;
using loop_pointer = loop_actor::stateful_pointer<loop_state>;

/// The token ids in a compiled run's outputs JSON (its single output).
result<std::vector<std::int64_t>> tokens_of(const std::string& outputs_json) {
  auto parsed = parse_json(outputs_json, "the graph's outputs");
  if (!parsed) return std::move(parsed).err();
  const rapidjson::Document& d = *parsed;
  if (!d.IsObject() || d.MemberCount() != 1) return invalid("the graph did not return one output");
  const auto& o = d.MemberBegin()->value;
  if (!o.IsObject() || !o.HasMember("data") || !o["data"].IsArray() || o["data"].Size() == 0)
    return invalid("the graph did not return token ids");
  std::vector<std::int64_t> out;
  for (const auto& v : o["data"].GetArray()) {
    if (!v.IsNumber()) return invalid("the graph returned a non-numeric token id");
    out.push_back(std::int64_t(v.GetDouble()));
  }
  return out;
}

/// Tells the coordinator what the current run fed the session: its first token, then every
/// token produced but the last (which was not fed yet).
void report_fed(loop_pointer self) {
  auto& st = self->state;
  if (st.reported) return;
  st.reported = true;
  caf::anon_send(st.coordinator, journal_atom::value, st.who, fed_journal(st.plan, st.run_first, st.run_start, st.run_tokens));
}

void finish(loop_pointer self, gen_done d) {
  auto& st = self->state;
  if (st.finished) return;
  st.finished = true;
  report_fed(self);
  d.passes = st.passes;
  caf::anon_send(st.req.listener, gendone_atom::value, st.req.gen_id, with_counters(std::move(d), st.spec.get()));
  self->quit();
}

void pass(loop_pointer self);

/// A pass failed: after a lost worker, once more on the restored session; else the end.
void failed(loop_pointer self, const caf::error& e) {
  auto& st = self->state;
  if (st.finished) return;
  const error err = from_caf(e);
  if (err.code != errc::unavailable || st.retries_since_token >= 2) return finish(self, gen_done{"error", err.message, st.pos});
  st.retries_since_token++;
  report_fed(self);
  self->request(st.coordinator, caf::infinite, replan_atom::value, st.who, st.plan)
      .then(
          [self](gen_plan& p) {
            auto& st = self->state;
            if (st.finished) return;
            st.run_first = st.next_token;
            st.run_start = st.pos;
            st.run_tokens.clear();
            st.reported = false;
            st.plan.worker = p.worker;
            st.plan.session = p.session;
            pass(self);
          },
          [self](caf::error& e2) {
            auto& st = self->state;
            finish(self, gen_done{"error", from_caf(e2).message, st.pos});
          });
}

void pass(loop_pointer self) {
  auto& st = self->state;
  if (st.finished) return;
  const auto t0 = clock_type::now();
  const speculator::pass p = st.spec ? st.spec->next() : speculator::pass{};
  std::vector<std::int64_t> fed{st.next_token};
  fed.insert(fed.end(), p.drafts.begin(), p.drafts.end());
  const auto& bindings = p.graph < 0 ? st.req.bindings : st.req.verify_bindings[std::size_t(p.graph)];
  const gen_call call = make_gen_call(bindings, fed, st.pos, st.req.sampling);
  run_request r;
  r.graph_id = p.graph < 0 ? st.req.graph_id : st.req.verify_graphs[std::size_t(p.graph)];
  r.bind_json = call.bind_json;
  r.overrides = call.overrides;
  r.session = st.req.session;
  const graph_actor graph = p.graph < 0 ? st.plan.graph : st.plan.verify_actors[std::size_t(p.graph)];
  st.passes++;
  self->request(st.plan.session, std::chrono::minutes(5), run_atom::value, std::move(r), graph)
      .then(
          [self, p, t0](run_reply& reply) {
            auto& st = self->state;
            if (st.finished) return;
            auto outputs = tokens_of(reply.outputs_json);
            if (!outputs) return finish(self, gen_done{"error", outputs.err().message, st.pos});
            const double ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
            std::vector<std::int64_t> produced;
            if (p.graph < 0) {
              produced = {outputs->front()};
              if (st.spec) st.spec->plain(ms);
            } else {
              produced = st.spec->verified(p, *outputs, ms);
            }
            st.retries_since_token = 0;
            std::vector<std::int64_t> emitted;
            for (std::int64_t tok : produced) {
              gen_token t;
              t.token = tok;
              t.index = st.index++;
              t.pos = st.pos;
              t.ms = ms / double(produced.size());
              if (st.spec) {
                t.drafted = st.spec->drafted;
                t.accepted = st.spec->accepted;
              }
              caf::anon_send(st.req.listener, gentoken_atom::value, st.req.gen_id, std::move(t));
              emitted.push_back(tok);
              st.run_tokens.push_back(tok);
              st.next_token = tok;
              st.pos++;
              const auto& stops = st.req.stop_ids;
              if (std::find(stops.begin(), stops.end(), tok) != stops.end()) return finish(self, gen_done{"stop token", "", st.pos});
              if (st.index >= st.req.max_new) return finish(self, gen_done{"max tokens", "", st.pos});
            }
            if (st.spec) st.spec->extend(emitted);
            self->send(self, genstep_atom::value);  // the next pass, after anything queued meanwhile
          },
          [self](caf::error& e) { failed(self, e); });
}

}  // namespace

gen_runner spawn_gen_loop(caf::actor_system& sys, gen_plan plan, coordinator_actor coordinator, caller who) {
  auto loop = sys.spawn([plan, coordinator, who](loop_pointer self) -> loop_actor::behavior_type {
    auto& st = self->state;
    st.plan = plan;
    st.coordinator = coordinator;
    st.who = who;
    return {
        [=](genstart_atom, gen_request& r) -> bool {
          auto& st = self->state;
          st.req = std::move(r);
          st.next_token = st.run_first = st.req.first_id;
          st.pos = st.run_start = st.req.start_pos;
          if (!st.req.verify_graphs.empty())
            st.spec = std::make_unique<speculator>(st.req.context, std::vector<int>(st.plan.verify_ks.begin(), st.plan.verify_ks.end()),
                                                   st.req.always);
          self->send(self, genstep_atom::value);
          return true;
        },
        [=](genstep_atom) { pass(self); },
        [=](gencancel_atom, const std::string&) {
          auto& st = self->state;
          if (st.finished) return;
          st.finished = true;
          report_fed(self);
          self->quit();
        },
    };
  });
  return caf::actor_cast<gen_runner>(loop);
}

gen_runner runner_for(caf::actor_system& sys, const gen_plan& plan, coordinator_actor coordinator, caller who) {
  if (plan.worker_loop) return caf::actor_cast<gen_runner>(plan.worker);
  return spawn_gen_loop(sys, plan, coordinator, who);
}

}  // namespace mpakt
