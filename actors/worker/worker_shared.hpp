#pragma once
/// What the three actors of one worker share (internal to actors/worker): the memory ledger,
/// weights received but not yet in the tensor store, the graph calls in flight with their
/// run controls, and what the compute side is doing now.
///
/// The front (worker_actor.cpp) answers status, reserve and runcancel from this at once; the
/// receiver (load_receiver.cpp) builds arriving tensors and leaves them in `inbox`; the compute
/// side (compute_actor.cpp) owns the tensor store, adopts the inbox before each message and
/// publishes what it holds after it.
///
/// Thread-safety: every field under `m`, except `progress`, which the computing thread
/// writes and the front reads (an atomic). Lifecycle: made by spawn_worker, held by the three
/// actors until the last quits.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/worker/worker_actor.hpp"
#include "runtime/executor.hpp"
#include "runtime/tensor.hpp"

namespace mpakt {

struct worker_shared {
  explicit worker_shared(worker_config c) : cfg(std::move(c)) {}

  const worker_config cfg;
  std::vector<std::string> features;  ///< the backend's, less those it leaves out (set once at spawn)
  std::string backend_name;           ///< set once at spawn
  std::vector<std::string> host_ops;  ///< the backend's declared fallbacks (set once at spawn)
  bool lanes = false;                 ///< q8/q4 matrices held in lanes (backend::holds_in_lanes; set once at spawn)

  std::mutex m;

  // ---- memory, resident bytes
  std::uint64_t held = 0;     ///< in the tensor store (the compute side sets it)
  std::uint64_t loading = 0;  ///< tensors being received
  std::uint64_t arrived = 0;  ///< received, waiting in `inbox`
  /// Held for loads that passed their capacity check, per model, less what their tensors have
  /// drawn since (tbegin); released when the load ends.
  std::map<std::string, std::uint64_t> reserved;

  /// Free memory: what is not held, being received, waiting or reserved. Call under `m`.
  std::uint64_t free_locked() const {
    std::uint64_t used = held + loading + arrived;
    for (const auto& [_, r] : reserved) used += r;
    return cfg.memory_bytes > used ? cfg.memory_bytes - used : 0;
  }
  std::uint64_t free() {
    std::lock_guard<std::mutex> lock(m);
    return free_locked();
  }

  /// A finished weight on its way from the receiver to the tensor store.
  struct arrival {
    std::string model;
    std::string name;
    tensor t;
  };
  std::vector<arrival> inbox;

  // ---- graph calls passed to the compute side and not yet answered
  struct run_entry {
    std::string run_id;
    std::shared_ptr<run_control> control;
    std::uint64_t timeout_ms = 0;
    std::chrono::steady_clock::time_point received;
  };
  std::map<std::uint64_t, run_entry> runs;  ///< by the front's call number
  /// Big graphs (inline calls, templates) the front had parsed on a helper thread, by the
  /// front's call number, for the compute side to take instead of parsing them on its thread.
  std::map<std::uint64_t, std::shared_ptr<result<graph_decl>>> parsed;
  /// The parsed graph of call `number`, if the front made one (taken: at most once).
  std::shared_ptr<result<graph_decl>> take_parsed(std::uint64_t number) {
    std::lock_guard<std::mutex> lock(m);
    auto it = parsed.find(number);
    if (it == parsed.end()) return nullptr;
    auto p = std::move(it->second);
    parsed.erase(it);
    return p;
  }
  std::uint64_t next_run = 0;
  /// Run ids cancelled lately, so a cancel that overtakes its call (the call was still being
  /// compiled elsewhere) still stops it; the last 64.
  std::deque<std::string> cancelled_ids;

  // ---- what the compute side is doing
  struct busy_state {
    bool on = false;
    std::chrono::steady_clock::time_point since;
    std::uint64_t since_unix_ms = 0;
    std::string graph;    ///< compiled graph id, "inline", or "compile <id>"
    std::string session;
    std::uint32_t steps = 0;
  };
  busy_state busy;
  std::atomic<std::uint32_t> progress{0};  ///< steps done by the run in progress
  std::uint32_t generations = 0;           ///< worker-side decode loops running
};

}  // namespace mpakt
