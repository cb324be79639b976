#include "actors/coordinator/coordinator_actor.hpp"

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
#include "actors/coordinator/handlers.hpp"
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

namespace mpakt {

namespace coord {

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

/// Milliseconds since the Unix epoch as ISO 8601 UTC with milliseconds.
std::string iso_from_unix_ms(std::uint64_t ms) {
  std::time_t t = std::time_t(ms / 1000);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", std::gmtime(&t));
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03uZ", buf, unsigned(ms % 1000));
  return out;
}

std::string limits_json(const coordinator_config& cfg, const std::vector<worker_status>& ws) {
  bool packed = true, quantize = true;
  std::uint64_t max_tensor = 0, free = 0;
  for (const auto& w : ws) {
    packed = packed && w.packed_weights;
    quantize = quantize && w.can_quantize;
    max_tensor = std::max(max_tensor, w.max_tensor_bytes);
    free += w.free_bytes;
  }
  return json([&](writer& w) {
    w.StartObject();
    key(w, "widenFactor");
    w.StartObject();
    key(w, "f32"); w.Int(1);
    key(w, "bf16"); w.Int(packed ? 1 : 2);
    key(w, "f16"); w.Int(packed ? 1 : 2);
    w.EndObject();
    key(w, "byteUnits"); str(w, "resident");
    key(w, "maxTensorBytes"); w.Uint64(max_tensor);
    key(w, "freeBytes"); w.Uint64(free);
    key(w, "workers"); w.Uint64(ws.size());
    key(w, "quantizeOnLoad"); w.Bool(quantize && !ws.empty());
    key(w, "defaultQuantize"); str(w, cfg.load.default_quantize);
    key(w, "defaultKvDtype"); str(w, cfg.load.default_kv_dtype);
    key(w, "pieceBytes"); w.Uint64(16'000'000);
    key(w, "modelsPerKey"); w.Int(cfg.max_models_per_key);
    key(w, "sessionsPerKey"); w.Int(cfg.max_sessions_per_key);
    key(w, "compiledGraphsPerKey"); w.Int(cfg.max_graphs_per_key);
    key(w, "graphTimeoutMs"); w.Int64(cfg.timeouts.graph.count());
    key(w, "maxSessionsPerGraph"); w.Int(64);
    key(w, "maxNewTokens"); w.Int(4096);
    key(w, "maxVerifyGraphs"); w.Int(16);
    key(w, "v2QuotaBytes"); w.Uint64(cfg.v2_quota_bytes);
    key(w, "randomMaxCount"); w.Int(10000);
    w.EndObject();
  });
}

/// A handler's answer, with an error it answers at once kept for describe (the last few).
template <class... Ts>
caf::result<Ts...> noted(coordinator_pointer self, caf::result<Ts...> r) {
  if (r.flag == caf::rt_error) self->state.tally.failed(from_caf(r.err).message);
  return r;
}

}  // namespace coord


coordinator_actor spawn_coordinator(caf::actor_system& sys, coordinator_config cfg, pool_actor pool) {
  return sys.spawn([cfg, pool](coordinator_pointer self) -> coordinator_actor::behavior_type {
    self->state.cfg = cfg;
    self->state.pool = pool;
    using namespace coord;
    const auto control = cfg.timeouts.control;
    self->set_down_handler([self](caf::down_msg& dm) {
      // Only a worker holding something here is watched; the console's listeners and the
      // generations it describes are monitored too, and only forgotten when they end.
      if (!self->state.watched.count(dm.source)) return void(drop_listener(self, dm.source));
      on_worker_lost(self, dm.source);
    });
    // Workers joining and leaving, for the console (and the ids that name them there).
    self->send(pool, subscribe_atom::value, caf::actor_cast<grid_listener>(self));

    return {
        // ------------------------------------------------------------ discovery
        [=](versions_atom) -> caf::result<std::string> {
          self->state.tally.count();
          auto rp = self->make_response_promise<std::string>();
          self->request(self->state.pool, control, workers_atom::value)
              .then(
                  [=](std::vector<worker_status>& ws) mutable {
                    const auto& sc = schema::instance();
                    std::vector<std::string> v2ops, v3ops;
                    for (const auto& o : sc.ops()) (o.added_in == "v2" ? v2ops : v3ops).push_back(o.name);
                    rp.deliver(json([&](writer& w) {
                      w.StartObject();
                      key(w, "current"); str(w, "v3");
                      key(w, "versions");
                      w.StartArray();
                      w.StartObject();
                      key(w, "version"); str(w, "v1");
                      key(w, "status"); str(w, "live");
                      key(w, "aliasOf"); str(w, "v2");
                      w.EndObject();
                      w.StartObject();
                      key(w, "version"); str(w, "v2");
                      key(w, "status"); str(w, "live");
                      key(w, "supports"); strings(w, {"tensors", "graph"});
                      key(w, "ops"); strings(w, v2ops);
                      key(w, "uploadQuotaBytes"); w.Uint64(self->state.cfg.v2_quota_bytes);
                      w.EndObject();
                      w.StartObject();
                      key(w, "version"); str(w, "v3");
                      key(w, "status"); str(w, "live");
                      key(w, "current"); w.Bool(true);
                      key(w, "supports");
                      strings(w, {"models", "inspect", "quantize", "sessions", "graph", "compiledGraphs", "multiSessionGraphs",
                                  "random"});
                      key(w, "ops"); w.Uint64(sc.ops().size());
                      key(w, "opsHash"); str(w, sc.ops_hash());
                      w.EndObject();
                      w.EndArray();
                      key(w, "compute");
                      w.StartObject();
                      key(w, "version"); str(w, "v0");
                      key(w, "status"); str(w, "beta");
                      key(w, "note"); str(w, "mPAKT Compute is a separate service, not part of this API");
                      w.EndObject();
                      key(w, "limits");
                      w.RawValue(limits_json(self->state.cfg, ws).c_str(), limits_json(self->state.cfg, ws).size(),
                                 rapidjson::kObjectType);
                      w.EndObject();
                    }));
                  },
                  [=](caf::error& e) mutable { fail(self, rp, e); });
          return rp;
        },
        [=](recheck_atom, const caller&, const std::string& worker_id) -> caf::result<std::string> {
          self->state.tally.count();
          // The worker by its id among the pool's members; its checked worker does the checking.
          auto rp = self->make_response_promise<std::string>();
          self->request(self->state.pool, control, members_atom::value)
              .then(
                  [=](std::vector<worker_actor>& ws, std::vector<worker_status>& ss) mutable {
                    for (std::size_t i = 0; i < ws.size() && i < ss.size(); ++i) {
                      if (ss[i].worker_id != worker_id) continue;
                      self->request(ws[i], std::chrono::minutes(10), recheck_atom::value)
                          .then([rp](std::string& report) mutable { rp.deliver(std::move(report)); },
                                [self, rp](caf::error& e) mutable { fail(self, rp, std::move(e)); });
                      return;
                    }
                    fail(self, rp, to_caf(errc::not_found, "no worker " + worker_id + " in the pool"));
                  },
                  [self, rp](caf::error& e) mutable { fail(self, rp, std::move(e)); });
          return rp;
        },
        [=](status_atom, const caller& who) -> caf::result<std::string> {
          self->state.tally.count();
          auto rp = self->make_response_promise<std::string>();
          self->request(self->state.pool, control, workers_atom::value)
              .then(
                  [=](std::vector<worker_status>& ws) mutable {
                    std::map<std::string, int> backends{{"webgpu", 0}, {"npu", 0}, {"npu+webgpu", 0}, {"cpu", 0}};
                    std::uint64_t free = 0, total = 0, max_tensor = 0, generations = 0;
                    std::vector<std::string> features;
                    for (std::size_t i = 0; i < ws.size(); ++i) {
                      backends[ws[i].backend]++;
                      free += ws[i].free_bytes;
                      total += ws[i].total_bytes;
                      max_tensor = std::max(max_tensor, ws[i].max_tensor_bytes);
                      generations += ws[i].generations;
                      if (i == 0) {
                        features = ws[i].features;
                      } else {
                        std::vector<std::string> both;
                        for (const auto& f : features)
                          if (std::find(ws[i].features.begin(), ws[i].features.end(), f) != ws[i].features.end()) both.push_back(f);
                        features = both;
                      }
                    }
                    const auto& sc = schema::instance();
                    rp.deliver(json([&](writer& w) {
                      w.StartObject();
                      key(w, "workers"); w.Uint64(ws.size());
                      key(w, "backends");
                      w.StartObject();
                      for (const auto& [b, n] : backends) { key(w, b.c_str()); w.Int(n); }
                      w.EndObject();
                      key(w, "ops"); w.Uint64(sc.ops().size());
                      key(w, "opsHash"); str(w, sc.ops_hash());
                      key(w, "features"); strings(w, features);
                      key(w, "freeBytes"); w.Uint64(free);
                      key(w, "totalBytes"); w.Uint64(total);
                      key(w, "byteUnits"); str(w, "resident");
                      key(w, "generations"); w.Uint64(generations);
                      key(w, "device");
                      w.StartObject();
                      key(w, "maxTensorBytes"); w.Uint64(max_tensor);
                      w.EndObject();
                      key(w, "pool");
                      w.StartArray();
                      for (const auto& s : ws) {
                        w.StartObject();
                        key(w, "workerId"); str(w, s.worker_id);
                        key(w, "backend"); str(w, s.backend);
                        key(w, "freeBytes"); w.Uint64(s.free_bytes);
                        key(w, "totalBytes"); w.Uint64(s.total_bytes);
                        key(w, "packedWeights"); w.Bool(s.packed_weights);
                        key(w, "quantizeOnLoad"); w.Bool(s.can_quantize);
                        // end-to-end time of the pool's probe call (placement ranks by it)
                        key(w, "measuredMs");
                        if (s.measured_ms > 0) w.Double(s.measured_ms);
                        else w.Null();
                        // which CPU kernel paths it runs (backends/cpu/isa.hpp)
                        key(w, "kernels"); str(w, s.kernels);
                        key(w, "cpu"); str(w, s.cpu);
                        key(w, "threads"); w.Uint(s.threads);
                        // what it is computing now (null when idle), and the calls waiting behind it
                        key(w, "busy");
                        if (s.busy_since_ms == 0) {
                          w.Null();
                        } else {
                          w.StartObject();
                          key(w, "since"); str(w, iso_from_unix_ms(s.busy_since_ms));
                          key(w, "forMs"); w.Uint64(s.busy_ms);
                          // ids are shown only to their owner (they are unguessable on purpose)
                          auto& S = self->state;
                          std::string graph = s.busy_graph;
                          const bool compiling = graph.rfind("compile ", 0) == 0;
                          if (compiling) graph = graph.substr(8);
                          graph = graph.substr(0, graph.find('/'));  // a spread model's stage
                          if (graph != "inline" && !S.find(S.graphs, graph, who)) graph = "another account's graph";
                          key(w, "graph"); str(w, graph);
                          key(w, "compiling"); w.Bool(compiling);
                          if (!s.busy_session.empty() && S.find(S.sessions, s.busy_session, who)) {
                            key(w, "session"); str(w, s.busy_session);
                          }
                          key(w, "stepsDone"); w.Uint(s.busy_steps_done);
                          key(w, "steps"); w.Uint(s.busy_steps);
                          w.EndObject();
                        }
                        key(w, "queued"); w.Uint(s.queued);
                        // a volunteer's spot-checks (actors/coordinator/checked_worker.hpp)
                        key(w, "checks");
                        if (!s.checked) {
                          w.Null();
                        } else {
                          w.StartObject();
                          key(w, "passed"); w.Uint(s.checks_passed);
                          key(w, "unchecked"); w.Uint(s.checks_unchecked);
                          key(w, "inconclusive"); w.Uint(s.checks_inconclusive);
                          key(w, "firstLeft"); w.Uint(s.checks_first_left);
                          key(w, "exact"); w.Bool(s.checks_exact);
                          key(w, "weightsChecked"); w.Uint(s.weights_checked);
                          key(w, "weightsUnchecked"); w.Uint(s.weights_unchecked);
                          w.EndObject();
                        }
                        key(w, "models");  // the caller's models placed there
                        w.StartArray();
                        for (const auto& [id, m] : self->state.models) {
                          if (m.account != who.account) continue;
                          bool here = m.worker_id == s.worker_id && !self->state.is_lost(m.worker);
                          for (const auto& part : m.parts)
                            here = here || (part.worker_id == s.worker_id && !self->state.is_lost(part.worker));
                          if (here) str(w, id);
                        }
                        w.EndArray();
                        w.EndObject();
                      }
                      w.EndArray();
                      // volunteers ended by spot-checks since the coordinator started
                      key(w, "quarantined");
                      w.StartArray();
                      if (self->state.cfg.quarantine)
                        for (const auto& q : self->state.cfg.quarantine->list()) {
                          w.StartObject();
                          key(w, "workerId"); str(w, q.worker_id);
                          key(w, "volunteer"); str(w, q.volunteer);
                          key(w, "reason"); str(w, q.reason);
                          key(w, "at"); str(w, iso_from_unix_ms(q.at_unix_ms));
                          w.EndObject();
                        }
                      w.EndArray();
                      w.EndObject();
                    }));
                  },
                  [=](caf::error& e) mutable { fail(self, rp, e); });
          return rp;
        },
        // ------------------------------------------------------------ models
        [=](inspect_atom, const caller& who, const std::string& source, const std::string& token) -> caf::result<std::string> {
          self->state.tally.count();
          return noted(self, inspect_model(self, who, source, token));
        },
        [=](load_atom, const caller& who, load_call& call) -> caf::result<std::string> {
          self->state.tally.count();
          return noted(self, load_model(self, who, call));
        },
        [=](list_atom, models_atom, const caller& who) -> caf::result<std::string> {
          self->state.tally.count();
          return noted(self, list_models(self, who));
        },
        [=](files_atom, const caller& who, const std::string& id) -> caf::result<std::string, std::string, std::string, std::string> {
          self->state.tally.count();
          return noted(self, model_files(self, who, id));
        },
        [=](delete_atom, models_atom, const caller& who, const std::string& id) -> caf::result<std::string> {
          self->state.tally.count();
          return noted(self, delete_model(self, who, id));
        },
        // ------------------------------------------------------------ sessions
        [=](create_atom, sessions_atom, const caller& who, const session_call& call) -> caf::result<std::string> {
          self->state.tally.count();
          return noted(self, open_session(self, who, call));
        },
        [=](get_atom, sessions_atom, const caller& who, const std::string& id) -> caf::result<std::string> {
          self->state.tally.count();
          return noted(self, describe_session(self, who, id));
        },
        [=](delete_atom, sessions_atom, const caller& who, const std::string& id) -> caf::result<std::string> {
          self->state.tally.count();
          return noted(self, close_session(self, who, id));
        },
        // ------------------------------------------------------------ graphs
        [=](graph_atom, const caller& who, graph_call& call) -> caf::result<run_reply> {
          self->state.tally.count();
          return noted(self, run_graph(self, who, call));
        },
        // (tensorId -> model, weight for the caller's loaded weights, as flat triples: the edge
        // rewrites those inputs before routing)
        [=](resolve_atom, const caller& who, const std::vector<std::string>& ids) -> std::vector<std::string> {
          self->state.tally.count();
          return resolve_weights(self, who, ids);
        },
        [=](create_atom, graphs_atom, const caller& who, compile_call& call) -> caf::result<std::string> {
          self->state.tally.count();
          return noted(self, compile_graph(self, who, call));
        },
        [=](list_atom, graphs_atom, const caller& who) -> caf::result<std::string> {
          self->state.tally.count();
          return noted(self, list_graphs(self, who));
        },
        [=](delete_atom, graphs_atom, const caller& who, const std::string& id) -> caf::result<std::string> {
          self->state.tally.count();
          return noted(self, delete_graph(self, who, id));
        },
        // ------------------------------------------------------------ generate
        [=](generate_atom, const caller& who, const generate_call& call) -> caf::result<gen_plan> {
          self->state.tally.count();
          return noted(self, plan_generation(self, who, call));
        },
        // ------------------------------------------------------------ checkpoints
        [=](journal_atom, const caller& who, gen_journal& j) {
          self->state.tally.count();
          journal_generation(self, who, j);
        },
        [=](reportdue_atom, const std::string& sid) {
          self->state.tally.count();
          report_due(self, sid);
        },
        [=](replan_atom, const caller& who, gen_plan& plan) -> caf::result<gen_plan> {
          self->state.tally.count();
          return noted(self, replan_generation(self, who, plan));
        },
        [=](checkpt_atom, const caller& who, const std::string& id) -> caf::result<std::string> {
          self->state.tally.count();
          return noted(self, checkpoint_session(self, who, id));
        },
        [=](restore_atom, const caller& who, const std::string& id) -> caf::result<std::string> {
          self->state.tally.count();
          return noted(self, restore_session(self, who, id));
        },
        // ------------------------------------------------------------ v2 tensors
        [=](create_atom, tensors_atom, const caller& who, tensor_call& t) -> caf::result<std::string> {
          self->state.tally.count();
          return noted(self, upload_tensor(self, who, t));
        },
        [=](delete_atom, tensors_atom, const caller& who, const std::string& id) -> caf::result<std::string> {
          self->state.tally.count();
          return noted(self, delete_tensor(self, who, id));
        },
        // ------------------------------------------------------------ cancellation
        [=](cancel_atom, const caf::actor_addr& requester) {
          self->state.tally.count();
          auto& S = self->state;
          auto it = S.running.find(requester);
          if (it == S.running.end()) return;  // answered already
          caf::anon_send(it->second.first, runcancel_atom::value, it->second.second);
          S.running.erase(it);
        },
        // ------------------------------------------------------------ the console
        [=](describe_atom) {
          self->state.tally.count();
          return describe_coordinator(self);
        },
        [=](actors_atom) -> caf::result<std::vector<actor_snapshot>> {
          self->state.tally.count();
          return describe_grid(self);
        },
        [=](gridevent_atom, grid_event& e, describable who) { on_grid_event(self, e, std::move(who)); },
        [=](subscribe_atom, grid_listener l) { add_listener(self, std::move(l)); },
        // ------------------------------------------------------------ metrics
        [=](metrics_atom) -> caf::result<std::uint64_t, std::uint64_t, std::uint64_t, std::vector<worker_status>> {
          self->state.tally.count();
          auto& S = self->state;
          const std::uint64_t sessions = S.sessions.size(), graphs = S.graphs.size(), models = S.models.size();
          auto rp = self->make_response_promise<std::uint64_t, std::uint64_t, std::uint64_t, std::vector<worker_status>>();
          // (the pool asks each worker's front, which answers while its compute side is busy)
          self->request(S.pool, control, workers_atom::value)
              .then([=](std::vector<worker_status>& ws) mutable { rp.deliver(sessions, graphs, models, std::move(ws)); },
                    [=](caf::error& e) mutable { fail(self, rp, std::move(e)); });
          return rp;
        },
    };
  });
}

}  // namespace mpakt
