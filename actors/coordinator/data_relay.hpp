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
/// - `status`: the volunteer's, with the data connection's state and the bytes it carried.
///
/// Lifecycle: it ends when the volunteer's worker does (monitor; the pool then sees it go as
/// any lost worker), and closes the data connection when it ends. Ending it does not end the
/// volunteer: whoever ends a volunteer ends its own handle.
/// Threads: CAF's scheduler; it never blocks (the data connection's writer has a thread of its own).

#include <cstdint>
#include <functional>
#include <memory>

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

/// `link`: the volunteer's data connection, or null (weights over the cluster link).
worker_actor spawn_data_relay(caf::actor_system& sys, worker_actor volunteer, std::shared_ptr<datalink::data_sender> link,
                              listener_grant grant = {});

}  // namespace mpakt
