#include "http/api/model_graph.hpp"

#include <rapidjson/document.h>

#include <cstdint>
#include <set>

#include "runtime/json.hpp"

#include "runtime/models/arch.hpp"

namespace mpakt::http {

namespace {

result<int> int_field(const rapidjson::Document& d, const char* name, int fallback, int lo, int hi) {
  auto it = d.FindMember(name);
  if (it == d.MemberEnd()) return fallback;
  auto v = json_integer(it->value, std::string("graph request ") + name, lo, hi);
  if (!v) return std::move(v).err();
  return int(*v);
}

}  // namespace

result<std::string> build_model_graph(std::string_view body, std::string_view config_json, const std::string& model_id) {
  auto parsed = parse_json_object(body, "request body");
  if (!parsed) return std::move(parsed).err();
  const rapidjson::Document& d = *parsed;
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
      for (rapidjson::SizeType i = 0; i < it->value.Size(); ++i) {
        auto id = json_integer(it->value[i], "graph request ids[" + std::to_string(i) + "]", 0, INT32_MAX);
        if (!id) return std::move(id).err();
        o.ids.push_back(int(*id));
      }
      o.tokens = int(o.ids.size());
    } else {
      if (!*compiled) return invalid("graph request needs ids for an inline graph, or compiled: true");
      auto tokens = int_field(d, "tokens", 1, 1, 4096);
      if (!tokens) return tokens.err();
      o.tokens = *tokens;
    }
    std::string output = "logits";
    if (auto it = d.FindMember("output"); it != d.MemberEnd()) {
      // Any other type used to be read as the default, logits, without a word.
      if (!it->value.IsString()) return invalid("graph request output must be logits, argmax or sample (a string)");
      output.assign(it->value.GetString(), it->value.GetStringLength());
    }
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
