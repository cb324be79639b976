#pragma once
/// The cluster port's gate (gate_actor in actors/protocol.hpp): the only actor `mpakt serve
/// --cluster-port` publishes. A volunteer joins by presenting a join token (`mpakt admin
/// volunteer-token`) with its worker actor; the gate checks the token against the accounts
/// store and only then hands the worker to the pool (with the token's memory cap). Refusals
/// are logged and counted per client address; past `max_failures` in `failure_window` an
/// address is refused without a check until the window has passed. Every 2 s the gate checks
/// the tokens of the volunteers it admitted again: a revoked, replaced or expired token gets
/// its volunteer's worker actor killed, which the pool and coordinator see as a lost worker
/// (its sessions are restored elsewhere) and the volunteer as a refusal (exit status 4).
///
/// Detached: it owns its own connection to the accounts file (SQLite's locking shares it with
/// the accounts actor and `mpakt admin`).

#include <chrono>
#include <memory>
#include <string>

#include "actors/accounts/accounts_store.hpp"
#include "actors/cluster_guard.hpp"
#include "actors/coordinator/checked_worker.hpp"
#include "actors/coordinator/data_relay.hpp"
#include "actors/data_link.hpp"
#include "actors/protocol.hpp"

namespace mpakt {

struct gate_config {
  int max_failures = 10;                             ///< failed joins per address in the window
  std::chrono::seconds failure_window{60};
  std::chrono::milliseconds recheck_every{2000};
  /// Spot-checks: each admitted volunteer goes to the pool behind a checked worker
  /// (actors/coordinator/checked_worker.hpp), unless `verify` is off.
  bool verify = true;
  verify_config checks;
  /// Quarantined volunteers (shown by the coordinator's status); their tokens are refused.
  std::shared_ptr<quarantine_registry> quarantine = std::make_shared<quarantine_registry>();
  /// The data port (actors/data_link.hpp): each admitted volunteer is offered a data connection
  /// and reached through a relay (actors/coordinator/data_relay.hpp). Null: weights travel over
  /// the cluster link.
  std::shared_ptr<datalink::data_server> data;
  /// The cluster port's front (actors/cluster_guard.hpp): says where a volunteer connected
  /// from, and hears of each admission (its frames are then no longer held to a joiner's).
  /// Null: joins come straight through CAF's middleman (tests in one process).
  std::shared_ptr<cluster_guard> guard;
  /// The coordinator's graph limit (--graph-timeout-ms): a volunteer that answers a call, or
  /// sends its generation's next token, later than that and the relay's grace is removed
  /// (actors/coordinator/data_relay.hpp). 0: not watched.
  std::chrono::milliseconds step_limit{0};
  /// Volunteers their relays removed: a token's joins wait a while after each removal.
  std::shared_ptr<removal_registry> removals = std::make_shared<removal_registry>();
};

gate_actor spawn_gate(caf::actor_system& sys, pool_actor pool, std::unique_ptr<accounts::accounts_store> store,
                      gate_config cfg = {});

}  // namespace mpakt
