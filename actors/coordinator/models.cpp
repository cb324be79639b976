/// Model handlers of the coordinator: inspect, load (a load job per request, the model
/// entity and its placement), the model list, a model's side files (chat), delete.

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

caf::result<inspect_model_reply> inspect_model(coordinator_pointer self, const caller&, const std::string& source, const std::string& token) {
  if (source.empty()) return to_caf(errc::invalid, "inspect needs a source query parameter, e.g. ?source=hf:Org/Model");
  auto rp = self->make_response_promise<inspect_model_reply>();
  auto job = spawn_load_job(self->system(), self->state.cfg.load, self->state.pool);
  self->request(job, std::chrono::minutes(5), inspect_atom::value, source, token)
      .then([=](inspect_model_reply& r) mutable { rp.deliver(std::move(r)); },
            [=](caf::error& e) mutable { fail(self, rp, e); });
  return rp;
}

caf::result<load_model_reply> load_model(coordinator_pointer self, const caller& who, load_call& call) {
  auto& S = self->state;
  if (call.source.empty()) return to_caf(errc::invalid, "load request needs a source, e.g. \"hf:Org/Model\"");
  load_job_request req;
  static_cast<load_call&>(req) = std::move(call);
  const int held = S.count_for_key(S.models, who.key_id) + S.pending_loads[who.key_id];
  if (held >= S.cfg.max_models_per_key)
    return to_caf(errc::limit, "this key already holds " + std::to_string(S.cfg.max_models_per_key) +
                                   " models, the limit; delete one first");
  req.model_id = new_id("m_");
  S.pending_loads[who.key_id]++;
  auto rp = self->make_response_promise<load_model_reply>();
  auto progress = std::make_shared<load_progress>();
  S.loads[req.model_id] = load_entry{req.source, who.account, false, unix_ms_now(), progress};
  auto job = spawn_load_job(self->system(), S.cfg.load, S.pool, progress);
  const auto load_started = std::chrono::steady_clock::now();
  auto seconds_since = [load_started] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - load_started).count();
  };
  log::line("info", "coordinator", "loading " + req.source + " as " + req.model_id,
            {{"request_id", who.request_id}, {"model_id", req.model_id}, {"key_id", who.key_id}});
  self->request(job, caf::infinite, load_atom::value, req)
      .then(
          [=](load_outcome& out) mutable {
            auto& S = self->state;
            S.pending_loads[who.key_id]--;
            S.loads.erase(req.model_id);
            const double secs = seconds_since();
            metrics::m().load_duration.with({"ok"}).observe(secs);
            log::line("info", "coordinator", "loaded " + req.model_id,
                      {{"request_id", who.request_id}, {"model_id", req.model_id},
                       {"bytes", std::to_string(out.published_bytes)}, {"seconds", std::to_string(secs)}});
            model_entry m;
            m.account = who.account;
            m.key_id = who.key_id;
            m.created_at = now_iso();
            m.actor = spawn_model(self->system(), req.model_id,
                                  out.part_workers.empty() ? std::vector<worker_actor>{out.worker} : out.part_workers,
                                  S.cfg.timeouts);
            self->link_to(m.actor);  // entity actors end with the coordinator
            place_model(self, req.model_id, m, out);
            m.source = out.source;
            m.quantize = out.quantize;
            m.kv_dtype = req.kv_dtype.empty() ? S.cfg.load.default_kv_dtype : req.kv_dtype;
            m.commit = out.commit;
            m.token = req.token;
            m.whole = req.include.empty() && req.exclude.empty() && req.names.empty();
            m.published_bytes = out.published_bytes;
            m.resident_bytes = out.resident_bytes;
            m.tensors = out.tensor_ids.size();
            for (const auto& [tid, name] : out.tensor_ids) S.weight_ids[tid] = {req.model_id, name};
            S.emit(grid_event{0, 0, "loaded", "model", req.model_id,
                              m.parts.empty() ? "on " + m.worker_id
                                              : "spread over " + std::to_string(m.parts.size()) + " workers"});
            S.models[req.model_id] = std::move(m);
            rp.deliver(std::move(out.reply));
          },
          [=](caf::error& e) mutable {
            self->state.pending_loads[who.key_id]--;
            self->state.loads.erase(req.model_id);
            metrics::m().load_duration.with({"failed"}).observe(seconds_since());
            log::line("warn", "coordinator", "load of " + req.model_id + " failed: " + from_caf(e).message,
                      {{"request_id", who.request_id}, {"model_id", req.model_id}});
            fail(self, rp, e);
          });
  return rp;
}

caf::result<list_models_reply> list_models(coordinator_pointer self, const caller& who) {
  const auto control = self->state.cfg.timeouts.control;
  auto rp = self->make_response_promise<list_models_reply>();
  self->request(self->state.pool, control, workers_atom::value)
      .then(
          [=](std::vector<worker_status>& ws) mutable {
            auto& S = self->state;
            list_models_reply r;
            r.workers = ws.size();
            for (const auto& s : ws) {
              r.free_bytes += s.free_bytes;
              r.total_bytes += s.total_bytes;
            }
            for (const auto& [id, m] : S.models) {
              if (m.account != who.account) continue;
              model_view v{id, m.source, m.commit, m.tensors, m.published_bytes, m.resident_bytes, m.quantize, m.whole,
                           {}, m.created_at, m.kv_dtype};
              // where it is now: a lost worker's share is left out
              if (!m.parts.empty()) {
                for (const auto& part : m.parts)
                  if (!S.is_lost(part.worker))
                    v.placement.push_back(placement_view{part.worker_id, part.tensors.size(), part.resident_bytes, {}});
              } else if (!S.is_lost(m.worker)) {
                v.placement.push_back(placement_view{m.worker_id, m.tensors, m.resident_bytes, {}});
              }
              r.models.push_back(std::move(v));
            }
            rp.deliver(std::move(r));
          },
          [=](caf::error& e) mutable { fail(self, rp, e); });
  return rp;
}

caf::result<std::string, std::string, std::string, std::string> model_files(coordinator_pointer self, const caller& who, const std::string& id) {
  auto& S = self->state;
  auto* m = S.find(S.models, id, who);
  if (!m) return to_caf(errc::not_found, "model " + id + " does not exist");
  if (m->files.size() == 4)
    return caf::result<std::string, std::string, std::string, std::string>(m->files[0], m->files[1], m->files[2], m->files[3]);
  auto rp = self->make_response_promise<std::string, std::string, std::string, std::string>();
  auto job = spawn_load_job(self->system(), S.cfg.load, S.pool);
  self->request(job, std::chrono::minutes(2), files_atom::value, loader::pinned_source(m->source, m->commit), m->token)
      .then(
          [=](std::string& config, std::string& tok, std::string& tok_cfg, std::string& jinja) mutable {
            if (auto* again = self->state.find(self->state.models, id, who)) again->files = {config, tok, tok_cfg, jinja};
            rp.deliver(std::move(config), std::move(tok), std::move(tok_cfg), std::move(jinja));
          },
          [=](caf::error& e) mutable { fail(self, rp, e); });
  return rp;
}

caf::result<deleted_reply> delete_model(coordinator_pointer self, const caller& who, const std::string& id) {
  auto& S = self->state;
  auto* m = S.find(S.models, id, who);
  if (!m) return to_caf(errc::not_found, "model " + id + " does not exist");
  caf::anon_send(m->actor, delete_atom::value);
  caf::anon_send(m->worker, dropmodel_atom::value, id);  // where it is now, after any re-placement
  for (auto it = S.weight_ids.begin(); it != S.weight_ids.end();)
    it = it->second.first == id ? S.weight_ids.erase(it) : std::next(it);
  S.models.erase(id);
  S.emit(grid_event{0, 0, "deleted", "model", id, ""});
  return deleted_reply{"model", id};
}

}  // namespace mpakt::coord
