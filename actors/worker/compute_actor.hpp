#pragma once
/// The compute side of a worker (internal to actors/worker): owns the tensor store, the
/// compiled plans, the backend and the worker-side decode loops, and runs every graph.
///
/// Lifecycle and threads: spawned detached (its own thread; kernels never run on CAF's
/// scheduler threads) by spawn_worker, linked to the worker's front, which passes it every
/// message below in the order the front received them (so a session's calls keep their
/// order). Nothing else talks to it except the receiver (a dropmodel after an aborted load)
/// and itself (genstep). A graph call carries the front's call number, under which
/// worker_shared::runs holds its run_control: the front may cancel it while it runs.

#include <cstdint>
#include <memory>
#include <string>

#include "actors/protocol.hpp"
#include "actors/worker/worker_shared.hpp"

namespace mpakt {

using compute_actor = caf::typed_actor<
    caf::replies_to<dropmodel_atom, std::string>::with<bool>,
    caf::replies_to<sopen_atom, std::string>::with<bool>,
    caf::replies_to<sclose_atom, std::string>::with<bool>,
    caf::replies_to<sinfo_atom, std::string>::with<session_info>,
    caf::replies_to<sdump_atom, std::string>::with<session_dump>,
    caf::replies_to<sload_atom, std::string, session_dump>::with<bool>,
    /// the call and the front's number for it (its entry in worker_shared::runs)
    caf::replies_to<run_atom, run_request, std::uint64_t>::with<run_reply>,
    caf::replies_to<compile_atom, compile_request, std::uint64_t>::with<compile_reply>,  // the front's number
    caf::replies_to<dropgraph_atom, std::string>::with<bool>,
    caf::replies_to<gencheck_atom, std::string, bool, bool>::with<std::int32_t>,
    caf::replies_to<genstart_atom, gen_request>::with<bool>,
    caf::reacts_to<genstep_atom>,
    caf::reacts_to<gencancel_atom, std::string>,
    caf::replies_to<tput_atom, tensor_upload>::with<bool>,
    caf::replies_to<tdrop_atom, std::string>::with<bool>,
    caf::replies_to<tdigest_atom, std::string, std::string, std::string>::with<std::string>>;

/// Spawns the compute side on its own thread, computing on `be`.
compute_actor spawn_compute(caf::actor_system& sys, std::shared_ptr<worker_shared> shared, std::shared_ptr<backend> be);

}  // namespace mpakt
