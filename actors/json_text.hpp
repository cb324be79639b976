#pragma once
/// Building small JSON texts (the API's response bodies) with a RapidJSON writer.

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <string>
#include <vector>

#include "runtime/utf8.hpp"

namespace mpakt {

using json_writer = rapidjson::Writer<rapidjson::StringBuffer>;

/// The text `f` writes: json([&](json_writer& w) { w.StartObject(); ... }).
template <class F>
std::string json(F&& f) {
  rapidjson::StringBuffer buf;
  json_writer w(buf);
  f(w);
  return std::string(buf.GetString(), buf.GetSize());
}

/// Writes `s` as a JSON string. Text that is not well-formed UTF-8 (a path or name from
/// outside that no JSON reader checked) is written repaired, so a body is always UTF-8.
inline void str(json_writer& w, const std::string& s) {
  if (utf8_invalid_at(s) == std::string_view::npos) return void(w.String(s.c_str(), rapidjson::SizeType(s.size())));
  const std::string fixed = utf8_repaired(s);
  w.String(fixed.c_str(), rapidjson::SizeType(fixed.size()));
}
inline void key(json_writer& w, const char* k) { w.Key(k); }
inline void kv(json_writer& w, const char* k, const std::string& v) {
  w.Key(k);
  str(w, v);
}
inline void strings(json_writer& w, const std::vector<std::string>& v) {
  w.StartArray();
  for (const auto& s : v) str(w, s);
  w.EndArray();
}

}  // namespace mpakt
