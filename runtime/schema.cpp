#include "runtime/schema.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cstdio>


namespace mpakt {

const param_spec* op_spec::param(std::string_view n) const {
  for (const auto& p : params)
    if (p.name == n) return &p;
  return nullptr;
}

namespace {

std::optional<param_spec> parse_type(std::string_view text) {
  param_spec p;
  p.type_text = std::string(text);
  if (!text.empty() && text.back() == '?') {
    p.optional = true;
    text.remove_suffix(1);
  }
  if (text == "number") p.kind = param_spec::type::number;
  else if (text == "boolean") p.kind = param_spec::type::boolean;
  else if (text == "string") p.kind = param_spec::type::string;
  else if (text == "array") p.kind = param_spec::type::array;
  else if (text == "object") p.kind = param_spec::type::object;
  else return std::nullopt;
  return p;
}

std::string fnv1a_hex(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

result<schema> schema::parse(std::string_view json) {
  rapidjson::Document doc;
  doc.Parse(json.data(), json.size());
  if (doc.HasParseError() || !doc.IsObject()) return invalid("ops schema is not a JSON object");
  if (!doc.HasMember("ops") || !doc["ops"].IsArray()) return invalid("ops schema has no ops array");
  schema s;
  std::string canon;
  for (const auto& o : doc["ops"].GetArray()) {
    if (!o.IsObject() || !o.HasMember("op") || !o["op"].IsString()) return invalid("ops schema entry without an op name");
    op_spec spec;
    spec.name = o["op"].GetString();
    auto need_int = [&](const char* key, int& out) -> status {
      if (!o.HasMember(key) || !o[key].IsInt()) return invalid("ops schema: op " + spec.name + " lacks integer " + key);
      out = o[key].GetInt();
      return {};
    };
    MPAKT_TRY(need_int("minInputs", spec.min_inputs));
    MPAKT_TRY(need_int("maxInputs", spec.max_inputs));
    if (o.HasMember("mutatesInput")) MPAKT_TRY(need_int("mutatesInput", spec.mutates_input));
    if (o.HasMember("writesInput")) MPAKT_TRY(need_int("writesInput", spec.writes_input));
    if (o.HasMember("params") && o["params"].IsObject()) {
      for (auto it = o["params"].MemberBegin(); it != o["params"].MemberEnd(); ++it) {
        if (!it->value.IsObject() || !it->value.HasMember("type") || !it->value["type"].IsString())
          return invalid("ops schema: op " + spec.name + " param " + it->name.GetString() + " lacks a type");
        auto p = parse_type(it->value["type"].GetString());
        if (!p) return invalid("ops schema: op " + spec.name + " param " + it->name.GetString() + " has unknown type");
        p->name = it->name.GetString();
        spec.params.push_back(std::move(*p));
      }
    }
    if (o.HasMember("features") && o["features"].IsArray())
      for (const auto& f : o["features"].GetArray())
        if (f.IsString()) spec.features.emplace_back(f.GetString());
    if (o.HasMember("addedIn") && o["addedIn"].IsString()) spec.added_in = o["addedIn"].GetString();
    if (o.HasMember("core") && o["core"].IsBool()) spec.core = o["core"].GetBool();

    canon += spec.name + "|" + std::to_string(spec.min_inputs) + "|" + std::to_string(spec.max_inputs) + "|";
    for (const auto& p : spec.params) canon += p.name + ":" + p.type_text + ",";
    canon += "|";
    for (const auto& f : spec.features) canon += f + ",";
    canon += "|" + spec.added_in + "|" + (spec.core ? "1" : "0") + "|" + std::to_string(spec.mutates_input) + "|" +
             std::to_string(spec.writes_input) + "\n";
    s.ops_.push_back(std::move(spec));
  }
  if (doc.HasMember("features") && doc["features"].IsObject())
    for (auto it = doc["features"].MemberBegin(); it != doc["features"].MemberEnd(); ++it)
      s.features_.emplace_back(it->name.GetString(), it->value.IsString() ? it->value.GetString() : "");
  for (const auto& [f, _] : s.features_) canon += "feature:" + f + "\n";
  std::sort(s.ops_.begin(), s.ops_.end(), [](const op_spec& a, const op_spec& b) { return a.name < b.name; });
  s.hash_ = fnv1a_hex(canon);

  // The served document: the schema as written, compact, with our hash.
  rapidjson::Document out;
  out.CopyFrom(doc, out.GetAllocator());
  if (out.HasMember("opsHash")) out["opsHash"].SetString(s.hash_.c_str(), rapidjson::SizeType(s.hash_.size()), out.GetAllocator());
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  out.Accept(w);
  s.document_.assign(buf.GetString(), buf.GetSize());
  return s;
}

const schema& schema::instance() {
  static const schema s = [] {
    auto r = schema::parse(embedded_ops_json());
    // The embedded schema is part of the build; a broken one is a build bug, caught by tests.
    return r ? std::move(r).value() : schema{};
  }();
  return s;
}

const op_spec* schema::find(std::string_view op) const {
  auto it = std::lower_bound(ops_.begin(), ops_.end(), op, [](const op_spec& s, std::string_view n) { return s.name < n; });
  return it != ops_.end() && it->name == op ? &*it : nullptr;
}

std::vector<std::string> schema::feature_names() const {
  std::vector<std::string> out;
  for (const auto& [f, _] : features_) out.push_back(f);
  return out;
}

}  // namespace mpakt
