#pragma once
/// The coordinator (see coordinator_actor in actors/protocol.hpp): the directory of every
/// model, session, compiled graph and v2 tensor — who owns it, which worker holds it, and
/// the per-key limits — in front of the entity actors that do the work.
///
/// It holds no weights and no activations: loads stream through a load job to a worker,
/// graphs run on the worker that holds their session or weights. Runs on CAF's scheduler
/// (it never blocks); one instance per `mpakt serve`.

#include "actors/coordinator/entities.hpp"
#include "actors/coordinator/load_job.hpp"
#include "actors/coordinator/checked_worker.hpp"
#include "actors/protocol.hpp"

namespace mpakt {

struct coordinator_config {
  load_job_config load;
  entity_timeouts timeouts;
  int max_models_per_key = 4;
  int max_sessions_per_key = 16;
  int max_graphs_per_key = 32;
  /// Per key: the text of its compiled graphs, held here and by each worker that ran one
  /// (`serve --graph-budget`).
  std::uint64_t graph_budget_bytes = 256ull << 20;
  std::uint64_t v2_quota_bytes = 128'000'000;  ///< per key, v2 uploads only
  /// Per key: session checkpoints held on the coordinator (`serve --durable-budget`).
  std::uint64_t durable_budget_bytes = 1'000'000'000;
  /// Volunteers quarantined by spot-checks (the gate's registry), listed in the status.
  std::shared_ptr<quarantine_registry> quarantine;
};

coordinator_actor spawn_coordinator(caf::actor_system& sys, coordinator_config cfg, pool_actor pool);

}  // namespace mpakt
