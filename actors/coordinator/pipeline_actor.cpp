#include "actors/coordinator/pipeline_actor.hpp"

#include <algorithm>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <chrono>
#include <map>
#include <optional>
#include <memory>
#include <regex>
#include <set>

#include "actors/errors.hpp"
#include "actors/sequence.hpp"
#include "runtime/executor.hpp"
#include "runtime/generate_check.hpp"
#include "runtime/graph.hpp"
#include "runtime/json.hpp"
#include "runtime/outputs.hpp"
#include "runtime/stages.hpp"

namespace mpakt {

namespace {

struct pipeline_session {
  std::map<std::string, int> where;  ///< session tensor -> part index
  /// Tensors allocated as zeros and read nowhere yet: created where first read.
  std::map<std::string, shape_t> zeros;
  bool lost = false;                 ///< a part holding its tensors left the grid
  /// A call stopped past its limit after some of its stages had run: their writes stay, so the
  /// session's caches are partly written. Its next calls say so (until a restore).
  std::string stale;
};

std::uint64_t zeros_bytes(const shape_t& shape) { return std::uint64_t(std::max<std::int64_t>(0, shape_numel(shape))) * 4; }

/// A template compiled stage by stage on the parts' workers: each stage a compiled template
/// there, the values it receives bound per call (base64 f32).
struct compiled_template {
  std::shared_ptr<const rapidjson::Document> doc;
  std::shared_ptr<const stage_plan> plan;
  std::vector<std::string> stage_json;                 ///< each stage as a template
  std::vector<std::vector<std::string>> stage_bindings;  ///< as its worker reported them
  std::vector<caf::actor_addr> compiled_on;            ///< per stage: the worker holding it compiled
};

std::string stage_graph_id(const std::string& graph_id, std::size_t i) { return graph_id + "/" + std::to_string(i); }

struct pipeline_state {
  std::string model_id;
  std::vector<pipeline_part> parts;
  std::vector<bool> alive;
  std::vector<bool> unplaceable;  ///< lost, and no other worker could take its tensors
  std::map<std::string, int> weight_part;
  std::map<std::string, pipeline_session> sessions;
  std::map<std::string, compiled_template> templates;
  entity_timeouts t;
  /// Stage runs in flight per part: failed at once if that part's worker is lost (a request
  /// to a vanished remote actor would otherwise wait for its full timeout) or the model is
  /// deleted (given the error then).
  std::map<int, std::map<std::uint64_t, std::function<void(std::optional<caf::error>)>>> inflight;
  std::uint64_t next_call = 0;
  describe_tally tally;
};

using pointer = pipeline_actor::stateful_pointer<pipeline_state>;

caf::error lost_session(const std::string& sid) { return to_caf(errc::unavailable, lost_message("session " + sid)); }

/// The error for session work that needs a part whose worker is gone (nothing is sent to it:
/// a request to a vanished remote actor would wait for its full timeout).
caf::error part_gone(pointer self, int p) {
  const auto& S = self->state;
  const std::string gone = "worker " + S.parts[std::size_t(p)].worker_id + " holding part of model " + S.model_id + " left the grid";
  if (S.unplaceable[std::size_t(p)])
    return to_caf(errc::unavailable, gone + " and no other worker has room for its share: load the model again");
  return to_caf(errc::unavailable, gone + "; its tensors are being fetched again");
}

/// A stage's error names its steps by their index in the stage: give them the graph's.
caf::error in_graph_terms(const caf::error& e, const stage& s, const std::string& worker_id) {
  error err = from_caf(e);
  if (actor_gone(e)) return e;
  static const std::regex step_ref(R"(\bstep (\d+) \()");
  std::string out;
  auto begin = std::sregex_iterator(err.message.begin(), err.message.end(), step_ref);
  std::size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    const std::size_t local = std::stoul(m[1].str());
    out += err.message.substr(last, std::size_t(m.position(0)) - last);
    out += "step " + std::to_string(local < s.step_index.size() ? s.step_index[local] : local) + " (";
    last = std::size_t(m.position(0) + m.length(0));
  }
  out += err.message.substr(last);
  err.message = out + " (on worker " + worker_id + ", which holds that part of the model)";
  return to_caf(err);
}

/// One graph call in progress.
struct call {
  caf::typed_response_promise<run_reply> rp;
  std::string sid;
  std::shared_ptr<const stage_plan> plan;
  std::vector<std::pair<std::string, int>> moves, create;  ///< session work before the stages
  std::vector<std::string> outputs;                        ///< what the caller gets, in order
  /// A compiled run: the template, the call's bindings and sample settings, and per stage the
  /// outputs the call asks for beyond what the template returns.
  std::string graph_id;
  std::shared_ptr<rapidjson::Document> bind;
  std::vector<std::pair<std::string, double>> overrides;
  std::vector<std::vector<std::string>> extra_outputs;
  std::map<std::string, stage_value> carried;
  std::uint32_t steps = 0;
  bool base64 = false;
  /// Names the call for runcancel on the parts; its limit, counted from when it arrived here
  /// (each stage gets what is left).
  std::string run_id;
  std::uint64_t timeout_ms = 0;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  bool server_params = false;  ///< an inline graph the server built (run_request::server_params)
  bool free_rows = false;      ///< run_request::free_rows, for every stage
  bool settled = false;  ///< answered (or failed by a lost part); later replies are dropped
  void fail(caf::error e) {
    if (settled) return;
    settled = true;
    rp.deliver(std::move(e));
  }
};

result<std::map<std::string, stage_value>> read_outputs(const std::string& json) {
  auto parsed = parse_json(json, "a stage's outputs");
  if (!parsed) return std::move(parsed).err();
  rapidjson::Document& d = *parsed;
  if (!d.IsObject()) return invalid("a stage returned outputs that are not a JSON object");
  std::map<std::string, stage_value> out;
  for (auto it = d.MemberBegin(); it != d.MemberEnd(); ++it) {
    const auto& o = it->value;
    if (!o.IsObject() || !o.HasMember("shape") || !o.HasMember("dataB64") || !o["dataB64"].IsString())
      return invalid("a stage returned an output without shape and dataB64");
    stage_value v;
    for (const auto& dim : o["shape"].GetArray()) v.shape.push_back(dim.GetInt64());
    auto vals = decode_f32_base64(std::string_view(o["dataB64"].GetString(), o["dataB64"].GetStringLength()));
    if (!vals) return std::move(vals).err();
    v.values = std::move(*vals);
    out[it->name.GetString()] = std::move(v);
  }
  return out;
}

void finish_call(pointer self, std::shared_ptr<call> c) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  for (const auto& name : c->outputs) {
    auto it = c->carried.find(name);
    if (it == c->carried.end()) continue;
    write_output(w, name, it->second.shape, it->second.values, c->base64);
  }
  w.EndObject();
  run_reply reply;
  reply.outputs_json.assign(buf.GetString(), buf.GetSize());
  reply.steps = c->steps;
  c->settled = true;
  c->rp.deliver(std::move(reply));
}

void run_stage(pointer self, std::shared_ptr<call> c, std::size_t i);

/// The run request of stage `i`: an inline stage graph, or the compiled stage with the call's
/// bindings it declares and the values it receives.
result<run_request> stage_request(pointer self, const std::shared_ptr<call>& c, std::size_t i) {
  const stage& s = c->plan->stages[i];
  run_request r;
  r.session = c->sid;
  r.base64 = true;
  r.run_id = c->run_id;
  r.free_rows = c->free_rows;
  if (c->timeout_ms > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(c->deadline - std::chrono::steady_clock::now());
    r.timeout_ms = std::uint64_t(std::max<std::int64_t>(1, left.count()));
  }
  if (c->graph_id.empty()) {
    r.graph_json = s.graph_json(c->carried);
    r.server_params = c->server_params;
    return r;
  }
  auto t = self->state.templates.find(c->graph_id);
  if (t == self->state.templates.end()) return make_error(errc::not_found, "graph " + c->graph_id + " was dropped during the call");
  r.graph_id = stage_graph_id(c->graph_id, i);
  r.overrides = c->overrides;
  r.outputs = s.returns();
  for (const auto& o : c->extra_outputs[i])
    if (std::find(r.outputs.begin(), r.outputs.end(), o) == r.outputs.end()) r.outputs.push_back(o);
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  for (const auto& name : t->second.stage_bindings[i]) {
    if (name.rfind("@", 0) == 0) {
      auto v = c->carried.find(name.substr(1));
      if (v == c->carried.end()) continue;  // the worker names the binding missing
      const std::string b64 = encode_f32_base64(v->second.values);
      w.Key(name.c_str());
      w.String(b64.c_str(), rapidjson::SizeType(b64.size()));
    } else if (auto m = c->bind->FindMember(name.c_str()); m != c->bind->MemberEnd()) {
      w.Key(name.c_str());
      m->value.Accept(w);
    }
  }
  w.EndObject();
  r.bind_json.assign(buf.GetString(), buf.GetSize());
  return r;
}

/// Compiles stage `i` of a template on the worker its part lives on now (after the part was
/// placed again, the first run there compiles it).
void compile_stage(pointer self, const std::string& graph_id, std::size_t i, std::function<void(caf::error)> done) {
  auto& S = self->state;
  auto t = S.templates.find(graph_id);
  if (t == S.templates.end()) return done(to_caf(errc::not_found, "graph " + graph_id + " was dropped"));
  const stage& s = t->second.plan->stages[i];
  const worker_actor w = S.parts[std::size_t(s.worker)].worker;
  if (t->second.compiled_on[i] == w.address()) return done(caf::error{});
  compile_request r{stage_graph_id(graph_id, i), t->second.stage_json[i], s.sends};
  self->request(w, S.t.graph, compile_atom::value, std::move(r))
      .then(
          [self, graph_id, i, w, done](compile_reply& reply) {
            auto t = self->state.templates.find(graph_id);
            if (t != self->state.templates.end()) {
              t->second.compiled_on[i] = w.address();
              t->second.stage_bindings[i] = reply.bindings;
            }
            done(caf::error{});
          },
          [self, graph_id, i, done](caf::error& e) {
            auto t = self->state.templates.find(graph_id);
            if (t == self->state.templates.end()) return done(e);
            const stage& s = t->second.plan->stages[i];
            done(in_graph_terms(e, s, self->state.parts[std::size_t(s.worker)].worker_id));
          });
}

void run_stage(pointer self, std::shared_ptr<call> c, std::size_t i) {
  auto& S = self->state;
  if (c->settled) return;
  if (i == c->plan->stages.size()) return finish_call(self, c);
  const stage& s = c->plan->stages[i];
  if (s.step_texts.empty() && s.retain.empty() && s.returns().empty() && (c->extra_outputs.empty() || c->extra_outputs[i].empty()))
    return run_stage(self, c, i + 1);
  const std::string gone = "worker " + S.parts[std::size_t(s.worker)].worker_id + " holding part of model " + S.model_id +
                           " left the grid";
  if (!S.alive[std::size_t(s.worker)]) return c->fail(part_gone(self, s.worker));
  if (!c->graph_id.empty()) {
    auto t = S.templates.find(c->graph_id);
    if (t != S.templates.end() && t->second.compiled_on[i] != S.parts[std::size_t(s.worker)].worker.address())
      return compile_stage(self, c->graph_id, i, [self, c, i](caf::error e) {
        if (e) return c->fail(std::move(e));
        run_stage(self, c, i);
      });
  }
  auto r = stage_request(self, c, i);
  if (!r) return c->fail(to_caf(r.err()));
  const std::uint64_t id = S.next_call++;
  // Failed with `why`, or (none) because the part's worker left the grid.
  S.inflight[s.worker][id] = [c, gone, w = S.parts[std::size_t(s.worker)].worker](std::optional<caf::error> why) {
    if (why && !c->run_id.empty()) caf::anon_send(w, runcancel_atom::value, c->run_id);  // (its worker is still there)
    c->fail(why ? std::move(*why) : to_caf(errc::unavailable, gone + " during this call"));
  };
  auto settle = [self, part = s.worker, id] {
    auto& in = self->state.inflight;
    if (auto it = in.find(part); it != in.end()) it->second.erase(id);
  };
  self->request(S.parts[std::size_t(s.worker)].worker, S.t.graph + S.t.answer_grace, run_atom::value, std::move(*r))
      .then(
          [self, c, i, settle](run_reply& reply) {
            settle();
            if (c->settled) return;
            const stage& s = c->plan->stages[i];
            auto got = read_outputs(reply.outputs_json);
            if (!got) return c->fail(to_caf(got.err()));
            for (auto& [name, v] : *got) c->carried[name] = std::move(v);
            c->steps += reply.steps;
            if (!c->sid.empty()) {
              auto& session = self->state.sessions[c->sid];
              for (const auto& [tensor, _] : s.retain) {
                session.where[tensor] = s.worker;
                session.zeros.erase(tensor);
              }
            }
            run_stage(self, c, i + 1);
          },
          [self, c, i, settle](caf::error& e) {
            settle();
            const stage& s = c->plan->stages[i];
            const std::string& worker_id = self->state.parts[std::size_t(s.worker)].worker_id;
            // Stopped past its limit after earlier stages ran: those stages' writes stay.
            if (from_caf(e).code == errc::timeout && c->steps > 0 && !c->sid.empty())
              self->state.sessions[c->sid].stale =
                  "a call on it was stopped past its --graph-timeout-ms limit after " + std::to_string(i) + " of " +
                  std::to_string(c->plan->stages.size()) + " stages of model " + self->state.model_id +
                  " had run, so its caches are partly written: open a new session and prefill it again (or restore a checkpoint)";
            if (e == caf::sec::request_timeout)  // the worker itself did not answer in time
              return c->fail(to_caf(errc::timeout, "stage " + std::to_string(i) + " of the graph did not finish within the "
                                                   "--graph-timeout-ms limit on worker " + worker_id));
            c->fail(in_graph_terms(e, s, worker_id));
          });
}

/// Creates deferred zeros on the parts that first read them: one graph per part.
void create_zeros(pointer self, std::string sid, std::vector<std::pair<std::string, int>> create,
                  std::function<void(caf::error)> done) {
  std::map<int, std::vector<std::string>> by_part;
  for (const auto& [t, p] : create) by_part[p].push_back(t);
  for (const auto& [p, _] : by_part)
    if (!self->state.alive[std::size_t(p)]) return done(part_gone(self, p));
  auto order = std::make_shared<std::vector<std::pair<int, std::vector<std::string>>>>(by_part.begin(), by_part.end());
  in_sequence(
      order->size(),
      [self, sid, order, done](std::size_t i, std::function<void()> next) {
        auto& S = self->state;
        auto& s = S.sessions[sid];
        const auto& [p, tensors] = (*order)[i];
        std::string steps, retain;
        for (std::size_t k = 0; k < tensors.size(); ++k) {
          std::string shape;
          for (auto d : s.zeros[tensors[k]]) shape += (shape.empty() ? "" : ",") + std::to_string(d);
          steps += std::string(k ? "," : "") + "{\"op\":\"zeros\",\"in\":[],\"out\":\"z" + std::to_string(k) +
                   "\",\"params\":{\"shape\":[" + shape + "]}}";
          rapidjson::StringBuffer name;
          rapidjson::Writer<rapidjson::StringBuffer> w(name);
          w.String(tensors[k].c_str());
          retain += std::string(k ? "," : "") + name.GetString() + ":\"z" + std::to_string(k) + "\"";
        }
        run_request r;
        r.graph_json = "{\"inputs\":[],\"steps\":[" + steps + "],\"outputs\":[],\"retain\":{" + retain + "}}";
        r.session = sid;
        const int part = p;
        const auto names = tensors;
        self->request(S.parts[std::size_t(part)].worker, S.t.graph, run_atom::value, std::move(r))
            .then(
                [self, sid, part, names, next](run_reply&) {
                  auto& s = self->state.sessions[sid];
                  for (const auto& t : names) {
                    s.zeros.erase(t);
                    s.where[t] = part;
                  }
                  next();
                },
                [done](caf::error& e) { done(e); });
      },
      [done] { done(caf::error{}); });
}

/// Moves session tensors to the parts that will read them: each part involved is dumped
/// once and loaded once with what it holds afterwards.
void move_tensors(pointer self, std::string sid, std::vector<std::pair<std::string, int>> moves,
                  std::function<void(caf::error)> done) {
  auto& S = self->state;
  std::set<int> involved;
  for (const auto& [t, to] : moves) {
    involved.insert(to);
    involved.insert(S.sessions[sid].where.at(t));
  }
  for (int p : involved)
    if (!S.alive[std::size_t(p)]) return done(part_gone(self, p));
  auto order = std::make_shared<std::vector<int>>(involved.begin(), involved.end());
  auto dumps = std::make_shared<std::map<int, session_dump>>();
  in_sequence(
      order->size(),
      [self, sid, order, dumps, done](std::size_t i, std::function<void()> next) {
        const int p = (*order)[i];
        self->request(self->state.parts[std::size_t(p)].worker, self->state.t.graph, sdump_atom::value, sid)
            .then(
                [dumps, p, next](session_dump& d) {
                  (*dumps)[p] = std::move(d);
                  next();
                },
                [done](caf::error& e) { done(e); });
      },
      [self, sid, moves, order, dumps, done] {
        auto& where = self->state.sessions[sid].where;
        // What each part keeps: the tensors recorded there, with the moved ones dealt anew.
        std::map<int, std::vector<tensor_blob>> keep;
        std::map<std::string, tensor_blob> moving;
        for (auto& [p, d] : *dumps)
          for (auto& b : d.tensors) {
            auto w = where.find(b.name);
            if (w == where.end() || w->second != p) continue;  // a stale copy: dropped
            bool moves_away = false;
            for (const auto& [t, to] : moves) moves_away = moves_away || (t == b.name && to != p);
            if (moves_away) moving[b.name] = std::move(b);
            else keep[p].push_back(std::move(b));
          }
        for (const auto& [t, to] : moves)
          if (auto m = moving.find(t); m != moving.end()) {
            keep[to].push_back(std::move(m->second));
            where[t] = to;
          }
        in_sequence(
            order->size(),
            [self, sid, order, keep, done](std::size_t i, std::function<void()> next) {
              const int p = (*order)[i];
              session_dump d;
              if (auto k = keep.find(p); k != keep.end()) d.tensors = k->second;
              for (const auto& b : d.tensors) d.bytes += b.bytes.size();
              self->request(self->state.parts[std::size_t(p)].worker, self->state.t.graph, sload_atom::value, sid, d)
                  .then([next](bool) { next(); }, [done](caf::error& e) { done(e); });
            },
            [done] { done(caf::error{}); });
      });
}

/// Tells the workers holding a template's stages to forget them.
void dropped_stages(pointer self, const std::string& graph_id) {
  auto& S = self->state;
  auto t = S.templates.find(graph_id);
  if (t == S.templates.end()) return;
  for (std::size_t i = 0; i < t->second.compiled_on.size(); ++i) {
    const int part = t->second.plan->stages[i].worker;
    if (t->second.compiled_on[i] && S.alive[std::size_t(part)] && S.parts[std::size_t(part)].worker.address() == t->second.compiled_on[i])
      caf::anon_send(S.parts[std::size_t(part)].worker, dropgraph_atom::value, stage_graph_id(graph_id, i));
  }
}

stage_placement placement(pointer self, std::string sid) {
  stage_placement where;
  where.weight_worker = [self](const std::string& model, const std::string& weight) {
    auto& S = self->state;
    auto it = S.weight_part.find(weight);
    return model == S.model_id && it != S.weight_part.end() ? it->second : -1;
  };
  where.session_worker = [self, sid](const std::string& tensor) {
    auto s = self->state.sessions.find(sid);
    if (s == self->state.sessions.end()) return -1;
    if (s->second.zeros.count(tensor)) return stage_placement::deferred;
    auto it = s->second.where.find(tensor);
    return it == s->second.where.end() ? -1 : it->second;
  };
  return where;
}

/// A call's plan: an inline graph split now, or a compiled template's split with this call's
/// bindings, sample settings and outputs; the session work either needs.
result<std::shared_ptr<call>> plan_call(pointer self, const run_request& r) {
  auto& S = self->state;
  if (r.sessions.size() > 1) return invalid("a graph listing several sessions cannot run on a model spread over several workers");
  auto c = std::make_shared<call>();
  c->sid = r.session.empty() && !r.sessions.empty() ? r.sessions.front() : r.session;
  c->base64 = r.base64;
  c->server_params = r.server_params;
  c->free_rows = r.free_rows;
  const stage_placement where = placement(self, c->sid);
  if (r.graph_id.empty()) {
    auto parsed = parse_json_object(r.graph_json, "graph");
    if (!parsed) return std::move(parsed).err();
    rapidjson::Document& d = *parsed;
    auto plan = split_graph(d, where);
    if (!plan) return std::move(plan).err();
    c->moves = plan->moves;
    c->create = plan->create;
    c->outputs = plan->outputs;
    c->plan = std::make_shared<const stage_plan>(std::move(*plan));
    return c;
  }
  auto t = S.templates.find(r.graph_id);
  if (t == S.templates.end()) return make_error(errc::not_found, "graph " + r.graph_id + " is not compiled for model " + S.model_id);
  c->graph_id = r.graph_id;
  c->plan = t->second.plan;
  stage_plan work;
  work.session_reads = c->plan->session_reads;
  session_work(work, where.session_worker);
  c->moves = std::move(work.moves);
  c->create = std::move(work.create);
  c->bind = std::make_shared<rapidjson::Document>();
  c->bind->Parse(r.bind_json.empty() ? "{}" : r.bind_json.c_str());
  if (c->bind->HasParseError() || !c->bind->IsObject()) return invalid("bind must be an object of binding values");
  const auto declared = template_bindings(*t->second.doc);
  for (auto m = c->bind->MemberBegin(); m != c->bind->MemberEnd(); ++m)
    if (std::find(declared.begin(), declared.end(), m->name.GetString()) == declared.end())
      return invalid("binding " + std::string(m->name.GetString()) + " is not declared by this graph");
  for (const auto& name : declared)
    if (!c->bind->HasMember(name.c_str())) return invalid("binding " + name + " was not given");
  c->overrides = r.overrides;
  c->outputs = r.outputs.empty() ? c->plan->outputs : r.outputs;
  c->extra_outputs.assign(c->plan->stages.size(), {});
  if (!r.outputs.empty())
    for (const auto& o : r.outputs) {
      auto v = c->plan->value_stage.find(o);
      c->extra_outputs[v == c->plan->value_stage.end() ? c->plan->stages.size() - 1 : v->second].push_back(o);
    }
  return c;
}

std::uint64_t entry_bytes(const tensor_info& t) { return t.bytes; }
std::uint64_t entry_bytes(const tensor_blob& b) { return b.bytes.size(); }

/// A session's tensors (session_info) or their contents (session_dump), gathered from every
/// live part — only what `where` places on that part: a stale copy left elsewhere is not the
/// session's — with the zeros still to be created (made by `zero`), sorted by name.
template <class Reply, class Atom, class Zero>
caf::result<Reply> gather_session(pointer self, const std::string& sid, Atom atom, std::chrono::milliseconds timeout, Zero zero) {
  auto s = self->state.sessions.find(sid);
  if (s == self->state.sessions.end()) return to_caf(errc::not_found, "session " + sid + " is not on this model");
  if (s->second.lost) return lost_session(sid);
  auto rp = self->make_response_promise<Reply>();
  auto out = std::make_shared<Reply>();
  in_sequence(
      self->state.parts.size(),
      [self, sid, atom, timeout, out, rp](std::size_t p, std::function<void()> next) mutable {
        if (!self->state.alive[p]) return next();
        self->request(self->state.parts[p].worker, timeout, atom, sid)
            .then(
                [self, sid, out, p, next](Reply& part) {
                  const auto& where = self->state.sessions[sid].where;
                  for (auto& t : part.tensors) {
                    auto w = where.find(t.name);
                    if (w == where.end() || w->second != int(p)) continue;
                    out->bytes += entry_bytes(t);
                    out->tensors.push_back(std::move(t));
                  }
                  next();
                },
                [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
      },
      [self, sid, out, zero, rp]() mutable {
        for (const auto& [name, shape] : self->state.sessions[sid].zeros) {
          out->tensors.push_back(zero(name, shape));
          out->bytes += entry_bytes(out->tensors.back());
        }
        std::sort(out->tensors.begin(), out->tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
        rp.deliver(std::move(*out));
      });
  return rp;
}

}  // namespace

pipeline_actor spawn_pipeline(caf::actor_system& sys, std::string model_id, std::vector<pipeline_part> parts,
                              entity_timeouts t) {
  // Detached: splitting a graph call into stages and relaying the values between them (JSON
  // and base64, as large as the call) happens on the pipeline's own thread, never on the
  // scheduler thread the coordinator shares.
  return sys.spawn<caf::detached>([model_id, parts, t](pointer self) -> pipeline_actor::behavior_type {
    auto& S = self->state;
    S.model_id = model_id;
    S.parts = parts;
    S.alive.assign(parts.size(), true);
    S.unplaceable.assign(parts.size(), false);
    S.t = t;
    for (std::size_t p = 0; p < parts.size(); ++p)
      for (const auto& name : parts[p].tensors) S.weight_part[name] = int(p);
    const std::string not_here = "model " + model_id + " is spread over several workers: ";

    /// Asks every part in turn; `each` folds a reply in, `done` answers.
    auto all_parts = [self](std::function<void(std::size_t, std::function<void()>, std::function<void(caf::error)>)> each,
                            std::function<void()> done, std::function<void(caf::error)> fail) {
      in_sequence(
          self->state.parts.size(), [each, fail](std::size_t p, std::function<void()> next) { each(p, next, fail); }, done);
    };

    return {
        [=](describe_atom) {
          auto& S = self->state;
          S.tally.count();
          actor_snapshot s;
          s.kind = "pipeline";
          s.id = "pipeline of " + S.model_id;
          s.link("model", S.model_id);
          std::uint64_t resident = 0;
          for (std::size_t p = 0; p < S.parts.size(); ++p) {
            s.link("worker", S.parts[p].worker_id);
            resident += S.parts[p].resident_bytes;
            s.text("part" + std::to_string(p), S.parts[p].worker_id + (S.alive[p] ? "" : " (lost)"));
          }
          s.number("parts", double(S.parts.size()));
          s.number("partsLost", double(std::count(S.alive.begin(), S.alive.end(), false)));
          s.number("residentBytes", double(resident));
          s.number("sessions", double(S.sessions.size()));
          s.number("templates", double(S.templates.size()));
          std::size_t inflight = 0;
          for (const auto& [_, calls] : S.inflight) inflight += calls.size();
          s.number("stageCallsInFlight", double(inflight));
          S.tally.fill(s, self->mailbox().size());
          return s;
        },
        [=](status_atom) {
          self->state.tally.count();
          worker_status s;
          s.worker_id = "pipeline of " + self->state.model_id;
          s.backend = "pipeline";
          return s;
        },
        [=](reserve_atom, const std::string&, std::uint64_t) -> caf::result<bool> {
          self->state.tally.count();
          return to_caf(errc::invalid, not_here + "its parts' workers hold the memory");
        },
        [=](runcancel_atom, const std::string& run_id) {
          self->state.tally.count();
          for (std::size_t p = 0; p < self->state.parts.size(); ++p)
            if (self->state.alive[p]) caf::anon_send(self->state.parts[p].worker, runcancel_atom::value, run_id);
        },
        [=](tbegin_atom, const tensor_begin_request&) -> caf::result<bool> {
          self->state.tally.count();
          return to_caf(errc::invalid, not_here + "its tensors are loaded onto those workers directly");
        },
        [=](tpiece_atom, const tensor_piece&) -> caf::result<std::uint64_t> {
          self->state.tally.count();
          return to_caf(errc::invalid, not_here + "its tensors are loaded onto those workers directly");
        },
        [=](tend_atom, const std::string&, const std::string&) -> caf::result<std::uint64_t> {
          self->state.tally.count();
          return to_caf(errc::invalid, not_here + "its tensors are loaded onto those workers directly");
        },
        [=](tpieceref_atom, const tensor_piece_ref&) -> caf::result<std::uint64_t> {
          self->state.tally.count();
          return to_caf(errc::invalid, not_here + "its tensors are loaded onto those workers directly");
        },
        [=](dlink_atom, std::uint16_t, const std::string&) -> caf::result<bool> {
          self->state.tally.count();
          return to_caf(errc::invalid, not_here + "it takes no data connection");
        },
        [=](tprobe_atom, const std::string&, std::uint64_t, const std::string&) -> caf::result<bool> {
          self->state.tally.count();
          return to_caf(errc::invalid, not_here + "its tensors are loaded onto those workers directly");
        },
        [=](tfetch_atom, const tensor_fetch&) -> caf::result<tensor_fetch_reply> {
          self->state.tally.count();
          return to_caf(errc::invalid, not_here + "its tensors are loaded onto those workers directly");
        },
        [=](tabort_atom, const std::string&) { self->state.tally.count(); return true; },
        [=](dropmodel_atom, const std::string&) {
          self->state.tally.count();
          auto& S = self->state;
          // Calls in flight are answered before the actor goes (their promises would be
          // dropped unanswered), and their stages stopped on the parts.
          auto inflight = std::move(S.inflight);
          S.inflight.clear();
          for (auto& [p, calls] : inflight)
            for (auto& [_, abort] : calls) abort(to_caf(errc::not_found, "model " + S.model_id + " was deleted during this call"));
          for (std::size_t p = 0; p < S.parts.size(); ++p)
            if (S.alive[p]) caf::anon_send(S.parts[p].worker, dropmodel_atom::value, S.model_id);
          self->quit();
          return true;
        },
        [=](sopen_atom, const std::string& sid) -> caf::result<bool> {
          self->state.tally.count();
          auto rp = self->make_response_promise<bool>();
          self->state.sessions[sid];
          all_parts(
              [self, sid](std::size_t p, std::function<void()> next, std::function<void(caf::error)> fail) {
                if (!self->state.alive[p]) return next();
                self->request(self->state.parts[p].worker, self->state.t.control, sopen_atom::value, sid)
                    .then([next](bool) { next(); }, [fail](caf::error& e) { fail(e); });
              },
              [rp]() mutable { rp.deliver(true); }, [rp](caf::error e) mutable { rp.deliver(std::move(e)); });
          return rp;
        },
        [=](sclose_atom, const std::string& sid) {
          self->state.tally.count();
          for (std::size_t p = 0; p < self->state.parts.size(); ++p)
            if (self->state.alive[p]) caf::anon_send(self->state.parts[p].worker, sclose_atom::value, sid);
          return self->state.sessions.erase(sid) > 0;
        },
        [=](sinfo_atom, const std::string& sid) -> caf::result<session_info> {
          self->state.tally.count();
          return gather_session<session_info>(self, sid, sinfo_atom::value, self->state.t.control,
                                              [](const std::string& name, const shape_t& shape) {
                                                return tensor_info{name, shape, "f32", zeros_bytes(shape)};
                                              });
        },
        [=](sdump_atom, const std::string& sid) -> caf::result<session_dump> {
          self->state.tally.count();
          return gather_session<session_dump>(self, sid, sdump_atom::value, self->state.t.graph,
                                              [](const std::string& name, const shape_t& shape) {
                                                return tensor_blob{name, shape, "f32", std::string(zeros_bytes(shape), '\0')};
                                              });
        },
        [=](sload_atom, const std::string& sid, session_dump& d) -> caf::result<bool> {
          self->state.tally.count();
          // Each tensor goes back to the part it lived on; one that lived nowhere yet and is
          // all zeros (caches checkpointed before any pass) stays to be created where first
          // read; any other goes to the first part.
          auto& S = self->state;
          auto& s = S.sessions[sid];
          std::map<std::string, int> where;
          std::map<std::string, shape_t> zeros;
          auto split = std::make_shared<std::vector<session_dump>>(S.parts.size());
          for (auto& b : d.tensors) {
            auto w = s.where.find(b.name);
            if (w == s.where.end() && b.dtype == "f32" &&
                std::all_of(b.bytes.begin(), b.bytes.end(), [](char c) { return c == 0; })) {
              zeros[b.name] = b.shape;
              continue;
            }
            const int p = w == s.where.end() ? 0 : w->second;
            where[b.name] = p;
            (*split)[std::size_t(p)].bytes += b.bytes.size();
            (*split)[std::size_t(p)].tensors.push_back(std::move(b));
          }
          auto rp = self->make_response_promise<bool>();
          all_parts(
              [self, sid, split](std::size_t p, std::function<void()> next, std::function<void(caf::error)> fail) {
                if (!self->state.alive[p]) {
                  if ((*split)[p].tensors.empty()) return next();
                  return fail(part_gone(self, int(p)));
                }
                self->request(self->state.parts[p].worker, self->state.t.graph, sload_atom::value, sid, (*split)[p])
                    .then([next](bool) { next(); }, [fail](caf::error& e) { fail(e); });
              },
              [self, sid, where, zeros, rp]() mutable {
                auto& s = self->state.sessions[sid];
                s.where = where;
                s.zeros = zeros;
                s.lost = false;
                s.stale.clear();
                rp.deliver(true);
              },
              [rp](caf::error e) mutable { rp.deliver(std::move(e)); });
          return rp;
        },
        [=](run_atom, run_request& r) -> caf::result<run_reply> {
          self->state.tally.count();
          auto planned = plan_call(self, r);
          if (!planned) return to_caf(planned.err());
          auto c = *planned;
          const std::string sid = c->sid;
          if (!sid.empty()) {
            auto s = self->state.sessions.find(sid);
            if (s == self->state.sessions.end()) return to_caf(errc::not_found, "session " + sid + " is not on this model");
            if (s->second.lost) return lost_session(sid);
            if (!s->second.stale.empty()) return to_caf(errc::conflict, "session " + sid + ": " + s->second.stale);
          }
          c->run_id = r.run_id;
          c->timeout_ms = r.timeout_ms;
          if (r.timeout_ms > 0) c->deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(r.timeout_ms);
          c->rp = self->make_response_promise<run_reply>();
          if (!sid.empty()) {
            auto& s = self->state.sessions[sid];
            for (const auto& [tensor, shape] : c->plan->deferred) {
              s.zeros[tensor] = shape;
              s.where.erase(tensor);  // a copy left on a worker is stale now
            }
          }
          // Zeros first created where read, then tensors moved to their readers, then the stages.
          auto moves = c->moves;
          auto create = c->create;
          auto run = [self, c] { run_stage(self, c, 0); };
          auto then_move = [self, c, sid, moves, run] {
            if (moves.empty() || sid.empty()) return run();
            move_tensors(self, sid, moves, [c, run](caf::error e) {
              if (e) return c->fail(std::move(e));
              run();
            });
          };
          if (create.empty() || sid.empty()) {
            then_move();
          } else {
            create_zeros(self, sid, create, [c, then_move](caf::error e) {
              if (e) return c->fail(std::move(e));
              then_move();
            });
          }
          return c->rp;
        },
        [=](compile_atom, compile_request& r) -> caf::result<compile_reply> {
          self->state.tally.count();
          auto doc = std::make_shared<rapidjson::Document>();
          doc->Parse(r.graph_json.c_str());
          if (doc->HasParseError() || !doc->IsObject()) return to_caf(errc::invalid, "graph is not a JSON object");
          auto decl = parse_graph(*doc, true);
          if (!decl) return to_caf(decl.err());
          if (decl->sessions.size() > 1)
            return to_caf(errc::invalid, "a graph listing several sessions cannot run on a model spread over several workers");
          for (std::size_t i = 0; i < decl->inputs.size(); ++i) {
            const auto& in = decl->inputs[i];
            if (in.kind == input_kind::weight && (in.model != self->state.model_id || !self->state.weight_part.count(in.weight)))
              return to_caf(errc::not_found, "inputs[" + std::to_string(i) + "] (" + in.name + "): model " + in.model +
                                                 " has no weight " + in.weight + " here");
            if (in.kind == input_kind::tensor_id)
              return to_caf(errc::invalid, "inputs[" + std::to_string(i) + "] (" + in.name +
                                               "): a graph on a model spread over several workers reads weights by model and name");
          }
          compile_reply reply;
          reply.steps = std::uint32_t(decl->steps.size());
          reply.bindings = template_bindings(*doc);
          std::set<std::string> ops;
          for (const auto& s : decl->steps) ops.insert(s.op);
          for (const auto& n : graph_needs(*decl))
            if (!ops.count(n)) reply.features.push_back(n);
          std::sort(reply.features.begin(), reply.features.end());
          // Split once, then compile the stages in order on their workers: each stage's
          // template declares the values it receives with the shapes the stages before it
          // reported for them.
          auto plan = split_graph(*doc, placement(self, ""), true);
          if (!plan) return to_caf(plan.err());
          const std::string id = r.graph_id;
          dropped_stages(self, id);
          compiled_template t;
          t.doc = doc;
          t.plan = std::make_shared<const stage_plan>(std::move(*plan));
          t.stage_json.assign(t.plan->stages.size(), "");
          t.stage_bindings.assign(t.plan->stages.size(), {});
          t.compiled_on.assign(t.plan->stages.size(), caf::actor_addr{});
          self->state.templates[id] = std::move(t);
          auto shapes = std::make_shared<std::map<std::string, shape_t>>();
          auto rp = self->make_response_promise<compile_reply>();
          auto failed = [self, id, rp](caf::error e) mutable {
            self->state.templates.erase(id);
            rp.deliver(std::move(e));
          };
          in_sequence(
              self->state.templates[id].plan->stages.size(),
              [self, id, shapes, failed](std::size_t i, std::function<void()> next) mutable {
                auto& t = self->state.templates[id];
                const stage& s = t.plan->stages[i];
                if (s.step_texts.empty()) return next();  // nothing to run there
                t.stage_json[i] = s.template_json(*shapes);
                auto& S = self->state;
                const worker_actor w = S.parts[std::size_t(s.worker)].worker;
                if (!S.alive[std::size_t(s.worker)])
                  return failed(part_gone(self, s.worker));
                self->request(w, S.t.graph, compile_atom::value, compile_request{stage_graph_id(id, i), t.stage_json[i], s.sends})
                    .then(
                        [self, id, i, w, shapes, next](compile_reply& c) {
                          auto t = self->state.templates.find(id);
                          if (t == self->state.templates.end()) return;
                          const stage& s = t->second.plan->stages[i];
                          for (std::size_t k = 0; k < s.sends.size() && k < c.shapes.size(); ++k) (*shapes)[s.sends[k]] = c.shapes[k];
                          t->second.stage_bindings[i] = c.bindings;
                          t->second.compiled_on[i] = w.address();
                          next();
                        },
                        [self, id, i, failed](caf::error& e) mutable {
                          auto t = self->state.templates.find(id);
                          if (t == self->state.templates.end()) return failed(e);
                          const stage& s = t->second.plan->stages[i];
                          failed(in_graph_terms(e, s, self->state.parts[std::size_t(s.worker)].worker_id));
                        });
              },
              [rp, reply]() mutable { rp.deliver(reply); });
          return rp;
        },
        [=](dropgraph_atom, const std::string& id) {
          self->state.tally.count();
          dropped_stages(self, id);
          return self->state.templates.erase(id) > 0;
        },
        [=](gencheck_atom, const std::string& id, bool sampling, bool verify) -> caf::result<std::int32_t> {
          self->state.tally.count();
          auto t = self->state.templates.find(id);
          if (t == self->state.templates.end()) return to_caf(errc::not_found, "graph " + id + " is not compiled for this model");
          auto decl = parse_graph(*t->second.doc, true);
          if (!decl) return to_caf(decl.err());
          auto k = check_generate_template(*decl, template_bindings(*t->second.doc), sampling, verify);
          if (!k) return to_caf(k.err());
          return *k;
        },
        [=](genstart_atom, const gen_request&) -> caf::result<bool> {
          self->state.tally.count();
          return to_caf(errc::invalid, not_here + "its generations run through the coordinator (workerLoop false)");
        },
        [=](genstep_atom) { self->state.tally.count();},
        [=](gencancel_atom, const std::string&) { self->state.tally.count();},
        [=](tput_atom, const tensor_upload&) -> caf::result<bool> {
          self->state.tally.count();
          return to_caf(errc::invalid, not_here + "it holds no v2 tensors");
        },
        [=](tdrop_atom, const std::string&) { self->state.tally.count(); return false; },
        [=](tdigest_atom, const std::string&, const std::string&, const std::string&) -> caf::result<std::string> {
          self->state.tally.count();
          return to_caf(errc::invalid, not_here + "ask the worker holding the weight");
        },
        [=](recheck_atom) -> caf::result<recheck_reply> {
          self->state.tally.count();
          return to_caf(errc::invalid, not_here + "re-check its parts' workers");
        },
        [=](place_atom, std::uint32_t p, worker_actor w) -> caf::result<bool> {
          self->state.tally.count();
          auto& S = self->state;
          if (p >= S.parts.size()) return to_caf(errc::invalid, "no such part");
          S.parts[p].worker = w;
          S.alive[p] = true;
          S.unplaceable[p] = false;
          // Every session has a part on every worker: open them on the new one.
          auto sids = std::make_shared<std::vector<std::string>>();
          for (const auto& [sid, _] : S.sessions) sids->push_back(sid);
          auto rp = self->make_response_promise<bool>();
          in_sequence(
              sids->size(),
              [self, sids, w](std::size_t i, std::function<void()> next) {
                self->request(w, self->state.t.control, sopen_atom::value, (*sids)[i])
                    .then([next](bool) { next(); }, [next](caf::error&) { next(); });
              },
              [rp]() mutable { rp.deliver(true); });
          return rp;
        },
        [=](partlost_atom, std::uint32_t p, bool placing) {
          self->state.tally.count();
          auto& S = self->state;
          if (p >= S.parts.size()) return;
          S.alive[p] = false;
          S.unplaceable[p] = !placing;
          if (auto it = S.inflight.find(int(p)); it != S.inflight.end()) {
            auto calls = std::move(it->second);
            S.inflight.erase(it);
            for (auto& [_, abort] : calls) abort(std::nullopt);
          }
          for (auto& [sid, s] : S.sessions)
            for (const auto& [t, where] : s.where)
              if (where == int(p)) s.lost = true;
        },
    };
  });
}

}  // namespace mpakt
