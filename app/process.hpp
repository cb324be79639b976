#pragma once
/// What the long-running commands (serve, worker) set up the same way: the stop signals and
/// the actor system's configuration.

#include <csignal>
#include <memory>

#include <caf/all.hpp>

#include "actors/cluster.hpp"
#include "actors/coordinator/load_job.hpp"
#include "actors/protocol.hpp"

namespace mpakt::app {

/// Blocks SIGINT and SIGTERM in this thread and every thread started after it (the actor
/// system's and Beast's inherit the mask), so the caller can sigwait for them.
inline sigset_t block_stop_signals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return stop_signals;
}

/// The actor system's configuration: every message type announced, one scheduler thread (it
/// carries messages; workers compute on their own threads), CAF's log quiet, and the
/// middleman loaded when the process talks to other hosts. The system keeps a reference to
/// `cfg`: it must outlive the system.
inline void configure_actor_system(caf::actor_system_config& cfg, bool cluster) {
  add_protocol_types(cfg);
  add_load_job_types(cfg);
  cfg.set("scheduler.max-threads", 1);
  // One scheduler thread that blocks when idle: work stealing would poll for work to steal
  // (50 µs sleeps, 10,000 wake-ups a second — a tenth of a core during every generation).
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("logger.verbosity", caf::atom("quiet"));
  if (cluster) configure_cluster(cfg);
}

}  // namespace mpakt::app
