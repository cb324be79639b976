#pragma once
/// The coordinator's stand-in for a volunteer on another host: the gate puts it between the
/// volunteer and the pool (and the volunteer's checked worker, when spot-checks are on, talks
/// to it), so everything the coordinator sends the volunteer passes here. It passes every
/// message on to the volunteer's worker unchanged (replies go straight back to the caller),
/// except
/// - `genstart`: the generation's listener — the one actor of the coordinator the volunteer
///   sends messages to that are not replies — is first granted to the volunteer's connection
///   (`listener_grant`: the cluster port's front lets such messages through to it alone, and
///   forgets it when it ends);
/// - `tpiece`, with a data connection (actors/data_link.hpp): while the connection is up, the
///   bytes go to the data connection and the volunteer gets `tpieceref` in the piece's place
///   (its reply is the piece's reply); otherwise the piece goes over the cluster link as it came;
/// - `status`: the volunteer's, with the data connection's state and the bytes it carried;
/// - `run` (a graph call with a limit, not the pool's probe), `compile` and `genstart`, watched: its
///   worker stops a graph at the call's limit and answers so, and a generation's steps are
///   graphs under the coordinator's limit, so a volunteer that leaves a call unanswered, or a
///   generation without a token or its end, for that limit and `overdue_grace` more has stopped
///   answering — broken, cut off without its link noticing, or taking work while it answers
///   the pool's probes (which keeps it looking fast and being chosen). It is removed: its
///   worker ended (the pool, the recovery and the generations' replanning then go on as after
///   any lost volunteer), the call answered with an error saying so, the log saying why. Not a
///   quarantine: nothing says it lied, its token stays valid.
///
/// Lifecycle: it ends when the volunteer's worker does (monitor; the pool then sees it go as
/// any lost worker), and closes the data connection when it ends. Ending it does not end the
/// volunteer: whoever ends a volunteer ends its own handle.
/// Threads: CAF's scheduler; it never blocks (the data connection's writer has a thread of its own).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <caf/all.hpp>

#include "actors/data_link.hpp"
#include "actors/protocol.hpp"

namespace mpakt {

/// Who, besides the actors awaiting its replies, may hear from a volunteer: `allow(id)` before
/// a generation with listener `id` starts on it, `forget(id)` when that listener ends (the
/// cluster port's front, actors/cluster_guard.hpp). Empty: nothing to tell (one process).
struct listener_grant {
  std::function<void(std::uint64_t)> allow, forget;
};

/// How long past a call's limit (or the step limit, for a generation's next token) a volunteer
/// may take before it is removed.
inline constexpr std::chrono::seconds overdue_grace{15};

/// Volunteers removed by their relays, by token digest: each removal holds the token's joins
/// back for a while (a minute, doubling with each removal within a day, at most an hour), so
/// one that takes work and drops it cannot rejoin at once and be chosen again. Thread-safety:
/// every member from any thread (relays record, the gate asks).
class removal_registry {
 public:
  static constexpr std::chrono::seconds first_wait{60}, longest_wait{3600}, memory{86400};
  void removed(const std::string& digest, const std::string& why);
  /// How long the token's joins must still wait, and why it was last removed; nullopt: none.
  std::optional<std::pair<std::chrono::seconds, std::string>> waiting(const std::string& digest) const;

 private:
  struct entry {
    int count = 0;
    std::chrono::steady_clock::time_point last{}, until{};
    std::string why;
  };
  mutable std::mutex m_;
  std::map<std::string, entry> entries_;
};

/// Whom the relay watches: the volunteer's name (its token's, for the log), the coordinator's
/// graph limit, which a generation's steps run under (0: generations unwatched), and where a
/// removal is recorded (its token's digest; null: nowhere).
struct answer_watch {
  std::string name;
  std::chrono::milliseconds step_limit{0};
  std::string digest;
  std::shared_ptr<removal_registry> removals;
};

/// `link`: the volunteer's data connection, or null (weights over the cluster link).
worker_actor spawn_data_relay(caf::actor_system& sys, worker_actor volunteer, std::shared_ptr<datalink::data_sender> link,
                              listener_grant grant = {}, answer_watch watch = {});

}  // namespace mpakt
