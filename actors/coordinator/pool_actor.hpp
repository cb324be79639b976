#pragma once
/// The pool/scheduler: the connected workers and their state (see pool_actor in
/// actors/protocol.hpp). Workers are added as they start (the embedded worker) or join
/// (remote volunteers, later); a worker that goes down is removed when its monitor fires.

#include "actors/protocol.hpp"

namespace mpakt {

pool_actor spawn_pool(caf::actor_system& sys);

}  // namespace mpakt
