#include "http/api/console.hpp"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>

#include "actors/json_text.hpp"

namespace mpakt::http {

std::string iso_time(std::uint64_t unix_ms) {
  const std::time_t t = std::time_t(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, unsigned(unix_ms % 1000));
  return buf;
}

namespace {

void number(json_writer& w, double v) {
  if (!std::isfinite(v)) return void(w.Null());
  if (v == std::floor(v) && std::fabs(v) < 9.0e15) return void(w.Int64(static_cast<std::int64_t>(v)));
  w.Double(v);
}

void snapshot(json_writer& w, const actor_snapshot& a) {
  w.StartObject();
  kv(w, "kind", a.kind);
  kv(w, "id", a.id);
  key(w, "links");
  strings(w, a.links);
  key(w, "state");
  w.StartObject();
  std::set<std::string> seen;
  for (const auto& [name, v] : a.numbers)
    if (seen.insert(name).second) {
      w.Key(name.c_str(), rapidjson::SizeType(name.size()));
      number(w, v);
    }
  for (const auto& [name, v] : a.texts)
    if (seen.insert(name).second) {
      w.Key(name.c_str(), rapidjson::SizeType(name.size()));
      str(w, v);
    }
  w.EndObject();
  key(w, "mailbox");
  w.Uint64(a.mailbox);
  key(w, "messages");
  w.Uint64(a.messages);
  key(w, "errors");
  strings(w, a.errors);
  key(w, "answered");
  w.Bool(a.answered);
  w.EndObject();
}

}  // namespace

std::string actors_json(std::uint64_t at_ms, const std::vector<actor_snapshot>& actors) {
  return json([&](json_writer& w) {
    w.StartObject();
    kv(w, "at", iso_time(at_ms));
    key(w, "atMs");
    w.Uint64(at_ms);
    key(w, "actors");
    w.StartArray();
    for (const auto& a : actors) snapshot(w, a);
    w.EndArray();
    w.EndObject();
  });
}

std::string event_json(const grid_event& e) {
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "seq");
    w.Uint64(e.seq);
    kv(w, "at", iso_time(e.at_ms));
    kv(w, "what", e.what);
    kv(w, "kind", e.kind);
    kv(w, "id", e.id);
    kv(w, "detail", e.detail);
    w.EndObject();
  });
}

}  // namespace mpakt::http
