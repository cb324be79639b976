#pragma once
/// The coordinator's stand-in for a volunteer with a data connection (actors/data_link.hpp):
/// it passes every message on to the volunteer's worker unchanged (replies go straight back to
/// the caller), except
/// - `tpiece`: while the connection is up, the bytes go to the data connection and the
///   volunteer gets `tpieceref` in the piece's place (its reply is the piece's reply); otherwise
///   the piece goes over the cluster link as it came;
/// - `status`: the volunteer's, with the connection's state and the bytes it carried.
///
/// The gate puts it between the volunteer and the pool (and the volunteer's checked worker,
/// when spot-checks are on, talks to it). Lifecycle: it ends when the volunteer's worker does
/// (monitor; the pool then sees it go as any lost worker), and closes the data connection when
/// it ends. Ending it does not end the volunteer: whoever ends a volunteer ends its own handle.
/// Threads: CAF's scheduler; it never blocks (the data connection's writer has a thread of its own).

#include <memory>

#include <caf/all.hpp>

#include "actors/data_link.hpp"
#include "actors/protocol.hpp"

namespace mpakt {

worker_actor spawn_data_relay(caf::actor_system& sys, worker_actor volunteer, std::shared_ptr<datalink::data_sender> link);

}  // namespace mpakt
