#pragma once
/// The ordinary decode loop: one compiled run per pass through the session's actor, run in the
/// coordinator's process, for a generation whose session's worker cannot run the loop itself (a
/// model spread over several workers) or when a client asks for `workerLoop: false`.
///
/// It speaks to its listener exactly as the worker-side loop does (gentoken per token, one
/// gendone), so generate and chat consume both the same way; like the worker it takes genstart
/// and gencancel. It drafts and verifies with speculative decoding when the plan has verify
/// graphs. What it fed reaches the coordinator's journal (a checkpointed session's replay) when
/// it ends; when a pass fails because a worker behind the session left the grid (errc
/// unavailable), it reports what it fed, asks the coordinator for the session again (replan,
/// which waits for the recovery) and sends the pass again; twice without a token in between
/// ends it with the error.
///
/// Lifecycle: spawned per generation; quits after its gendone (or a gencancel).

#include "actors/protocol.hpp"

namespace mpakt {

/// What runs a generation's loop: a worker (the worker-side loop) or a gen_loop.
using gen_runner = caf::typed_actor<caf::replies_to<genstart_atom, gen_request>::with<bool>,
                                    caf::reacts_to<gencancel_atom, std::string>>;

/// A loop for `plan` (its session and graph actors, verify draft lengths); it starts on genstart.
gen_runner spawn_gen_loop(caf::actor_system& sys, gen_plan plan, coordinator_actor coordinator, caller who);

/// The plan's runner: its worker for a worker-side loop, else a new gen_loop.
gen_runner runner_for(caf::actor_system& sys, const gen_plan& plan, coordinator_actor coordinator, caller who);

}  // namespace mpakt
