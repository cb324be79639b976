/// Generation planning of the coordinator: a generate request checked and planned on the
/// session's worker (gen_plan), and planned again after a recovery.

#include "actors/coordinator/handlers.hpp"

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
#include "actors/json_text.hpp"
#include "actors/ids.hpp"
#include "runtime/executor.hpp"
#include "runtime/graph.hpp"
#include "runtime/json.hpp"
#include "runtime/log.hpp"
#include "runtime/metrics.hpp"
#include "runtime/schema.hpp"

namespace mpakt::coord {

using namespace std::chrono_literals;

caf::result<gen_plan> plan_generation(coordinator_pointer self, const caller& who, const generate_call& call) {
  const auto control = self->state.cfg.timeouts.control;
  auto& S = self->state;
  // A session on a lost worker being recovered: plan afresh once it is back.
  auto wait = [&] {
    auto rp = self->make_response_promise<gen_plan>();
    S.waiting.push_back([self, rp, who, call] { resend(self, rp, generate_atom::value, who, call); });
    return rp;
  };
  // (the request's fields were checked at the edge: http/api/requests.cpp)
  gen_plan plan;
  plan.stream = call.stream;
  plan.worker_loop = call.worker_loop;
  plan.sampling = call.sampling;
  if (call.has_seed) {
    plan.seed = call.seed;
  } else {
    // No seed: one from the OS in [84, 2147483646], echoed in done.seed (decisions.md).
    std::uint64_t r;
    os_random(&r, sizeof r);
    plan.seed = 84 + std::int64_t(r % (2147483646ull - 84ull + 1));
  }
  plan.sampling.emplace_back("seed", double(plan.seed));
  auto* g = S.find(S.graphs, call.graph_id, who);
  if (!g) return to_caf(errc::not_found, "graph " + call.graph_id + " does not exist");
  auto* s = S.find(S.sessions, call.session_id, who);
  if (!s) return to_caf(errc::not_found, "session " + call.session_id + " does not exist");
  if (S.is_recovering(s->worker) || s->restoring) return wait();
  if (S.is_lost(s->worker)) return to_caf(errc::unavailable, lost_message("session " + call.session_id));
  // Speculative decoding: the verify graphs must be the caller's.
  for (const auto& vid : call.verify_graphs) {
    auto* vg = S.find(S.graphs, vid, who);
    if (!vg) return to_caf(errc::not_found, "verify graph " + vid + " does not exist");
    plan.verify_graphs.push_back(vid);
    plan.verify_actors.push_back(vg->actor);
    plan.verify_bindings.push_back(vg->bindings);
  }
  if (auto note = s->take_restored_note(); !note) return to_caf(note.err());
  plan.worker = s->worker;
  // A spread model's steps run stage by stage through its pipeline: no worker holds
  // everything the graph reads, so the loop runs here (the spec's ordinary path).
  if (S.is_pipeline(s->worker)) plan.worker_loop = false;
  plan.session = s->actor;
  plan.graph = g->actor;
  plan.graph_id = call.graph_id;
  plan.session_id = call.session_id;
  plan.bindings = g->bindings;
  plan.first_id = call.ids.back();
  plan.start_pos = call.start_pos;
  plan.max_new = call.max_new;
  plan.stop_ids = call.stop_ids;
  if (call.speculative) {
    plan.always = call.always;
    plan.context = call.has_context ? call.context : call.ids;  // context defaults to ids (SPC-03)
    if (plan.context.empty() || plan.context.back() != plan.first_id) plan.context.push_back(plan.first_id);
  }
  bool sampling = false;
  for (const auto& [k, v] : plan.sampling) sampling = sampling || (k == "temperature" && v > 0);
  auto rp = self->make_response_promise<gen_plan>();
  // Every template must be planned on the session's worker, then fit for generation:
  // the decode graph first, then each verify graph, one after another.
  auto graphs = std::make_shared<std::vector<std::pair<graph_actor, std::string>>>();
  graphs->emplace_back(plan.graph, plan.graph_id);
  for (std::size_t i = 0; i < plan.verify_graphs.size(); ++i) graphs->emplace_back(plan.verify_actors[i], plan.verify_graphs[i]);
  auto result_plan = std::make_shared<gen_plan>(plan);
  // Planning talks to the session's worker; if it leaves meanwhile, plan again after
  // the recovery instead of waiting for a reply that will not come.
  auto settle = track_call(self, plan.worker.address(), [self, rp, who, call]() mutable {
    self->state.waiting.push_back([self, rp, who, call]() mutable { resend(self, rp, generate_atom::value, who, call); });
  });
  auto step = [=](std::size_t i, std::function<void()> next) mutable {
    const auto [actor, id] = (*graphs)[i];
    self->request(actor, self->state.cfg.timeouts.graph, compile_atom::value, result_plan->worker)
        .then(
            [=](compile_reply&) mutable {
              self->request(result_plan->worker, control, gencheck_atom::value, id, sampling, i > 0)
                  .then(
                      [=](std::int32_t k) mutable {
                        if (i > 0) result_plan->verify_ks.push_back(k);
                        next();
                      },
                      [=](caf::error& e) mutable {
                        if (!settle()) return;
                        error err = from_caf(e);
                        if (i > 0) err.message = "verify graph " + id + ": " + err.message;
                        fail(self, rp, to_caf(err));
                      });
            },
            [=](caf::error& e) mutable {
              if (settle()) fail(self, rp, e);
            });
  };
  in_sequence(graphs->size(), step, [=]() mutable {
    if (!settle()) return;
    // Its fed tokens reach the journal when the generation reports them (journal_atom).
    if (auto it = self->state.sessions.find(result_plan->session_id); it != self->state.sessions.end())
      it->second.generating++;
    rp.deliver(*result_plan);
  });
  return rp;
}

caf::result<gen_plan> replan_generation(coordinator_pointer self, const caller& who, gen_plan& plan) {
  auto& S = self->state;
  if (!S.recovering.empty()) {  // once the session is back
    auto rp = self->make_response_promise<gen_plan>();
    S.waiting.push_back([self, rp, who, plan] { resend(self, rp, replan_atom::value, who, plan); });
    return rp;
  }
  auto* s = S.find(S.sessions, plan.session_id, who);
  if (!s) return to_caf(errc::not_found, "session " + plan.session_id + " does not exist");
  if (S.is_lost(s->worker)) return to_caf(errc::unavailable, lost_message("session " + plan.session_id));
  // Put back at its checkpoint without this generation's tokens: it cannot go on.
  if (auto note = s->take_restored_note(); !note) return to_caf(note.err());
  plan.worker = s->worker;
  plan.session = s->actor;
  s->generating++;
  // The loop runs compiled templates there: plan each on the new worker first.
  auto rp = self->make_response_promise<gen_plan>();
  auto actors = std::make_shared<std::vector<graph_actor>>(plan.verify_actors);
  actors->insert(actors->begin(), plan.graph);
  auto result = std::make_shared<gen_plan>(std::move(plan));
  in_sequence(
      actors->size(),
      [=](std::size_t i, std::function<void()> next) mutable {
        self->request((*actors)[i], self->state.cfg.timeouts.graph, compile_atom::value, result->worker)
            .then([next](compile_reply&) { next(); }, [=](caf::error& e) mutable { fail(self, rp, e); });
      },
      [=]() mutable { rp.deliver(*result); });
  return rp;
}

}  // namespace mpakt::coord
