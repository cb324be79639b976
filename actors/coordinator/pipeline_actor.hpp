#pragma once
/// A model spread over several workers, standing in for one worker.
///
/// When no single worker can hold a model, the load places it layer by layer over several
/// (runtime/stages.hpp: plan_spread). The coordinator then spawns a pipeline for it: an
/// actor speaking the worker protocol, so that sessions, compiled graphs and generation
/// treat the spread model as they treat a model on one worker. Behind that interface:
///
///   - a graph run is split into stages (runtime/stages.hpp: split_graph), each run on the
///     worker holding its weights, one after another; the values crossing from one stage to
///     a later one come back to the pipeline as base64 f32 and go out to the next stage as
///     dataB64 inputs, so the numbers are exactly those of one worker;
///   - a session has a part on every worker; each session tensor lives on the worker whose
///     steps read it (moved there once, the first time a graph reads it there; a retained value
///     stays where it was computed); a checkpoint gathers the parts, a restore deals them out;
///   - a compiled template is kept here and bound per call (bind_template), then run as above;
///     generation therefore runs the ordinary loop through the coordinator (workerLoop false).
///
/// Lifecycle: spawned by the coordinator after a spread load, dropped with the model
/// (dropmodel). When one of its workers is lost (partlost), sessions with tensors there are
/// lost until a checkpoint is restored; once the coordinator has fetched that worker's tensors
/// again onto another (place), the pipeline uses it in the lost one's stead. Runs on CAF's
/// scheduler, never blocking; the crossing values pass through it (the coordinator's process).

#include <string>
#include <vector>

#include "actors/coordinator/entities.hpp"
#include "actors/protocol.hpp"

namespace mpakt {

using place_atom = caf::atom_constant<caf::atom("place")>;
using partlost_atom = caf::atom_constant<caf::atom("partlost")>;

/// One worker's share of a spread model.
struct pipeline_part {
  worker_actor worker;
  std::string worker_id;
  std::vector<std::string> tensors;  ///< weight names
  std::uint64_t resident_bytes = 0;
};

using pipeline_actor = worker_actor::extend<
    /// The part at this index now lives on another worker (its tensors fetched again there).
    caf::replies_to<place_atom, std::uint32_t, worker_actor>::with<bool>,
    /// The worker of this part left the grid: sessions with tensors there are lost. With
    /// `false`, no other worker could take its tensors: the model must be loaded again.
    caf::reacts_to<partlost_atom, std::uint32_t, bool>>;

pipeline_actor spawn_pipeline(caf::actor_system& sys, std::string model_id, std::vector<pipeline_part> parts,
                              entity_timeouts t);

}  // namespace mpakt
