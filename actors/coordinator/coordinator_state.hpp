#pragma once
/// The coordinator's directory (internal to actors/coordinator): every model, session,
/// compiled graph, v2 tensor and checkpoint it knows, who owns it, where it is, and what a
/// recovery from a lost worker is doing. Owned by the coordinator actor (coordinator_actor.cpp);
/// the recovery functions (recovery.hpp) work on it from the same actor.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/coordinator/pipeline_actor.hpp"
#include "actors/protocol.hpp"
#include "runtime/status.hpp"

namespace mpakt {

struct owned {
  std::string account;
  std::string key_id;
  std::string created_at;
};

struct model_entry : owned {
  model_actor actor;
  worker_actor worker;
  std::string source;
  std::string quantize;
  std::string kv_dtype = "f32";  ///< KV caches of the sessions the server opens on it (chat)
  /// The hub commit the load read (empty when the host did not say): re-fetched from it.
  std::string commit;
  /// The caller's own hub token, if the load had one: held in memory to fetch a lost
  /// worker's share again; never logged, listed or written to disk.
  std::string token;
  std::uint64_t published_bytes = 0;
  std::uint64_t resident_bytes = 0;
  std::size_t tensors = 0;
  /// The load took the whole checkpoint (no include, exclude or names): chat reuses only these.
  bool whole = true;
  bool replacing = false;  ///< its worker left; its tensors are being fetched again
  std::string worker_id;   ///< where it is (placement)
  /// A model spread over several workers: `worker` is its pipeline (standing in for one
  /// worker), `parts` each worker's share.
  pipeline_actor pipeline;
  std::vector<pipeline_part> parts;
  /// config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja once read (chat).
  std::vector<std::string> files;
};

/// Calls journaled per session at most; past it the session can no longer be restored
/// automatically (an explicit restore still works).
constexpr std::size_t max_journal = 4096;

/// Why a journal stopped when the key's checkpoints and journals reached its durable budget.
inline std::string journal_over_budget(std::uint64_t budget) {
  return "the calls since the checkpoint, kept with this key's other checkpoints and calls, would pass its durable "
         "budget of " + std::to_string(budget) + " bytes";
}

struct session_entry : owned {
  session_actor actor;
  worker_actor worker;
  std::string model_id;
  std::string label;
  /// Calls made on it since its checkpoint (a compiled one carries its graph_id, an inline one
  /// its graph), replayed after an automatic restore (decisions.md: a bounded journal).
  /// Changed only through journal_add and journal_reset, which keep journal_bytes. Shared and
  /// unchanged once kept: a replay copies a big one for the worker on a helper thread.
  std::vector<std::shared_ptr<const run_request>> journal;
  /// The journal's graph and binding text: it counts against the key's durable budget with
  /// the key's checkpoints.
  std::uint64_t journal_bytes = 0;
  void journal_add(std::shared_ptr<const run_request> r) {
    journal_bytes += journal_cost(*r);
    journal.push_back(std::move(r));
  }
  void journal_reset() {
    journal.clear();
    journal_bytes = 0;
    journal_broken.clear();
  }
  static std::uint64_t journal_cost(const run_request& r) { return r.graph_json.size() + r.bind_json.size(); }
  /// Something changed the session that the journal cannot replay (a multi-session graph,
  /// too many calls) since its checkpoint.
  std::string journal_broken;
  /// Generations running on it: their fed tokens reach the journal when they report.
  int generating = 0;
  /// A restore waiting for those reports (the session's worker was lost meanwhile).
  std::function<void()> after_reports;
  /// An automatic restore is putting its checkpoint back and replaying its journal: graph and
  /// generate calls on it wait (released with the rest when the recovery ends).
  bool restoring = false;
  /// Set when an automatic restore put the session back at its checkpoint but could not
  /// replay the calls made since (journal_broken, or a replay that failed): the next graph or
  /// generate call on it fails with this sentence, once, so the client learns which step its
  /// caches are at (decisions.md, Durability). Cleared by that call or an explicit restore.
  std::string restored_note;

  /// The restore note as a 409, once; no error when there is none.
  ::mpakt::status take_restored_note() {
    if (restored_note.empty()) return {};
    auto note = std::move(restored_note);
    restored_note.clear();
    return make_error(errc::conflict, std::move(note));
  }
};

struct graph_entry : owned {
  graph_actor actor;
  std::string label;
  std::uint32_t steps = 0;
  std::vector<std::string> bindings;
  std::uint64_t body_bytes = 0;
  std::uint64_t per_call_bytes = 0;
  std::uint64_t text_bytes = 0;  ///< its graph text (against the key's graph budget)
  std::set<std::string> models;  ///< models the template reads
  worker_actor worker;           ///< where it was validated
};

/// A session checkpoint held here (the one bulk copy the coordinator keeps on purpose). Shared
/// and never changed: a restore copies it for the worker on a helper thread, which the pointer
/// keeps it alive for even if the session is deleted meanwhile.
struct checkpoint_entry {
  std::string key_id;
  std::shared_ptr<const session_dump> dump;
  std::uint64_t steps = 0;
};

struct v2_entry : owned {
  worker_actor worker;
  std::uint64_t bytes = 0;
};

/// A load in progress (a client's, or a lost worker's model placed again), for the console.
struct load_entry {
  std::string source;
  std::string account;
  bool recovery = false;
  std::uint64_t started_unix_ms = 0;
  std::shared_ptr<load_progress> progress;  ///< written by the job's thread
};

struct coordinator_state {
  coordinator_config cfg;
  pool_actor pool;
  std::map<std::string, model_entry> models;
  std::map<std::string, session_entry> sessions;
  std::map<std::string, graph_entry> graphs;
  std::map<std::string, v2_entry> tensors;
  /// v2 upload bytes per key id that passed the quota check and are on their way to a
  /// worker: counted against the quota too, so concurrent uploads cannot both pass it.
  std::map<std::string, std::uint64_t> v2_pending;
  std::map<std::string, checkpoint_entry> checkpoints;  ///< by session id
  /// load-response tensorIds: id -> (model, weight name)
  std::map<std::string, std::pair<std::string, std::string>> weight_ids;
  std::map<std::string, int> pending_loads;  ///< per key
  std::map<std::string, load_entry> loads;   ///< by model id, while they run
  /// Workers holding something here (monitored), and those that have since left the grid.
  std::set<caf::actor_addr> watched, lost;
  /// Lost workers whose models and checkpointed sessions are being placed again; graph and
  /// generate requests wait in `waiting` until none is left, then run as if sent now.
  std::set<caf::actor_addr> recovering;
  std::vector<std::function<void()>> waiting;
  /// Graph calls in flight per worker: what to do if that worker is lost before it answers
  /// (a request to a vanished remote actor may otherwise wait for its full timeout).
  std::map<caf::actor_addr, std::map<std::uint64_t, std::function<void()>>> inflight;
  std::uint64_t next_call = 0;
  /// Graph calls running for an HTTP request actor: where, and the run id the worker knows
  /// them by (a client that goes away cancels its call there).
  std::map<caf::actor_addr, std::pair<worker_actor, std::string>> running;
  std::uint64_t next_run = 0;

  // ---- the console (actors/coordinator/console.cpp)
  describe_tally tally;
  /// The last grid events, numbered; and who hears of new ones (monitored: a listener that
  /// ends is dropped).
  event_ring events;
  std::vector<grid_listener> listeners;
  /// Every worker in the pool, by its handle's address: its id and its handle (from the
  /// pool's joined events; dropped with its lost event).
  std::map<caf::actor_addr, std::pair<std::string, describable>> workers;
  /// Lost workers' ids, for the recovered event that ends their recovery.
  std::map<caf::actor_addr, std::string> lost_ids;
  /// Generations running now (from their started events until ended): the session each
  /// runs on, and its actor.
  std::map<std::string, std::pair<std::string, describable>> generations;

  /// Numbers an event, keeps it and tells every listener.
  void emit(grid_event e) {
    const grid_event& kept = events.push(std::move(e));
    for (const auto& l : listeners) caf::anon_send(l, gridevent_atom::value, kept, describable());
  }
  /// A worker's id by its handle ("" when the pool has not named it); a pipeline is named
  /// after its model.
  std::string worker_id_of(const worker_actor& w) const {
    if (!w) return {};
    if (auto it = workers.find(w.address()); it != workers.end()) return it->second.first;
    for (const auto& [id, m] : models)
      if (m.pipeline && m.pipeline.address() == w.address()) return "pipeline of " + id;
    return {};
  }

  /// Monitors a worker once something is placed on it, so its loss is known at once (a
  /// pipeline is an actor here standing in for its parts, which are watched themselves).
  void watch(coordinator_actor::pointer self, const worker_actor& w) {
    if (w && !is_pipeline(w) && watched.insert(w.address()).second) self->monitor(w);
  }
  /// Whether `w` is the pipeline of a spread model.
  bool is_pipeline(const worker_actor& w) const {
    return w && std::any_of(models.begin(), models.end(),
                            [&](const auto& m) { return m.second.pipeline && m.second.pipeline.address() == w.address(); });
  }
  bool is_lost(const worker_actor& w) const { return w && lost.count(w.address()) > 0; }
  /// Lost, and what it held is still being placed again: calls touching it wait.
  bool is_recovering(const worker_actor& w) const { return w && recovering.count(w.address()) > 0; }

  template <class Map>
  int count_for_key(const Map& m, const std::string& key_id) const {
    return int(std::count_if(m.begin(), m.end(), [&](const auto& kv) { return kv.second.key_id == key_id; }));
  }
  /// What the coordinator keeps for a key's sessions' durability — its checkpoints and their
  /// journals — against cfg.durable_budget_bytes; `except` (a session id) left out.
  std::uint64_t durable_held(const std::string& key_id, const std::string& except = {}) const {
    std::uint64_t held = 0;
    for (const auto& [sid, c] : checkpoints)
      if (c.key_id == key_id && sid != except) held += c.dump->bytes;
    for (const auto& [sid, e] : sessions)
      if (e.key_id == key_id && sid != except) held += e.journal_bytes;
    return held;
  }
  /// The entry if it exists and belongs to the caller's account; another account's id is
  /// indistinguishable from an unknown one (decisions.md).
  template <class Map>
  auto* find(Map& m, const std::string& id, const caller& who) {
    auto it = m.find(id);
    return it != m.end() && it->second.account == who.account ? &it->second : nullptr;
  }
};

using coordinator_pointer = coordinator_actor::stateful_pointer<coordinator_state>;

}  // namespace mpakt
