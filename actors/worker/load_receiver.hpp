#pragma once
/// The receiving side of a worker (internal to actors/worker): builds the tensors of a load
/// from their published pieces (converting or quantizing as they arrive) and leaves each
/// finished one in worker_shared::inbox, from where the compute side adopts it before its
/// next message. So a load goes on while the compute side runs a long graph.
///
/// Lifecycle and threads: spawned detached (converting a 16 MB piece takes milliseconds,
/// which must not hold up the front or CAF's scheduler) by spawn_worker, linked to the front,
/// which passes it tbegin, tpiece, tend and tabort in order. It draws each tensor's bytes from
/// the model's reservation (worker_shared::reserved) when the load made one.
///
/// Ranges the worker reads itself (tfetch) are waited for without blocking: behind a range
/// still being read, pieces, ends, digests and later ranges wait in order (a tensor's bytes
/// are added in order, and it ends after all of them), while tbegin runs at once — so the
/// tensors of the next ranges have their destinations, and those ranges are read on the
/// fetcher's other connections, while this one is still arriving.

#include <memory>
#include <string>

#include "actors/protocol.hpp"
#include "actors/worker/compute_actor.hpp"
#include "actors/worker/worker_shared.hpp"

namespace mpakt {

using tfetched_atom = caf::atom_constant<caf::atom("tfetched")>;

using load_receiver_actor = caf::typed_actor<
    caf::replies_to<tbegin_atom, tensor_begin_request>::with<bool>,
    caf::replies_to<tpiece_atom, tensor_piece>::with<std::uint64_t>,
    /// a piece whose bytes came on the data connection (worker_config::pieces)
    caf::replies_to<tpieceref_atom, tensor_piece_ref>::with<std::uint64_t>,
    /// opens the data connection the coordinator offers (worker_config::open_data_link)
    caf::replies_to<dlink_atom, std::uint16_t, std::string>::with<bool>,
    /// a file the coordinator would have the worker read itself (worker_config::fetcher), and
    /// one of its ranges, started by the front under that number, in the place of pieces
    caf::replies_to<tprobe_atom, std::string, std::uint64_t, std::string>::with<bool>,
    caf::replies_to<tfetch_atom, tensor_fetch, std::uint64_t>::with<tensor_fetch_reply>,
    /// (from the fetcher's thread) the range of that number is over: `take` it
    caf::reacts_to<tfetched_atom, std::uint64_t>,
    caf::replies_to<tend_atom, std::string, std::string>::with<std::uint64_t>,
    /// drops the model's tensors in progress and waiting, and has the compute side drop the
    /// ones it adopted
    caf::replies_to<tabort_atom, std::string>::with<bool>,
    /// the model was dropped: forget its tensors in progress and waiting
    caf::reacts_to<dropmodel_atom, std::string>,
    /// a weight's digest (worker_actor): passed to the compute side after every tensor ended
    /// before it, so a weight just finished is found there
    caf::replies_to<tdigest_atom, std::string, std::string, std::string>::with<std::string>>;

load_receiver_actor spawn_load_receiver(caf::actor_system& sys, std::shared_ptr<worker_shared> shared, compute_actor compute);

}  // namespace mpakt
