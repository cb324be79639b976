#pragma once
/// The accounts actor: accounts_store behind a typed interface (accounts_actor in
/// actors/protocol.hpp). Spawned detached: SQLite calls block, and never on CAF's
/// scheduler threads. It owns the store for the life of the server.

#include <memory>

#include "actors/accounts/accounts_store.hpp"
#include "actors/protocol.hpp"

namespace mpakt {

struct accounts_config {
  /// `mpakt serve --dev`: sign-ups are approved at once (a one-person machine).
  bool approve_sign_ups = false;
};

accounts_actor spawn_accounts(caf::actor_system& sys, std::unique_ptr<accounts::accounts_store> store, accounts_config cfg);

}  // namespace mpakt
