/// Account and key replies as JSON (POST /api/accounts, login, keys, approval).

#include "http/api/render.hpp"

#include "actors/json_text.hpp"

namespace mpakt::http {

namespace {

void write_key(json_writer& w, const key_reply& k) {
  w.StartObject();
  if (!k.key.empty()) kv(w, "key", k.key);  // only when created: shown once
  kv(w, "keyId", k.key_id);
  kv(w, "label", k.label);
  kv(w, "createdAt", k.created_at);
  if (!k.last_used_at.empty()) kv(w, "lastUsedAt", k.last_used_at);
  kv(w, "state", k.state);
  w.EndObject();
}

}  // namespace

std::string render(const account_reply& r) {
  return json([&](json_writer& w) {
    w.StartObject();
    kv(w, "username", r.username);
    kv(w, "status", r.status);
    if (!r.created_at.empty()) kv(w, "createdAt", r.created_at);
    w.EndObject();
  });
}

std::string render(const login_reply& r) {
  return json([&](json_writer& w) {
    w.StartObject();
    kv(w, "token", r.token);
    kv(w, "username", r.username);
    w.EndObject();
  });
}

std::string render(const key_reply& r) {
  return json([&](json_writer& w) { write_key(w, r); });
}

std::string render(const keys_reply& r) {
  return json([&](json_writer& w) {
    w.StartObject();
    key(w, "keys");
    w.StartArray();
    for (const auto& k : r.keys) write_key(w, k);
    w.EndArray();
    w.EndObject();
  });
}

}  // namespace mpakt::http
