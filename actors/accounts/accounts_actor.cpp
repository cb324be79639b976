#include "actors/accounts/accounts_actor.hpp"

#include "actors/errors.hpp"

namespace mpakt {

namespace {

key_reply reply_of(const accounts::key_info& k) {
  return key_reply{k.key, k.key_id, k.label, k.created_at, k.last_used_at, k.state};
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
        [=, &st](signup_atom, const std::string& user, const std::string& password) -> caf::result<account_reply> {
          self->state.tally.count();
          auto a = st.sign_up(user, password, self->state.cfg.approve_sign_ups);
          if (!a) return refuse(a.err());
          return account_reply{a->username, a->status, a->created_at};
        },
        [=, &st](login_atom, const std::string& user, const std::string& password) -> caf::result<login_reply> {
          self->state.tally.count();
          auto token = st.login(user, password);
          if (!token) return refuse(token.err());
          return login_reply{*token, user};
        },
        [=, &st](mkkey_atom, const std::string& token, const std::string& label) -> caf::result<key_reply> {
          self->state.tally.count();
          auto k = st.create_key(token, label);
          if (!k) return refuse(k.err());
          return reply_of(*k);
        },
        [=, &st](keys_atom, const std::string& token) -> caf::result<keys_reply> {
          self->state.tally.count();
          auto ks = st.list_keys(token);
          if (!ks) return refuse(ks.err());
          keys_reply r;
          for (const auto& k : *ks) r.keys.push_back(reply_of(k));
          return r;
        },
        [=, &st](rmkey_atom, const std::string& token, const std::string& key_id) -> caf::result<deleted_reply> {
          self->state.tally.count();
          if (auto s = st.delete_key(token, key_id); !s) return refuse(s.err());
          return deleted_reply{"key", key_id};
        },
        [=, &st](checkkey_atom, const std::string& key) -> caf::result<caller, bool> {
          self->state.tally.count();
          auto id = st.check_key(key);
          if (!id) return refuse(id.err());
          return {caller{id->username, id->key_id, {}}, id->admin};
        },
        [=, &st](approve_atom, const std::string& user) -> caf::result<account_reply> {
          self->state.tally.count();
          if (auto s = st.approve(user); !s) return refuse(s.err());
          return account_reply{user, "approved", ""};
        },
    };
  });
}

}  // namespace mpakt
