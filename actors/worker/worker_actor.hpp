#pragma once
/// The worker actor: holds tensors and runs graphs on a backend (see worker_actor in
/// actors/protocol.hpp for its messages).
///
/// Lifecycle: spawned detached (its own thread: kernels never run on CAF's scheduler
/// threads) by `mpakt serve` (the embedded worker) or `mpakt worker`; lives until the
/// system shuts down. All state is owned by the actor; nothing is shared.

#include <cstdint>
#include <memory>
#include <string>

#include "actors/protocol.hpp"
#include "backends/backend.hpp"

namespace mpakt {

struct worker_config {
  std::string worker_id = "w_local";
  /// Memory this worker offers the grid (resident bytes).
  std::uint64_t memory_bytes = std::uint64_t(8) << 30;
  /// Run only the reference kernels (debugging, tests).
  bool reference_only = false;
  /// Behave like a worker that predates packed weights and quantize-on-load: widens bf16/f16
  /// to f32 on load and never quantizes (tests of the pool's least-capable planning).
  bool legacy = false;
  /// Ops and features this worker leaves out (behaving like an older volunteer; tests of
  /// routing by capability).
  std::vector<std::string> lacks;
  /// Answers every graph call this many milliseconds late, as a volunteer on a slow machine or
  /// a long link would (tests and demonstrations of ranking by measured time).
  int delay_ms = 0;
  /// What it computes on: a GPU backend chosen by the program (`mpakt worker` picks CUDA where
  /// a usable GPU exists), which falls back to the CPU reference kernels for any step its
  /// device path lacks; null = the CPU backend.
  std::shared_ptr<backend> device;
};

/// Spawns a worker on its own thread.
worker_actor spawn_worker(caf::actor_system& sys, worker_config cfg);

}  // namespace mpakt
