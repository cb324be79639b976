#include "actors/accounts/accounts_actor.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "actors/errors.hpp"
#include "actors/json_text.hpp"

namespace mpakt {

namespace {

using writer = json_writer;

void write_key(writer& w, const accounts::key_info& k) {
  w.StartObject();
  if (!k.key.empty()) kv(w, "key", k.key);
  kv(w, "keyId", k.key_id);
  kv(w, "label", k.label);
  kv(w, "createdAt", k.created_at);
  if (!k.last_used_at.empty()) kv(w, "lastUsedAt", k.last_used_at);
  kv(w, "state", k.state);
  w.EndObject();
}

struct accounts_state {
  std::unique_ptr<accounts::accounts_store> store;
  accounts_config cfg;
  describe_tally tally;
};

}  // namespace

accounts_actor spawn_accounts(caf::actor_system& sys, std::unique_ptr<accounts::accounts_store> store, accounts_config cfg) {
  auto shared = std::make_shared<std::unique_ptr<accounts::accounts_store>>(std::move(store));
  return sys.spawn<caf::detached>([shared, cfg](accounts_actor::stateful_pointer<accounts_state> self) -> accounts_actor::behavior_type {
    self->state.store = std::move(*shared);
    self->state.cfg = cfg;
    auto& st = *self->state.store;
    // (an error answered is kept for describe: the last few, by message)
    auto refuse = [self](const error& e) {
      self->state.tally.failed(e.message);
      return to_caf(e);
    };
    return {
        [=](describe_atom) {
          actor_snapshot s;
          s.kind = "accounts";
          s.id = "accounts";
          s.text("store", "sqlite");
          s.number("approveSignUps", self->state.cfg.approve_sign_ups ? 1 : 0);
          self->state.tally.count();
          self->state.tally.fill(s, self->mailbox().size());
          return s;
        },
        [=, &st](signup_atom, const std::string& user, const std::string& password) -> caf::result<std::string> {
          self->state.tally.count();
          auto a = st.sign_up(user, password, self->state.cfg.approve_sign_ups);
          if (!a) return refuse(a.err());
          return json([&](writer& w) {
            w.StartObject();
            kv(w, "username", a->username);
            kv(w, "status", a->status);
            kv(w, "createdAt", a->created_at);
            w.EndObject();
          });
        },
        [=, &st](login_atom, const std::string& user, const std::string& password) -> caf::result<std::string> {
          self->state.tally.count();
          auto token = st.login(user, password);
          if (!token) return refuse(token.err());
          return json([&](writer& w) {
            w.StartObject();
            kv(w, "token", *token);
            kv(w, "username", user);
            w.EndObject();
          });
        },
        [=, &st](mkkey_atom, const std::string& token, const std::string& label) -> caf::result<std::string> {
          self->state.tally.count();
          auto k = st.create_key(token, label);
          if (!k) return refuse(k.err());
          return json([&](writer& w) { write_key(w, *k); });
        },
        [=, &st](keys_atom, const std::string& token) -> caf::result<std::string> {
          self->state.tally.count();
          auto ks = st.list_keys(token);
          if (!ks) return refuse(ks.err());
          return json([&](writer& w) {
            w.StartObject();
            w.Key("keys");
            w.StartArray();
            for (const auto& k : *ks) write_key(w, k);
            w.EndArray();
            w.EndObject();
          });
        },
        [=, &st](rmkey_atom, const std::string& token, const std::string& key_id) -> caf::result<std::string> {
          self->state.tally.count();
          if (auto s = st.delete_key(token, key_id); !s) return refuse(s.err());
          return json([&](writer& w) {
            w.StartObject();
            w.Key("deleted");
            w.Bool(true);
            kv(w, "keyId", key_id);
            w.EndObject();
          });
        },
        [=, &st](checkkey_atom, const std::string& key) -> caf::result<caller, bool> {
          self->state.tally.count();
          auto id = st.check_key(key);
          if (!id) return refuse(id.err());
          return {caller{id->username, id->key_id}, id->admin};
        },
        [=, &st](approve_atom, const std::string& user) -> caf::result<std::string> {
          self->state.tally.count();
          if (auto s = st.approve(user); !s) return refuse(s.err());
          return json([&](writer& w) {
            w.StartObject();
            kv(w, "username", user);
            kv(w, "status", "approved");
            w.EndObject();
          });
        },
    };
  });
}

}  // namespace mpakt
