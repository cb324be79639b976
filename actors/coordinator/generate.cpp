/// Generation planning of the coordinator: a generate request checked and planned on the
/// session's worker (gen_plan), and planned again after a recovery.

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

caf::result<gen_plan> plan_generation(coordinator_pointer self, const caller& who, const std::string& body) {
  const auto control = self->state.cfg.timeouts.control;
  auto& S = self->state;
  // A session on a lost worker being recovered: plan afresh once it is back.
  auto wait = [&] {
    auto rp = self->make_response_promise<gen_plan>();
    S.waiting.push_back([self, rp, who, body] { resend(self, rp, generate_atom::value, who, body); });
    return rp;
  };
  auto d = parse_json_object(body, "request body");
  if (!d) return to_caf(d.err());
  if (auto s = check_fields(*d, {"graphId", "sessionId", "ids", "startPos", "maxNewTokens", "stopIds", "temperature",
                                 "topK", "topP", "seed", "stream", "workerLoop", "speculative"},
                            "generate request");
      !s)
    return to_caf(s.err());

  auto need_string = [&](const char* k) -> result<std::string> {
    auto v = opt_string(*d, k, "generate request");
    if (v && v->empty()) return invalid(std::string("generate request needs ") + k);
    return v;
  };
  auto integer = [&](const char* k, std::int64_t lo, std::int64_t hi, std::optional<std::int64_t> fallback)
      -> result<std::int64_t> {
    auto it = d->FindMember(k);
    if (it == d->MemberEnd()) {
      if (fallback) return *fallback;
      return invalid(std::string("generate request needs ") + k);
    }
    return json_integer(it->value, k, lo, hi);
  };
  auto ids_of = [&](const char* k, bool required) -> result<std::vector<std::int64_t>> {
    std::vector<std::int64_t> out;
    auto it = d->FindMember(k);
    if (it == d->MemberEnd()) {
      if (required) return invalid(std::string("generate request needs ") + k + " (the last prompt token first)");
      return out;
    }
    if (!it->value.IsArray()) return invalid(std::string(k) + " must be an array of token ids");
    for (rapidjson::SizeType i = 0; i < it->value.Size(); ++i) {
      auto id = token_id(it->value[i], std::string(k) + "[" + std::to_string(i) + "]");
      if (!id) return std::move(id).err();
      out.push_back(*id);
    }
    if (required && out.empty()) return invalid(std::string(k) + " must hold at least the token to feed");
    return out;
  };
  gen_plan plan;
  auto gid = need_string("graphId");
  if (!gid) return to_caf(gid.err());
  auto sid = need_string("sessionId");
  if (!sid) return to_caf(sid.err());
  auto ids = ids_of("ids", true);
  if (!ids) return to_caf(ids.err());
  auto stops = ids_of("stopIds", false);
  if (!stops) return to_caf(stops.err());
  auto start = integer("startPos", 0, std::int64_t(1) << 40, std::nullopt);
  if (!start) return to_caf(start.err());
  auto max_new = integer("maxNewTokens", 1, 4096, 256);
  if (!max_new) return to_caf(max_new.err());
  for (const char* k : {"stream", "workerLoop"}) {
    auto it = d->FindMember(k);
    if (it != d->MemberEnd() && !it->value.IsBool()) return to_caf(errc::invalid, std::string(k) + " must be true or false");
  }
  plan.stream = !d->HasMember("stream") || (*d)["stream"].GetBool();
  plan.worker_loop = !d->HasMember("workerLoop") || (*d)["workerLoop"].GetBool();
  for (const char* k : {"temperature", "topP"}) {
    auto it = d->FindMember(k);
    if (it == d->MemberEnd()) continue;
    if (!it->value.IsNumber()) return to_caf(errc::invalid, std::string(k) + " must be a number");
    const double v = it->value.GetDouble();
    if (std::string_view(k) == "temperature" && v < 0) return to_caf(errc::invalid, "temperature must be 0 or more");
    if (std::string_view(k) == "topP" && (v <= 0 || v > 1)) return to_caf(errc::invalid, "topP must be in (0, 1]");
    plan.sampling.emplace_back(k, v);
  }
  if (d->HasMember("topK")) {
    auto k = integer("topK", 0, 1 << 30, std::nullopt);
    if (!k) return to_caf(k.err());
    plan.sampling.emplace_back("topK", double(*k));
  }
  if (d->HasMember("seed")) {
    auto seed = integer("seed", 0, (std::int64_t(1) << 53), std::nullopt);
    if (!seed) return to_caf(seed.err());
    plan.seed = *seed;
  } else {
    // No seed: one from the OS in [84, 2147483646], echoed in done.seed (decisions.md).
    std::uint64_t r;
    os_random(&r, sizeof r);
    plan.seed = 84 + std::int64_t(r % (2147483646ull - 84ull + 1));
  }
  plan.sampling.emplace_back("seed", double(plan.seed));
  auto* g = S.find(S.graphs, *gid, who);
  if (!g) return to_caf(errc::not_found, "graph " + *gid + " does not exist");
  auto* s = S.find(S.sessions, *sid, who);
  if (!s) return to_caf(errc::not_found, "session " + *sid + " does not exist");
  if (S.is_recovering(s->worker)) return wait();
  if (S.is_lost(s->worker)) return to_caf(errc::unavailable, lost_message("session " + *sid));
  if (auto note = s->take_restored_note(); !note) return to_caf(note.err());
  plan.worker = s->worker;
  // A spread model's steps run stage by stage through its pipeline: no worker holds
  // everything the graph reads, so the loop runs here (the spec's ordinary path).
  if (S.is_pipeline(s->worker)) plan.worker_loop = false;
  plan.session = s->actor;
  plan.graph = g->actor;
  plan.graph_id = *gid;
  plan.session_id = *sid;
  plan.bindings = g->bindings;
  plan.first_id = ids->back();
  plan.start_pos = *start;
  plan.max_new = std::uint32_t(*max_new);
  plan.stop_ids = *stops;
  // Speculative decoding: verify graphs (owned, at most 16), the context for drafting.
  if (auto sp = d->FindMember("speculative"); sp != d->MemberEnd()) {
    const auto& o = sp->value;
    if (!o.IsObject()) return to_caf(errc::invalid, "speculative must be an object {graphIds, context, always}");
    if (auto c = check_fields(o, {"graphIds", "context", "always"}, "speculative"); !c) return to_caf(c.err());
    auto vids = opt_strings(o, "graphIds", "speculative");
    if (!vids) return to_caf(vids.err());
    if (vids->empty()) return to_caf(errc::invalid, "speculative.graphIds must name at least one verify graph");
    if (vids->size() > 16) return to_caf(errc::invalid, "speculative.graphIds lists " + std::to_string(vids->size()) + " graphs; at most 16");
    for (const auto& vid : *vids) {
      auto* vg = S.find(S.graphs, vid, who);
      if (!vg) return to_caf(errc::not_found, "verify graph " + vid + " does not exist");
      plan.verify_graphs.push_back(vid);
      plan.verify_actors.push_back(vg->actor);
      plan.verify_bindings.push_back(vg->bindings);
    }
    if (auto a = o.FindMember("always"); a != o.MemberEnd()) {
      if (!a->value.IsBool()) return to_caf(errc::invalid, "speculative.always must be true or false");
      plan.always = a->value.GetBool();
    }
    if (auto c = o.FindMember("context"); c != o.MemberEnd()) {
      if (!c->value.IsArray()) return to_caf(errc::invalid, "speculative.context must be an array of token ids");
      for (rapidjson::SizeType i = 0; i < c->value.Size(); ++i) {
        auto id = token_id(c->value[i], "speculative.context[" + std::to_string(i) + "]");
        if (!id) return to_caf(id.err());
        plan.context.push_back(*id);
      }
    } else {
      plan.context = *ids;  // context defaults to ids (SPC-03)
    }
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
  auto settle = track_call(self, plan.worker.address(), [self, rp, who, body]() mutable {
    self->state.waiting.push_back([self, rp, who, body]() mutable { resend(self, rp, generate_atom::value, who, body); });
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
                        rp.deliver(to_caf(err));
                      });
            },
            [=](caf::error& e) mutable {
              if (settle()) rp.deliver(caf::error(e));
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
            .then([next](compile_reply&) { next(); }, [=](caf::error& e) mutable { rp.deliver(caf::error(e)); });
      },
      [=]() mutable { rp.deliver(*result); });
  return rp;
}

}  // namespace mpakt::coord
