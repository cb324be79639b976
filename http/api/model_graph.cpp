#include "http/api/model_graph.hpp"

#include <rapidjson/document.h>

#include <set>

#include "runtime/models/arch.hpp"

namespace mpakt::http {

namespace {

result<int> int_field(const rapidjson::Document& d, const char* name, int fallback, int lo, int hi) {
  auto it = d.FindMember(name);
  if (it == d.MemberEnd()) return fallback;
  if (!it->value.IsInt() || it->value.GetInt() < lo || it->value.GetInt() > hi)
    return invalid(std::string("graph request ") + name + " must be an integer from " + std::to_string(lo) + " to " +
                   std::to_string(hi));
  return it->value.GetInt();
}

}  // namespace

result<std::string> build_model_graph(std::string_view body, std::string_view config_json, const std::string& model_id) {
  rapidjson::Document d;
  d.Parse(body.data(), body.size());
  if (d.HasParseError() || !d.IsObject()) return invalid("request body must be a JSON object");
  static const std::set<std::string> known = {"tokens", "ids", "pos", "cacheRows", "compiled", "output",
                                              "repetitionPenalty", "allocate", "history"};
  for (auto it = d.MemberBegin(); it != d.MemberEnd(); ++it)
    if (!known.count(it->name.GetString())) return invalid(std::string("graph request has an unknown field \"") + it->name.GetString() + "\"");
  auto config = models::parse_arch_config(config_json);
  if (!config) return std::move(config).err();
  auto rows = int_field(d, "cacheRows", 0, 0, 1 << 20);
  if (!rows) return rows.err();
  auto flag = [&](const char* name) -> result<bool> {
    auto it = d.FindMember(name);
    if (it == d.MemberEnd()) return false;
    if (!it->value.IsBool()) return invalid(std::string("graph request ") + name + " must be true or false");
    return it->value.GetBool();
  };
  auto allocate = flag("allocate");
  auto history = flag("history");
  auto compiled = flag("compiled");
  for (auto* f : {&allocate, &history, &compiled})
    if (!*f) return f->err();
  std::string graph;
  if (*allocate) {
    if (*rows < 1) return invalid("graph request allocate needs cacheRows");
    graph = models::arch_cache_graph(*config, *rows, *history);
  } else {
    models::arch_graph_options o;
    o.model_id = model_id;
    o.compiled = *compiled;
    o.use_cache = *rows > 0;
    o.cache_rows = *rows;
    auto pos = int_field(d, "pos", 0, 0, 1 << 20);
    if (!pos) return pos.err();
    o.pos = *pos;
    if (auto it = d.FindMember("ids"); it != d.MemberEnd()) {
      if (*compiled) return invalid("graph request ids belong to an inline graph; a compiled one binds them per call");
      if (!it->value.IsArray() || it->value.Empty()) return invalid("graph request ids must be a non-empty array of token ids");
      for (const auto& v : it->value.GetArray()) {
        if (!v.IsInt() || v.GetInt() < 0) return invalid("graph request ids must be token ids");
        o.ids.push_back(v.GetInt());
      }
      o.tokens = int(o.ids.size());
    } else {
      if (!*compiled) return invalid("graph request needs ids for an inline graph, or compiled: true");
      auto tokens = int_field(d, "tokens", 1, 1, 4096);
      if (!tokens) return tokens.err();
      o.tokens = *tokens;
    }
    const std::string output = d.HasMember("output") && d["output"].IsString() ? d["output"].GetString() : "logits";
    if (output == "argmax") o.argmax = true;
    else if (output == "sample") o.sample = true;
    else if (output != "logits") return invalid("graph request output must be logits, argmax or sample, not \"" + output + "\"");
    if (auto it = d.FindMember("repetitionPenalty"); it != d.MemberEnd()) {
      if (!it->value.IsNumber() || it->value.GetDouble() < 1) return invalid("graph request repetitionPenalty must be a number of at least 1");
      if (!o.use_cache) return invalid("graph request repetitionPenalty needs cacheRows (the token history lives in the session)");
      o.repetition_penalty = it->value.GetDouble();
    }
    graph = models::arch_graph(*config, o);
  }
  return "{\"family\":\"" + config->family + "\",\"graph\":" + graph + "}";
}

}  // namespace mpakt::http
