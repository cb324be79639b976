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

namespace {

using writer = json_writer;

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


result<rapidjson::Document> parse_body(const std::string& body, bool allow_empty = false) {
  if (allow_empty && body.find_first_not_of(" \t\r\n") == std::string::npos) {
    rapidjson::Document d;
    d.SetObject();
    return d;
  }
  return parse_json_object(body, "request body");
}

/// A token id of a generate request (ids, stopIds, speculative.context): 0 to 2^31 - 1.
result<std::int64_t> token_id(const rapidjson::Value& v, const std::string& field) {
  return json_integer(v, field, 0, INT32_MAX);
}

/// Delivers a JSON text or an error to a promise.
template <class Promise>
void deliver(Promise& rp, result<std::string> r) {
  if (r) rp.deliver(std::move(*r));
  else rp.deliver(to_caf(r.err()));
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

}  // namespace

coordinator_actor spawn_coordinator(caf::actor_system& sys, coordinator_config cfg, pool_actor pool) {
  return sys.spawn([cfg, pool](coordinator_pointer self) -> coordinator_actor::behavior_type {
    self->state.cfg = cfg;
    self->state.pool = pool;
    const auto control = cfg.timeouts.control;
    self->set_down_handler([self](caf::down_msg& dm) { on_worker_lost(self, dm.source); });

    /// Resolves the references of a graph (models, tensorIds, sessions; decoded at the edge,
    /// http/api/requests.hpp) against the caller's directory and picks the worker.
    struct routed {
      bool wait = false;    ///< it touches a lost worker whose models and sessions are being placed again
      worker_actor worker;  ///< may be invalid: any worker will do
      std::set<std::string> models;
    };
    auto route = [self](const caller& who, const graph_refs& refs, const std::string& primary,
                        const std::vector<std::string>& sessions) -> result<routed> {
      auto& S = self->state;
      routed r;
      auto pin = [&](const worker_actor& w, const std::string& what) -> status {
        if (S.is_recovering(w)) {
          r.wait = true;
          return {};
        }
        if (S.is_lost(w)) return make_error(errc::unavailable, lost_message(what));
        if (!r.worker) {
          r.worker = w;
        } else if (r.worker != w) {
          return make_error(errc::conflict, what + " lives on a different worker from the rest of the graph");
        }
        return {};
      };
      std::vector<std::string> all_sessions = sessions;
      if (all_sessions.empty() && !primary.empty()) all_sessions.push_back(primary);
      for (const auto& sid : all_sessions) {
        auto* s = S.find(S.sessions, sid, who);
        if (!s) return make_error(errc::not_found, "session " + sid + " does not exist");
        MPAKT_TRY(pin(s->worker, "session " + sid));
        if (!r.wait) MPAKT_TRY(s->take_restored_note());
      }
      // Inputs: owned models and v2 tensors (tensorIds of weights the edge rewrote already).
      for (const auto& in : refs.inputs) {
        const std::string at = "inputs[" + std::to_string(in.input) + "] (" + in.name + ")";
        if (in.weight) {
          auto* m = S.find(S.models, in.id, who);
          if (!m) return make_error(errc::not_found, at + ": model " + in.id + " does not exist");
          MPAKT_TRY(pin(m->worker, "model " + in.id));
          r.models.insert(in.id);
        } else if (auto* t = S.find(S.tensors, in.id, who)) {
          MPAKT_TRY(pin(t->worker, "tensor " + in.id));
        } else {
          return make_error(errc::not_found, at + ": tensor " + in.id + " does not exist");
        }
      }
      return r;
    };

    /// Runs a routed graph request on `w` (through the session's actor when there is one, or
    /// the compiled graph's) and delivers the worker's reply. A success on a checkpointed
    /// session is journaled (for replay after an automatic restore). A failure because the
    /// worker left the grid starts its recovery and answers errc::retry: the edge, which still
    /// holds the request, sends it again, and it then waits for the recovery and is routed
    /// afresh — so a client does not notice a lost worker whose weights and checkpointed
    /// sessions could be placed again, and the coordinator keeps no copy of a graph in flight.
    auto run_on = [self](caf::typed_response_promise<run_reply> rp, run_request req, worker_actor w,
                         std::optional<graph_actor> compiled, caf::actor_addr requester) {
      auto& S = self->state;
      const std::string primary = req.session.empty() && !req.sessions.empty() ? req.sessions.front() : req.session;
      // Only a call on a checkpointed session is kept, for its journal.
      std::shared_ptr<run_request> journaled;
      if (!primary.empty() && S.checkpoints.count(primary)) journaled = std::make_shared<run_request>(req);
      const bool multi = req.sessions.size() > 1;
      // The worker stops the call at the graph limit; the requester (an HTTP request) may
      // cancel it by this id when its client goes away.
      req.timeout_ms = std::uint64_t(S.cfg.timeouts.graph.count());
      req.run_id = "r_" + std::to_string(++S.next_run);
      const std::string run_id = req.run_id;
      if (requester && requester != self->address() && w) S.running[requester] = {w, run_id};
      auto forget = [self, requester, run_id] {
        auto it = self->state.running.find(requester);
        if (it != self->state.running.end() && it->second.second == run_id) self->state.running.erase(it);
      };
      auto retry = [] {
        return to_caf(errc::retry, "the graph's worker left the grid while running it; send the call again");
      };
      // Exactly one of: the reply, the error, or the worker's loss settles the call.
      std::function<bool()> settle = [] { return true; };
      if (w) settle = track_call(self, w.address(), [rp, retry]() mutable { rp.deliver(retry()); });
      auto done = [self, rp, primary, journaled, multi, settle, forget](run_reply& reply) mutable {
        forget();
        if (!settle()) return;
        auto& S = self->state;
        if (auto it = S.sessions.find(primary); it != S.sessions.end() && S.checkpoints.count(primary)) {
          auto& e = it->second;
          if (multi) e.journal_broken = "a multi-session graph ran on it";
          else if (!journaled) e.journal_broken = "a call ran on it while its checkpoint was being taken";
          else if (e.journal.size() >= max_journal) e.journal_broken = "more than " + std::to_string(max_journal) + " calls since the checkpoint";
          else if (e.journal_broken.empty()) e.journal.push_back(*journaled);
        }
        rp.deliver(std::move(reply));
      };
      auto fail = [self, rp, w, retry, settle, forget](caf::error& e) mutable {
        forget();
        if (!settle()) return;
        if (actor_gone(e) && w) {
          on_worker_lost(self, w.address());
          rp.deliver(retry());
          return;
        }
        if (e == caf::sec::request_timeout) {
          rp.deliver(graph_timeout_error(self->state.cfg.timeouts, "its worker"));
          return;
        }
        rp.deliver(caf::error(e));
      };
      const auto limit = S.cfg.timeouts.graph + S.cfg.timeouts.answer_grace;
      if (compiled && !primary.empty()) {
        // Through the session's actor, which counts the step and runs on its worker.
        auto it = S.sessions.find(primary);
        self->request(it->second.actor, limit + std::chrono::seconds(5), run_atom::value, std::move(req), *compiled)
            .then(done, fail);
        return;
      }
      if (compiled) {
        self->request(*compiled, limit + std::chrono::seconds(5), run_atom::value, std::move(req), w).then(done, fail);
        return;
      }
      if (!primary.empty()) {
        auto it = S.sessions.find(primary);
        self->request(it->second.actor, limit + std::chrono::seconds(5), run_atom::value, std::move(req)).then(done, fail);
        return;
      }
      self->request(w, limit, run_atom::value, std::move(req)).then(done, fail);
    };

    /// The worker to use when a graph names no session or weights: the one with most free
    /// among those offering every op and feature the graph uses.
    auto with_any_worker = [self](std::vector<std::string> needs, std::function<void(result<worker_actor>)> k) {
      self->request(self->state.pool, std::chrono::seconds(10), pick_atom::value, std::uint64_t(0), std::move(needs))
          .then([k](worker_actor& w, worker_status&) { k(w); }, [k](caf::error& e) { k(from_caf(e)); });
    };

    return {
        // ------------------------------------------------------------ discovery
        [=](versions_atom) -> caf::result<std::string> {
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
                  [=](caf::error& e) mutable { rp.deliver(caf::error(e)); });
          return rp;
        },
        [=](status_atom, const caller& who) -> caf::result<std::string> {
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
                      w.EndObject();
                    }));
                  },
                  [=](caf::error& e) mutable { rp.deliver(caf::error(e)); });
          return rp;
        },
        // ------------------------------------------------------------ models
        [=](inspect_atom, const caller&, const std::string& source, const std::string& token) -> caf::result<std::string> {
          if (source.empty()) return to_caf(errc::invalid, "inspect needs a source query parameter, e.g. ?source=hf:Org/Model");
          auto rp = self->make_response_promise<std::string>();
          auto job = spawn_load_job(self->system(), self->state.cfg.load, self->state.pool);
          self->request(job, std::chrono::minutes(5), inspect_atom::value, source, token)
              .then([=](std::string& j) mutable { rp.deliver(std::move(j)); },
                    [=](caf::error& e) mutable { rp.deliver(caf::error(e)); });
          return rp;
        },
        [=](load_atom, const caller& who, const std::string& body) -> caf::result<std::string> {
          auto& S = self->state;
          auto d = parse_body(body);
          if (!d) return to_caf(d.err());
          if (auto s = check_fields(*d, {"source", "include", "exclude", "names", "quantize", "token"}, "load request"); !s)
            return to_caf(s.err());
          load_job_request req;
          auto src = opt_string(*d, "source", "load request");
          if (!src) return to_caf(src.err());
          if (src->empty()) return to_caf(errc::invalid, "load request needs a source, e.g. \"hf:Org/Model\"");
          req.source = *src;
          for (auto [k, out] : {std::pair{"include", &req.include}, {"exclude", &req.exclude}, {"names", &req.names}}) {
            auto v = opt_strings(*d, k, "load request");
            if (!v) return to_caf(v.err());
            *out = std::move(*v);
          }
          auto q = opt_string(*d, "quantize", "load request");
          if (!q) return to_caf(q.err());
          req.quantize = *q;
          auto token = opt_string(*d, "token", "load request");
          if (!token) return to_caf(token.err());
          req.token = *token;
          const int held = S.count_for_key(S.models, who.key_id) + S.pending_loads[who.key_id];
          if (held >= S.cfg.max_models_per_key)
            return to_caf(errc::limit, "this key already holds " + std::to_string(S.cfg.max_models_per_key) +
                                           " models, the limit; delete one first");
          req.model_id = new_id("m_");
          S.pending_loads[who.key_id]++;
          auto rp = self->make_response_promise<std::string>();
          auto job = spawn_load_job(self->system(), S.cfg.load, S.pool);
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
                    m.commit = out.commit;
                    m.token = req.token;
                    m.whole = req.include.empty() && req.exclude.empty() && req.names.empty();
                    m.published_bytes = out.published_bytes;
                    m.resident_bytes = out.resident_bytes;
                    m.tensors = out.tensor_ids.size();
                    for (const auto& [tid, name] : out.tensor_ids) S.weight_ids[tid] = {req.model_id, name};
                    S.models[req.model_id] = std::move(m);
                    rp.deliver(std::move(out.reply_json));
                  },
                  [=](caf::error& e) mutable {
                    self->state.pending_loads[who.key_id]--;
                    metrics::m().load_duration.with({"failed"}).observe(seconds_since());
                    log::line("warn", "coordinator", "load of " + req.model_id + " failed: " + from_caf(e).message,
                              {{"request_id", who.request_id}, {"model_id", req.model_id}});
                    rp.deliver(caf::error(e));
                  });
          return rp;
        },
        [=](list_atom, models_atom, const caller& who) -> caf::result<std::string> {
          auto rp = self->make_response_promise<std::string>();
          self->request(self->state.pool, control, workers_atom::value)
              .then(
                  [=](std::vector<worker_status>& ws) mutable {
                    auto& S = self->state;
                    std::uint64_t free = 0, total = 0;
                    for (const auto& s : ws) { free += s.free_bytes; total += s.total_bytes; }
                    rp.deliver(json([&](writer& w) {
                      w.StartObject();
                      key(w, "models");
                      w.StartArray();
                      for (const auto& [id, m] : S.models) {
                        if (m.account != who.account) continue;
                        w.StartObject();
                        key(w, "modelId"); str(w, id);
                        key(w, "source"); str(w, m.source);
                        key(w, "commit");
                        if (m.commit.empty()) w.Null();
                        else str(w, m.commit);
                        key(w, "tensors"); w.Uint64(m.tensors);
                        key(w, "bytesTransferred"); w.Uint64(m.published_bytes);
                        key(w, "residentBytes"); w.Uint64(m.resident_bytes);
                        key(w, "quantize"); str(w, m.quantize);
                        key(w, "whole"); w.Bool(m.whole);
                        key(w, "placement");
                        w.StartArray();
                        if (!m.parts.empty()) {
                          for (const auto& part : m.parts) {
                            if (S.is_lost(part.worker)) continue;
                            w.StartObject();
                            key(w, "workerId"); str(w, part.worker_id);
                            key(w, "tensors"); w.Uint64(part.tensors.size());
                            key(w, "residentBytes"); w.Uint64(part.resident_bytes);
                            w.EndObject();
                          }
                        } else if (!S.is_lost(m.worker)) {
                          w.StartObject();
                          key(w, "workerId"); str(w, m.worker_id);
                          key(w, "tensors"); w.Uint64(m.tensors);
                          key(w, "residentBytes"); w.Uint64(m.resident_bytes);
                          w.EndObject();
                        }
                        w.EndArray();
                        key(w, "createdAt"); str(w, m.created_at);
                        w.EndObject();
                      }
                      w.EndArray();
                      key(w, "capacity");
                      w.StartObject();
                      key(w, "workers"); w.Uint64(ws.size());
                      key(w, "freeBytes"); w.Uint64(free);
                      key(w, "totalBytes"); w.Uint64(total);
                      key(w, "byteUnits"); str(w, "resident");
                      w.EndObject();
                      w.EndObject();
                    }));
                  },
                  [=](caf::error& e) mutable { rp.deliver(caf::error(e)); });
          return rp;
        },
        [=](files_atom, const caller& who, const std::string& id)
            -> caf::result<std::string, std::string, std::string, std::string> {
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
                  [=](caf::error& e) mutable { rp.deliver(caf::error(e)); });
          return rp;
        },
        [=](delete_atom, models_atom, const caller& who, const std::string& id) -> caf::result<std::string> {
          auto& S = self->state;
          auto* m = S.find(S.models, id, who);
          if (!m) return to_caf(errc::not_found, "model " + id + " does not exist");
          caf::anon_send(m->actor, delete_atom::value);
          caf::anon_send(m->worker, dropmodel_atom::value, id);  // where it is now, after any re-placement
          for (auto it = S.weight_ids.begin(); it != S.weight_ids.end();)
            it = it->second.first == id ? S.weight_ids.erase(it) : std::next(it);
          S.models.erase(id);
          return json([&](writer& w) {
            w.StartObject();
            key(w, "deleted"); w.Bool(true);
            key(w, "modelId"); str(w, id);
            w.EndObject();
          });
        },
        // ------------------------------------------------------------ sessions
        [=](create_atom, sessions_atom, const caller& who, const std::string& body) -> caf::result<std::string> {
          auto& S = self->state;
          auto d = parse_body(body, true);
          if (!d) return to_caf(d.err());
          if (auto s = check_fields(*d, {"modelId", "label"}, "session request"); !s) return to_caf(s.err());
          auto model_id = opt_string(*d, "modelId", "session request");
          if (!model_id) return to_caf(model_id.err());
          auto label = opt_string(*d, "label", "session request");
          if (!label) return to_caf(label.err());
          if (S.count_for_key(S.sessions, who.key_id) >= S.cfg.max_sessions_per_key)
            return to_caf(errc::limit, "this key already holds " + std::to_string(S.cfg.max_sessions_per_key) +
                                           " sessions, the limit; delete one first");
          auto* m = model_id->empty() ? nullptr : S.find(S.models, *model_id, who);
          if (!model_id->empty() && !m) return to_caf(errc::not_found, "model " + *model_id + " does not exist");
          auto rp = self->make_response_promise<std::string>();
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
                      e.model_id = *model_id;
                      e.label = *label;
                      e.actor = spawn_session(self->system(), sid, w, S.cfg.timeouts);
                      self->link_to(e.actor);
                      S.sessions[sid] = e;
                      rp.deliver(json([&](writer& jw) {
                        jw.StartObject();
                        key(jw, "session");
                        jw.StartObject();
                        key(jw, "sessionId"); str(jw, sid);
                        if (!e.model_id.empty()) { key(jw, "modelId"); str(jw, e.model_id); }
                        if (!e.label.empty()) { key(jw, "label"); str(jw, e.label); }
                        key(jw, "createdAt"); str(jw, e.created_at);
                        jw.EndObject();
                        jw.EndObject();
                      }));
                    },
                    [=](caf::error& e) mutable { rp.deliver(caf::error(e)); });
          };
          if (m) {
            open(m->worker);  // a session lives where its model's weights are
          } else {
            with_any_worker({}, [=](result<worker_actor> w) mutable {
              if (!w) rp.deliver(to_caf(w.err()));
              else open(*w);
            });
          }
          return rp;
        },
        [=](get_atom, sessions_atom, const caller& who, const std::string& id) -> caf::result<std::string> {
          auto& S = self->state;
          auto* s = S.find(S.sessions, id, who);
          if (!s) return to_caf(errc::not_found, "session " + id + " does not exist");
          if (S.is_lost(s->worker)) return to_caf(errc::unavailable, lost_message("session " + id));
          auto rp = self->make_response_promise<std::string>();
          const session_entry e = *s;
          self->request(s->actor, control, info_atom::value)
              .then(
                  [=](session_info& info, std::uint64_t steps) mutable {
                    rp.deliver(json([&](writer& w) {
                      w.StartObject();
                      key(w, "sessionId"); str(w, id);
                      if (!e.model_id.empty()) { key(w, "modelId"); str(w, e.model_id); }
                      if (!e.label.empty()) { key(w, "label"); str(w, e.label); }
                      key(w, "createdAt"); str(w, e.created_at);
                      key(w, "tensors");
                      w.StartArray();
                      for (const auto& t : info.tensors) {
                        w.StartObject();
                        key(w, "name"); str(w, t.name);
                        key(w, "shape");
                        w.StartArray();
                        for (auto d : t.shape) w.Int64(d);
                        w.EndArray();
                        key(w, "dtype"); str(w, t.dtype);
                        key(w, "bytes"); w.Uint64(t.bytes);
                        w.EndObject();
                      }
                      w.EndArray();
                      key(w, "bytes"); w.Uint64(info.bytes);
                      key(w, "steps"); w.Uint64(steps);
                      w.EndObject();
                    }));
                  },
                  [=](caf::error& e) mutable { rp.deliver(caf::error(e)); });
          return rp;
        },
        [=](delete_atom, sessions_atom, const caller& who, const std::string& id) -> caf::result<std::string> {
          auto& S = self->state;
          auto* s = S.find(S.sessions, id, who);
          if (!s) return to_caf(errc::not_found, "session " + id + " does not exist");
          caf::anon_send(s->actor, delete_atom::value);
          S.sessions.erase(id);
          S.checkpoints.erase(id);
          return json([&](writer& w) {
            w.StartObject();
            key(w, "deleted"); w.Bool(true);
            key(w, "sessionId"); str(w, id);
            w.EndObject();
          });
        },
        // ------------------------------------------------------------ graphs
        [=](graph_atom, const caller& who, graph_call& call) -> caf::result<run_reply> {
          auto& S = self->state;
          // A call touching a lost worker whose models and sessions are being placed again waits
          // for that (holding the call, not a copy of it), then is routed afresh; other calls go
          // on meanwhile.
          auto wait = [&] {
            auto rp = self->make_response_promise<run_reply>();
            auto held = std::make_shared<graph_call>(std::move(call));
            S.waiting.push_back([self, rp, who, held] { resend(self, rp, graph_atom::value, who, std::move(*held)); });
            return rp;
          };
          run_request req;
          req.base64 = call.base64;
          req.session = call.session;
          req.sessions = call.sessions;
          // The promise is made only after the synchronous checks: an error returned once a
          // promise exists would never reach the caller.
          if (!call.graph_id.empty()) {
            auto* g = S.find(S.graphs, call.graph_id, who);
            if (!g) return to_caf(errc::not_found, "graph " + call.graph_id + " does not exist");
            req.bind_json = call.bind_json;
            req.graph_id = call.graph_id;  // the graph actor sets it too; the journal needs it here
            worker_actor w = g->worker;
            std::vector<std::string> all = req.sessions;
            if (all.empty() && !req.session.empty()) all.push_back(req.session);
            for (std::size_t i = 0; i < all.size(); ++i) {
              auto* s = S.find(S.sessions, all[i], who);
              if (!s) return to_caf(errc::not_found, "session " + all[i] + " does not exist");
              if (S.is_recovering(s->worker)) return wait();
              if (S.is_lost(s->worker)) return to_caf(errc::unavailable, lost_message("session " + all[i]));
              if (auto note = s->take_restored_note(); !note) return to_caf(note.err());
              if (i == 0) w = s->worker;
              else if (s->worker != w)
                return to_caf(errc::conflict, "session " + all[i] + " lives on a different worker from session " + all[0]);
            }
            for (const auto& mid : g->models) {
              auto* m = S.find(S.models, mid, who);
              if (!m) return to_caf(errc::not_found, "model " + mid + ", which graph " + call.graph_id + " reads, no longer exists");
              if (S.is_recovering(m->worker)) return wait();
              if (S.is_lost(m->worker)) return to_caf(errc::unavailable, lost_message("model " + mid));
            }
            // (before the promise, which takes the sender over)
            const auto requester = caf::actor_cast<caf::actor_addr>(self->current_sender());
            auto rp = self->make_response_promise<run_reply>();
            run_on(rp, std::move(req), w, g->actor, requester);
            return rp;
          }
          auto r = route(who, call.refs, call.session, call.sessions);
          if (!r) return to_caf(r.err());
          if (r->wait) return wait();
          req.graph_json = std::move(call.graph_json);
          // (before the promise, which takes the sender over)
          const auto requester = caf::actor_cast<caf::actor_addr>(self->current_sender());
          auto rp = self->make_response_promise<run_reply>();
          if (r->worker) {
            run_on(rp, std::move(req), r->worker, std::nullopt, requester);
          } else {
            with_any_worker(call.refs.needs, [=](result<worker_actor> w) mutable {
              if (!w) rp.deliver(to_caf(w.err()));
              else run_on(rp, std::move(req), *w, std::nullopt, requester);
            });
          }
          return rp;
        },
        // (tensorId -> model, weight for the caller's loaded weights, as flat triples: the edge
        // rewrites those inputs before routing)
        [=](resolve_atom, const caller& who, const std::vector<std::string>& ids) -> std::vector<std::string> {
          auto& S = self->state;
          std::vector<std::string> out;
          for (const auto& id : ids) {
            if (S.find(S.tensors, id, who)) continue;  // a v2 upload: read as is
            auto w = S.weight_ids.find(id);
            if (w == S.weight_ids.end() || !S.find(S.models, w->second.first, who)) continue;
            out.insert(out.end(), {id, w->second.first, w->second.second});
          }
          return out;
        },
        [=](create_atom, graphs_atom, const caller& who, compile_call& call) -> caf::result<std::string> {
          auto& S = self->state;
          if (S.count_for_key(S.graphs, who.key_id) >= S.cfg.max_graphs_per_key)
            return to_caf(errc::limit, "this key already holds " + std::to_string(S.cfg.max_graphs_per_key) +
                                           " compiled graphs, the limit; delete one first");
          auto r = route(who, call.refs, "", {});
          if (!r) return to_caf(r.err());
          const std::string gid = new_id("gt_");
          graph_entry e;
          e.account = who.account;
          e.key_id = who.key_id;
          e.created_at = now_iso();
          e.label = call.label;
          e.body_bytes = call.body_bytes;
          e.per_call_bytes = call.per_call_bytes;
          e.models = r->models;
          e.actor = spawn_graph(self->system(), gid, std::move(call.graph_json), S.cfg.timeouts);
          self->link_to(e.actor);
          auto rp = self->make_response_promise<std::string>();
          auto compile = [=](worker_actor w) mutable {
            self->request(e.actor, S.cfg.timeouts.graph + std::chrono::seconds(5), compile_atom::value, w)
                .then(
                    [=](compile_reply& c) mutable {
                      graph_entry g = e;
                      g.worker = w;
                      g.steps = c.steps;
                      g.bindings = c.bindings;
                      self->state.graphs[gid] = g;
                      rp.deliver(json([&](writer& jw) {
                        jw.StartObject();
                        key(jw, "graphId"); str(jw, gid);
                        if (!g.label.empty()) { key(jw, "label"); str(jw, g.label); }
                        key(jw, "steps"); jw.Uint(g.steps);
                        key(jw, "bindings"); strings(jw, g.bindings);
                        key(jw, "bodyBytes"); jw.Uint64(g.body_bytes);
                        key(jw, "perCallBytes"); jw.Uint64(g.per_call_bytes);
                        key(jw, "savedPerCall");
                        jw.Int64(std::int64_t(g.body_bytes) - std::int64_t(g.per_call_bytes));
                        key(jw, "features"); strings(jw, c.features);
                        jw.EndObject();
                      }));
                    },
                    [=](caf::error& err) mutable {
                      caf::anon_send(e.actor, delete_atom::value);
                      rp.deliver(caf::error(err));
                    });
          };
          if (r->worker) {
            compile(r->worker);
          } else {
            with_any_worker(call.refs.needs, [=](result<worker_actor> w) mutable {
              if (!w) {
                caf::anon_send(e.actor, delete_atom::value);
                rp.deliver(to_caf(w.err()));
              } else {
                compile(*w);
              }
            });
          }
          return rp;
        },
        [=](list_atom, graphs_atom, const caller& who) -> caf::result<std::string> {
          auto& S = self->state;
          return json([&](writer& w) {
            w.StartObject();
            key(w, "graphs");
            w.StartArray();
            for (const auto& [id, g] : S.graphs) {
              if (g.account != who.account) continue;
              w.StartObject();
              key(w, "graphId"); str(w, id);
              key(w, "label"); str(w, g.label);
              key(w, "steps"); w.Uint(g.steps);
              key(w, "bindings"); strings(w, g.bindings);
              key(w, "bodyBytes"); w.Uint64(g.body_bytes);
              key(w, "perCallBytes"); w.Uint64(g.per_call_bytes);
              key(w, "createdAt"); str(w, g.created_at);
              w.EndObject();
            }
            w.EndArray();
            w.EndObject();
          });
        },
        [=](delete_atom, graphs_atom, const caller& who, const std::string& id) -> caf::result<std::string> {
          auto& S = self->state;
          auto* g = S.find(S.graphs, id, who);
          if (!g) return to_caf(errc::not_found, "graph " + id + " does not exist");
          caf::anon_send(g->actor, delete_atom::value);
          S.graphs.erase(id);
          return json([&](writer& w) {
            w.StartObject();
            key(w, "deleted"); w.Bool(true);
            key(w, "graphId"); str(w, id);
            w.EndObject();
          });
        },
        // ------------------------------------------------------------ generate
        [=](generate_atom, const caller& who, const std::string& body) -> caf::result<gen_plan> {
          auto& S = self->state;
          // A session on a lost worker being recovered: plan afresh once it is back.
          auto wait = [&] {
            auto rp = self->make_response_promise<gen_plan>();
            S.waiting.push_back([self, rp, who, body] { resend(self, rp, generate_atom::value, who, body); });
            return rp;
          };
          auto d = parse_body(body);
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
        },
        // ------------------------------------------------------------ checkpoints
        [=](journal_atom, const caller& who, gen_journal& j) {
          auto& S = self->state;
          auto* s = S.find(S.sessions, j.session_id, who);
          if (!s) return;
          if (S.checkpoints.count(j.session_id) && s->journal_broken.empty()) {
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
              s->journal.push_back(std::move(r));
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
        },
        [=](reportdue_atom, const std::string& sid) {
          auto it = self->state.sessions.find(sid);
          if (it == self->state.sessions.end() || !it->second.after_reports) return;
          // Without the generation's tokens the journal is incomplete: restoring would give
          // caches that differ from the client's view, so the session stays lost.
          it->second.journal_broken = "a generation on it never reported what it fed";
          it->second.generating = 0;
          auto after = std::move(it->second.after_reports);
          it->second.after_reports = nullptr;
          after();
        },
        [=](replan_atom, const caller& who, gen_plan& plan) -> caf::result<gen_plan> {
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
        },
        [=](checkpt_atom, const caller& who, const std::string& id) -> caf::result<std::string> {
          auto& S = self->state;
          auto* s = S.find(S.sessions, id, who);
          if (!s) return to_caf(errc::not_found, "session " + id + " does not exist");
          if (S.is_lost(s->worker)) return to_caf(errc::unavailable, lost_message("session " + id));
          auto rp = self->make_response_promise<std::string>();
          const session_entry e = *s;
          // The durable budget is checked before anything is fetched (CKP-06).
          self->request(e.actor, control, info_atom::value)
              .then(
                  [=](session_info& info, std::uint64_t steps) mutable {
                    auto& S = self->state;
                    std::uint64_t held = 0;
                    for (const auto& [sid, c] : S.checkpoints)
                      if (c.key_id == who.key_id && sid != id) held += c.dump.bytes;
                    const std::uint64_t budget = S.cfg.durable_budget_bytes;
                    if (held + info.bytes > budget) {
                      rp.deliver(to_caf(errc::too_large, "checkpoint of session " + id + " needs " + std::to_string(info.bytes) +
                                                             " bytes but only " + std::to_string(budget > held ? budget - held : 0) +
                                                             " bytes of this key's durable budget are available"));
                      return;
                    }
                    self->request(e.worker, S.cfg.timeouts.graph, sdump_atom::value, id)
                        .then(
                            [=](session_dump& d) mutable {
                              // Only a complete copy replaces the previous checkpoint (CKP-07).
                              const std::size_t n = d.tensors.size();
                              const std::uint64_t bytes = d.bytes;
                              self->state.checkpoints[id] = checkpoint_entry{who.key_id, std::move(d), steps};
                              if (auto it = self->state.sessions.find(id); it != self->state.sessions.end()) {
                                it->second.journal.clear();  // replay starts from this checkpoint
                                it->second.journal_broken.clear();
                              }
                              rp.deliver(json([&](writer& w) {
                                w.StartObject();
                                key(w, "sessionId"); str(w, id);
                                key(w, "tensors"); w.Uint64(n);
                                key(w, "bytes"); w.Uint64(bytes);
                                key(w, "step"); w.Uint64(steps);
                                w.EndObject();
                              }));
                            },
                            [=](caf::error& err) mutable { rp.deliver(caf::error(err)); });
                  },
                  [=](caf::error& err) mutable { rp.deliver(caf::error(err)); });
          return rp;
        },
        [=](restore_atom, const caller& who, const std::string& id) -> caf::result<std::string> {
          auto& S = self->state;
          auto* s = S.find(S.sessions, id, who);
          if (!s) return to_caf(errc::not_found, "session " + id + " does not exist");
          auto c = S.checkpoints.find(id);
          if (c == S.checkpoints.end())
            return to_caf(errc::conflict, "session " + id + " has no checkpoint; POST /api/v3/sessions/" + id + "/checkpoint first");
          auto rp = self->make_response_promise<std::string>();
          const worker_actor old = s->worker;
          // Any worker with room; a session that must stay with its model's weights goes
          // back where they are.
          auto place = [=](worker_actor target) mutable {
            put_checkpoint_back(self, id, target, [=](caf::error failed) mutable {
              if (failed) {
                rp.deliver(failed);
                return;
              }
              auto& S = self->state;
              auto it = S.sessions.find(id);
              auto ck = S.checkpoints.find(id);
              if (old != target) caf::anon_send(old, sclose_atom::value, id);
              it->second.journal.clear();  // the session is at its checkpoint again
              it->second.journal_broken.clear();
              it->second.restored_note.clear();
              const auto& d = ck->second.dump;
              rp.deliver(json([&](writer& w) {
                w.StartObject();
                key(w, "sessionId"); str(w, id);
                key(w, "tensors"); w.Uint64(d.tensors.size());
                key(w, "bytes"); w.Uint64(d.bytes);
                key(w, "step"); w.Uint64(ck->second.steps);
                w.EndObject();
              }));
            });
          };
          auto* m = s->model_id.empty() ? nullptr : S.find(S.models, s->model_id, who);
          if (m) {
            place(m->worker);
          } else {
            self->request(S.pool, control, pick_atom::value, c->second.dump.bytes)
                .then([=](worker_actor& w, worker_status&) mutable { place(w); },
                      [=](caf::error& err) mutable { rp.deliver(caf::error(err)); });
          }
          return rp;
        },
        // ------------------------------------------------------------ v2 tensors
        [=](create_atom, tensors_atom, const caller& who, tensor_call& t) -> caf::result<std::string> {
          auto& S = self->state;
          const std::uint64_t bytes = t.data.size() * 4;
          std::uint64_t used = S.v2_pending[who.key_id];
          for (const auto& [_, e] : S.tensors)
            if (e.key_id == who.key_id) used += e.bytes;
          if (used + bytes > S.cfg.v2_quota_bytes)
            return to_caf(errc::too_large, "tensor of " + std::to_string(bytes) + " bytes would exceed this key's v2 upload quota (" +
                                               std::to_string(S.cfg.v2_quota_bytes - std::min(used, S.cfg.v2_quota_bytes)) +
                                               " of " + std::to_string(S.cfg.v2_quota_bytes) + " bytes left)");
          auto rp = self->make_response_promise<std::string>();
          const std::string tid = new_id("t_");
          // (held once: the handlers below share it, and the values move on to the worker)
          auto up = std::make_shared<tensor_upload>(tensor_upload{tid, t.shape, std::move(t.data)});
          const shape_t shape = t.shape;
          S.v2_pending[who.key_id] += bytes;
          auto settle = [self, key = who.key_id, bytes] {
            auto& pending = self->state.v2_pending;
            if (auto it = pending.find(key); it != pending.end() && (it->second -= std::min(it->second, bytes)) == 0)
              pending.erase(it);
          };
          self->request(S.pool, control, pick_atom::value, bytes)
              .then(
                  [=](worker_actor& w, worker_status&) mutable {
                    self->request(w, control, tput_atom::value, std::move(*up))
                        .then(
                            [=](bool) mutable {
                              settle();
                              v2_entry e;
                              e.account = who.account;
                              e.key_id = who.key_id;
                              e.created_at = now_iso();
                              e.worker = w;
                              self->state.watch(self, w);
                              e.bytes = bytes;
                              self->state.tensors[tid] = e;
                              rp.deliver(json([&](writer& jw) {
                                jw.StartObject();
                                key(jw, "tensorId"); str(jw, tid);
                                key(jw, "shape");
                                jw.StartArray();
                                for (auto x : shape) jw.Int64(x);
                                jw.EndArray();
                                key(jw, "bytes"); jw.Uint64(bytes);
                                jw.EndObject();
                              }));
                            },
                            [=](caf::error& e) mutable {
                              settle();
                              rp.deliver(caf::error(e));
                            });
                  },
                  [=](caf::error& e) mutable {
                    settle();
                    rp.deliver(caf::error(e));
                  });
          return rp;
        },
        [=](delete_atom, tensors_atom, const caller& who, const std::string& id) -> caf::result<std::string> {
          auto& S = self->state;
          auto* t = S.find(S.tensors, id, who);
          if (!t) return to_caf(errc::not_found, "tensor " + id + " does not exist");
          caf::anon_send(t->worker, tdrop_atom::value, id);
          S.tensors.erase(id);
          return json([&](writer& w) {
            w.StartObject();
            key(w, "deleted"); w.Bool(true);
            key(w, "tensorId"); str(w, id);
            w.EndObject();
          });
        },
        // ------------------------------------------------------------ cancellation
        [=](cancel_atom, const caf::actor_addr& requester) {
          auto& S = self->state;
          auto it = S.running.find(requester);
          if (it == S.running.end()) return;  // answered already
          caf::anon_send(it->second.first, runcancel_atom::value, it->second.second);
          S.running.erase(it);
        },
        // ------------------------------------------------------------ metrics
        [=](metrics_atom) -> caf::result<std::uint64_t, std::uint64_t, std::uint64_t, std::vector<worker_status>> {
          auto& S = self->state;
          const std::uint64_t sessions = S.sessions.size(), graphs = S.graphs.size(), models = S.models.size();
          auto rp = self->make_response_promise<std::uint64_t, std::uint64_t, std::uint64_t, std::vector<worker_status>>();
          // (the pool asks each worker's front, which answers while its compute side is busy)
          self->request(S.pool, control, workers_atom::value)
              .then([=](std::vector<worker_status>& ws) mutable { rp.deliver(sessions, graphs, models, std::move(ws)); },
                    [=](caf::error& e) mutable { rp.deliver(std::move(e)); });
          return rp;
        },
    };
  });
}

}  // namespace mpakt
