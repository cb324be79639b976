// `mpakt run`: validate and run graphs locally against a model folder — the debugging tool
// for graphs before they are sent to a grid.

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/commands.hpp"
#include "app/model_folder.hpp"
#include "backends/cpu/cpu_backend.hpp"
#include "runtime/executor.hpp"
#include "runtime/graph.hpp"
#include "runtime/json.hpp"
#include "runtime/outputs.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/tensor_store.hpp"

namespace mpakt::app {

namespace {

namespace fs = std::filesystem;

const char* run_usage =
    "usage: mpakt run GRAPH.json [--model DIR] [--model-id ID] [--bind NAME=VALUE]... [--base64]\n"
    "\n"
    "Validates and runs v3 graphs on this machine's CPU and prints each run's outputs as one\n"
    "JSON line. GRAPH.json holds a graph object, a request body {\"graph\": {...}}, or an array\n"
    "of those, run in order against one in-memory session (so a cache allocated by the first\n"
    "graph is there for the next).\n"
    "\n"
    "  --model DIR      a folder with model.safetensors (or model.safetensors.index.json and its\n"
    "                   shards); {model, weight} inputs read from it\n"
    "  --model-id ID    the model id graphs use for it (default: any model id means DIR)\n"
    "  --bind N=V       a binding for graphs with bound inputs or {\"$bind\"} params:\n"
    "                   N=41 for a parameter, N=[4097] or N=[1,2,3] for an input\n"
    "  --base64         print outputs as base64 little-endian f32\n";


/// Resolves weights of any model id to the one local folder unless a model id was given.
class cli_source final : public tensor_source {
 public:
  cli_source(tensor_store& store, std::string model_id, bool any_id, std::vector<std::string> sessions)
      : inner_(store, std::move(sessions)), model_id_(std::move(model_id)), any_id_(any_id) {}
  result<tensor> weight(std::string_view model, std::string_view name) override {
    return inner_.weight(any_id_ ? std::string_view(model_id_) : model, name);
  }
  result<tensor> by_id(std::string_view id) override { return inner_.by_id(id); }
  result<tensor> session_tensor(int of, std::string_view name) override { return inner_.session_tensor(of, name); }
  int session_count() const override { return inner_.session_count(); }

 private:
  tensor_store::source inner_;
  std::string model_id_;
  bool any_id_;
};

bool has_binds(const rapidjson::Value& g) {
  if (g.HasMember("inputs") && g["inputs"].IsArray())
    for (const auto& in : g["inputs"].GetArray())
      if (in.IsObject() && in.HasMember("bind")) return true;
  if (g.HasMember("steps") && g["steps"].IsArray())
    for (const auto& st : g["steps"].GetArray())
      if (st.IsObject() && st.HasMember("params") && st["params"].IsObject())
        for (auto it = st["params"].MemberBegin(); it != st["params"].MemberEnd(); ++it)
          if (it->value.IsObject() && it->value.HasMember("$bind")) return true;
  return false;
}

}  // namespace

int cmd_run(const std::vector<std::string>& args) {
  std::string graph_path, model_dir, model_id = "m_local";
  bool any_id = true, base64 = false;
  std::vector<std::pair<std::string, std::string>> binds;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* flag) -> const std::string* {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "mpakt run: %s needs a value\n", flag);
        return nullptr;
      }
      return &args[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(run_usage, stdout);
      return 0;
    } else if (a == "--model") {
      auto v = value("--model");
      if (!v) return 2;
      model_dir = *v;
    } else if (a == "--model-id") {
      auto v = value("--model-id");
      if (!v) return 2;
      model_id = *v;
      any_id = false;
    } else if (a == "--bind") {
      auto v = value("--bind");
      if (!v) return 2;
      const auto eq = v->find('=');
      if (eq == std::string::npos || eq == 0) {
        std::fprintf(stderr, "mpakt run: --bind takes NAME=VALUE, not \"%s\"\n", v->c_str());
        return 2;
      }
      binds.emplace_back(v->substr(0, eq), v->substr(eq + 1));
    } else if (a == "--base64") {
      base64 = true;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "mpakt run: unknown option %s\n\n%s", a.c_str(), run_usage);
      return 2;
    } else if (graph_path.empty()) {
      graph_path = a;
    } else {
      std::fprintf(stderr, "mpakt run: more than one graph file given\n");
      return 2;
    }
  }
  if (graph_path.empty()) {
    std::fputs(run_usage, stderr);
    return 2;
  }

  tensor_store store;
  if (!model_dir.empty()) {
    auto weights = load_folder(model_dir);
    if (!weights) {
      std::fprintf(stderr, "mpakt run: %s\n", weights.err().message.c_str());
      return 1;
    }
    store.put_model(model_id, std::move(*weights));
  }

  rapidjson::Document doc;
  if (!fs::exists(graph_path)) {
    std::fprintf(stderr, "mpakt run: %s does not exist\n", graph_path.c_str());
    return 1;
  }
  const std::string text = slurp(graph_path);
  if (auto parsed = parse_json(text, graph_path); !parsed) {
    std::fprintf(stderr, "mpakt run: %s\n", parsed.err().message.c_str());
    return 1;
  } else {
    doc = std::move(*parsed);
  }
  std::vector<const rapidjson::Value*> bodies;
  if (doc.IsArray()) {
    for (const auto& v : doc.GetArray()) bodies.push_back(&v);
  } else {
    bodies.push_back(&doc);
  }

  cpu_backend be;
  for (std::size_t gi = 0; gi < bodies.size(); ++gi) {
    const rapidjson::Value& body = *bodies[gi];
    const std::string where = bodies.size() > 1 ? "graph " + std::to_string(gi) + ": " : "";
    auto fail = [&](const std::string& msg) {
      std::fprintf(stderr, "mpakt run: %s%s\n", where.c_str(), msg.c_str());
      return 1;
    };
    if (!body.IsObject()) return fail("a graph must be a JSON object");
    const rapidjson::Value& g = body.HasMember("graph") ? body["graph"] : body;
    bool b64 = base64;
    if (body.HasMember("encoding") && body["encoding"].IsString()) b64 = std::string(body["encoding"].GetString()) == "base64";
    const bool compiled = has_binds(g);
    auto decl = parse_graph(g, compiled);
    if (!decl) return fail(decl.err().message);

    std::vector<std::string> sessions = decl->sessions;
    std::string primary = decl->session.value_or(body.HasMember("session") && body["session"].IsString()
                                                     ? body["session"].GetString() : "s_local");
    if (sessions.empty()) sessions.push_back(primary);
    for (const auto& s : sessions) store.session(s);
    cli_source src(store, model_id, any_id, sessions);

    std::vector<std::string> outputs = decl->outputs;
    auto retain = decl->retain;
    build_options opts;
    opts.compiled = compiled;
    const auto t0 = std::chrono::steady_clock::now();
    auto eg = executable_graph::build(std::move(*decl), src, be, opts);
    if (!eg) return fail(eg.err().message);
    for (const auto& [name, val] : binds) {
      const bool known = std::find((*eg)->bindings().begin(), (*eg)->bindings().end(), name) != (*eg)->bindings().end();
      if (!known) continue;  // several graphs may share one --bind list
      status st;
      if ((*eg)->is_input_binding(name)) {
        auto v = parse_json(val, "--bind " + name);
        std::vector<float> xs;
        if (v && v->IsArray()) {
          for (const auto& x : v->GetArray())
            if (x.IsNumber()) xs.push_back(float(x.GetDouble()));
        } else if (v && v->IsNumber()) {
          xs.push_back(float(v->GetDouble()));
        } else {
          return fail("--bind " + name + " needs a number array");
        }
        st = (*eg)->bind_input(name, xs);
      } else {
        char* end = nullptr;
        const double d = std::strtod(val.c_str(), &end);
        if (end == val.c_str() || *end) return fail("--bind " + name + " needs a number");
        st = (*eg)->bind_param(name, d);
      }
      if (!st) return fail(st.err().message);
    }
    auto st = (*eg)->run(src);
    if (!st) return fail(st.err().message);
    st = store.apply_retain(**eg, primary, retain);
    if (!st) return fail(st.err().message);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.StartObject();
    w.Key("outputs");
    write_outputs(w, **eg, outputs, b64);
    w.Key("retained");
    w.StartArray();
    for (const auto& [name, _] : retain) w.String(name.c_str());
    w.EndArray();
    w.Key("steps");
    w.Uint64((*eg)->step_count());
    w.Key("ms");
    w.Double(ms);
    w.EndObject();
    std::fwrite(buf.GetString(), 1, buf.GetSize(), stdout);
    std::fputc('\n', stdout);
  }
  return 0;
}

}  // namespace mpakt::app
