#include "actors/worker/worker_actor.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "actors/errors.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "runtime/executor.hpp"
#include "runtime/graph.hpp"
#include "runtime/outputs.hpp"
#include "runtime/tensor_builder.hpp"
#include "runtime/tensor_store.hpp"

namespace mpakt {

namespace {

/// A template compiled on this worker.
struct compiled_entry {
  std::unique_ptr<executable_graph> graph;
  std::vector<std::string> outputs;
  std::vector<std::pair<std::string, std::string>> retain;
  std::set<std::string> models;  ///< models whose weights it reads
};

struct worker_state {
  worker_config cfg;
  tensor_store store;
  std::unique_ptr<cpu_backend> backend;
  /// A tensor being received, and the resident bytes reserved for it.
  struct incoming {
    tensor_builder builder;
    std::uint64_t resident = 0;
  };
  /// model -> tensor name -> tensor being received
  std::map<std::string, std::map<std::string, incoming>> loading;
  std::uint64_t loading_bytes = 0;  ///< resident bytes reserved by tensors being received
  std::map<std::string, compiled_entry> graphs;

  std::uint64_t used() const { return store.bytes_held() + loading_bytes; }
  std::uint64_t free() const { return cfg.memory_bytes > used() ? cfg.memory_bytes - used() : 0; }

  build_options options(bool compiled) const {
    build_options o;
    o.compiled = compiled;
    o.max_tensor_bytes = std::int64_t(cfg.memory_bytes);
    return o;
  }
  void drop_graphs_reading(const std::string& model) {
    for (auto it = graphs.begin(); it != graphs.end();)
      it = it->second.models.count(model) ? graphs.erase(it) : std::next(it);
  }
};

using worker_pointer = worker_actor::stateful_pointer<worker_state>;

std::string mb(std::uint64_t bytes) { return std::to_string((bytes + 999999) / 1000000) + " MB"; }

/// Writes the outputs object of a run.
std::string outputs_text(const executable_graph& g, const std::vector<std::string>& names, bool base64) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  write_outputs(w, g, names, base64);
  return std::string(buf.GetString(), buf.GetSize());
}

/// Applies a compiled call's bindings ({"name": number | [numbers]}); every declared
/// binding must be given (decisions.md), none may be unknown.
status apply_bindings(executable_graph& g, const std::string& bind_json) {
  rapidjson::Document d;
  d.Parse(bind_json.empty() ? "{}" : bind_json.c_str());
  if (d.HasParseError() || !d.IsObject()) return invalid("bind must be an object of binding values");
  for (const auto& name : g.bindings())
    if (!d.HasMember(name.c_str())) return invalid("binding " + name + " was not given");
  std::vector<float> values;
  for (auto it = d.MemberBegin(); it != d.MemberEnd(); ++it) {
    const std::string name(it->name.GetString(), it->name.GetStringLength());
    const auto& v = it->value;
    if (g.is_input_binding(name)) {
      values.clear();
      if (v.IsNumber()) {
        values.push_back(float(v.GetDouble()));
      } else if (v.IsArray()) {
        for (rapidjson::SizeType i = 0; i < v.Size(); ++i) {
          if (!v[i].IsNumber()) return invalid("bind." + name + "[" + std::to_string(i) + "] must be a number");
          values.push_back(float(v[i].GetDouble()));
        }
      } else {
        return invalid("bind." + name + " must be an array of numbers");
      }
      MPAKT_TRY(g.bind_input(name, values));
    } else {
      if (!v.IsNumber()) return invalid("bind." + name + " must be a number");
      MPAKT_TRY(g.bind_param(name, v.GetDouble()));
    }
  }
  return {};
}

std::set<std::string> models_of(const graph_decl& d) {
  std::set<std::string> out;
  for (const auto& in : d.inputs)
    if (in.kind == input_kind::weight) out.insert(in.model);
  return out;
}

}  // namespace

namespace {

worker_actor::behavior_type worker_behavior(worker_pointer self, worker_config cfg) {
  self->state.cfg = cfg;
  self->state.backend = std::make_unique<cpu_backend>(cpu_backend::config{cfg.reference_only});
  return {
      [=](status_atom) {
        auto& st = self->state;
        worker_status s;
        s.worker_id = st.cfg.worker_id;
        s.backend = std::string(st.backend->name());
        s.total_bytes = st.cfg.memory_bytes;
        s.free_bytes = st.free();
        s.features = st.backend->features();
        s.packed_weights = !st.cfg.legacy;
        s.can_quantize = !st.cfg.legacy;
        s.max_tensor_bytes = s.free_bytes;
        return s;
      },
      [=](tbegin_atom, tensor_begin_request& r) -> caf::result<bool> {
        auto& st = self->state;
        auto resident = dtype_from_name(r.resident);
        if (!resident) return to_caf(errc::invalid, "unknown resident dtype " + r.resident);
        if (st.cfg.legacy) resident = dtype::f32;  // an old worker widens everything
        if (st.loading[r.model_id].count(r.name) || (st.store.model(r.model_id) && st.store.model(r.model_id)->count(r.name)))
          return to_caf(errc::conflict, "tensor " + r.name + " of model " + r.model_id + " is already on worker " + st.cfg.worker_id);
        auto bytes = storage_bytes(*resident, shape_numel(r.shape));
        if (!bytes) return to_caf(errc::invalid, "tensor " + r.name + " has an invalid shape");
        if (*bytes > st.free())
          return to_caf(errc::unavailable, "tensor " + r.name + " needs " + mb(*bytes) + " but worker " + st.cfg.worker_id +
                                               " has " + mb(st.free()) + " free");
        st.loading[r.model_id].emplace(r.name, worker_state::incoming{tensor_builder(r.file_dtype, r.shape, *resident, r.name), *bytes});
        st.loading_bytes += *bytes;
        return true;
      },
      [=](tpiece_atom, tensor_piece& p) -> caf::result<std::uint64_t> {
        auto& st = self->state;
        auto m = st.loading.find(p.model_id);
        if (m == st.loading.end() || !m->second.count(p.name))
          return to_caf(errc::conflict, "tensor " + p.name + " of model " + p.model_id + " is not being loaded");
        auto& b = m->second.at(p.name).builder;
        auto s = b.add(p.offset, p.bytes);
        if (!s) return to_caf(s.err());
        return b.received_bytes();
      },
      [=](tend_atom, const std::string& model, const std::string& name) -> caf::result<std::uint64_t> {
        auto& st = self->state;
        auto m = st.loading.find(model);
        if (m == st.loading.end() || !m->second.count(name))
          return to_caf(errc::conflict, "tensor " + name + " of model " + model + " is not being loaded");
        auto node = m->second.extract(name);
        st.loading_bytes -= std::min<std::uint64_t>(st.loading_bytes, node.mapped().resident);
        if (m->second.empty()) st.loading.erase(m);
        auto t = node.mapped().builder.finish();
        if (!t) return to_caf(t.err());
        const std::uint64_t n = t->nbytes();
        st.store.put_weight(model, name, std::move(*t));
        return n;
      },
      [=](tabort_atom, const std::string& model) {
        auto& st = self->state;
        if (auto m = st.loading.find(model); m != st.loading.end()) {
          for (auto& [_, in] : m->second) st.loading_bytes -= std::min<std::uint64_t>(st.loading_bytes, in.resident);
          st.loading.erase(m);
        }
        st.drop_graphs_reading(model);
        return st.store.drop_model(model);
      },
      [=](dropmodel_atom, const std::string& model) {
        self->state.drop_graphs_reading(model);
        return self->state.store.drop_model(model);
      },
      [=](sopen_atom, const std::string& sid) {
        self->state.store.session(sid);
        return true;
      },
      [=](sclose_atom, const std::string& sid) { return self->state.store.drop_session(sid); },
      [=](sinfo_atom, const std::string& sid) -> caf::result<session_info> {
        const auto* s = self->state.store.find_session(sid);
        if (!s) return to_caf(errc::not_found, "session " + sid + " is not on worker " + self->state.cfg.worker_id);
        session_info info;
        for (const auto& [name, t] : *s) {
          info.tensors.push_back({name, t.shape(), std::string(dtype_name(t.type())), t.nbytes()});
          info.bytes += t.nbytes();
        }
        return info;
      },
      [=](sdump_atom, const std::string& sid) -> caf::result<session_dump> {
        const auto* s = self->state.store.find_session(sid);
        if (!s) return to_caf(errc::not_found, "session " + sid + " is not on worker " + self->state.cfg.worker_id);
        session_dump d;
        for (const auto& [name, t] : *s) {
          d.tensors.push_back({name, t.shape(), std::string(dtype_name(t.type())),
                               std::string(reinterpret_cast<const char*>(t.data()), t.nbytes())});
          d.bytes += t.nbytes();
        }
        return d;
      },
      [=](sload_atom, const std::string& sid, session_dump& d) -> caf::result<bool> {
        auto& st = self->state;
        const auto* old = st.store.find_session(sid);
        const std::uint64_t freed = old ? tensor_store::bytes_of(*old) : 0;
        if (d.bytes > st.free() + freed)
          return to_caf(errc::unavailable, "restoring session " + sid + " needs " + mb(d.bytes) + " but worker " +
                                               st.cfg.worker_id + " has " + mb(st.free() + freed) + " free");
        tensor_store::tensor_map m;
        for (auto& b : d.tensors) {
          auto type = dtype_from_name(b.dtype);
          if (!type) return to_caf(errc::invalid, "checkpoint tensor " + b.name + " has unknown dtype " + b.dtype);
          auto t = tensor::make(*type, b.shape);
          if (!t) return to_caf(t.err());
          if (t->nbytes() != b.bytes.size()) return to_caf(errc::invalid, "checkpoint tensor " + b.name + " has the wrong size");
          std::memcpy(t->data(), b.bytes.data(), b.bytes.size());
          m[b.name] = std::move(*t);
        }
        st.store.session(sid) = std::move(m);
        return true;
      },
      [=](run_atom, run_request& r) -> caf::result<run_reply> {
        auto& st = self->state;
        if (!r.session.empty() && !st.store.find_session(r.session))
          return to_caf(errc::not_found, "session " + r.session + " is not on this worker");
        for (const auto& s : r.sessions)
          if (!st.store.find_session(s)) return to_caf(errc::not_found, "session " + s + " is not on this worker");
        tensor_store::source src(st.store, r.session, r.sessions);
        const std::string primary = r.session.empty() && !r.sessions.empty() ? r.sessions.front() : r.session;
        run_reply reply;
        if (!r.graph_id.empty()) {
          auto it = st.graphs.find(r.graph_id);
          if (it == st.graphs.end()) return to_caf(errc::not_found, "graph " + r.graph_id + " is not compiled on this worker");
          auto& e = it->second;
          if (auto s = apply_bindings(*e.graph, r.bind_json); !s) return to_caf(s.err());
          if (auto s = e.graph->run(src); !s) return to_caf(s.err());
          if (!e.retain.empty()) {
            if (primary.empty()) return to_caf(errc::invalid, "the graph retains values but no session was given");
            if (auto s = st.store.apply_retain(*e.graph, primary, e.retain); !s) return to_caf(s.err());
          }
          reply.outputs_json = outputs_text(*e.graph, r.outputs.empty() ? e.outputs : r.outputs, r.base64);
          reply.steps = std::uint32_t(e.graph->step_count());
          return reply;
        }
        auto decl = parse_graph_text(r.graph_json, false);
        if (!decl) return to_caf(decl.err());
        if (!decl->retain.empty() && primary.empty())
          return to_caf(errc::invalid, "graph.retain needs a session to keep values in");
        auto outputs = decl->outputs;
        auto retain = decl->retain;
        auto g = executable_graph::build(std::move(*decl), src, *st.backend, st.options(false));
        if (!g) return to_caf(g.err());
        if (auto s = (*g)->run(src); !s) return to_caf(s.err());
        if (!retain.empty())
          if (auto s = st.store.apply_retain(**g, primary, retain); !s) return to_caf(s.err());
        reply.outputs_json = outputs_text(**g, outputs, r.base64);
        reply.steps = std::uint32_t((*g)->step_count());
        return reply;
      },
      [=](compile_atom, compile_request& r) -> caf::result<compile_reply> {
        auto& st = self->state;
        auto decl = parse_graph_text(r.graph_json, true);
        if (!decl) return to_caf(decl.err());
        compiled_entry e;
        e.outputs = decl->outputs;
        e.retain = decl->retain;
        e.models = models_of(*decl);
        tensor_store::source src(st.store, {});
        auto g = executable_graph::build(std::move(*decl), src, *st.backend, st.options(true));
        if (!g) return to_caf(g.err());
        e.graph = std::move(*g);
        compile_reply reply;
        reply.steps = std::uint32_t(e.graph->step_count());
        reply.bindings = e.graph->bindings();
        reply.features = e.graph->features_used();
        st.graphs[r.graph_id] = std::move(e);
        return reply;
      },
      [=](dropgraph_atom, const std::string& id) { return self->state.graphs.erase(id) > 0; },
      [=](tput_atom, tensor_upload& u) -> caf::result<bool> {
        auto t = make_f32(u.shape, u.values);
        if (!t) return to_caf(t.err());
        if (t->nbytes() > self->state.free())
          return to_caf(errc::unavailable, "tensor needs " + mb(t->nbytes()) + " but the worker has " + mb(self->state.free()) + " free");
        self->state.store.put_tensor(u.tensor_id, std::move(*t));
        return true;
      },
      [=](tdrop_atom, const std::string& id) { return self->state.store.drop_tensor(id); },
  };
}

}  // namespace

worker_actor spawn_worker(caf::actor_system& sys, worker_config cfg) {
  return sys.spawn<caf::detached>(worker_behavior, std::move(cfg));
}

}  // namespace mpakt
