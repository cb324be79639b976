#pragma once
/// The grid across hosts: volunteers' worker actors join the coordinator's pool over CAF's
/// middleman (CAF 0.17 io, one TCP connection per volunteer).
///
/// `mpakt serve --cluster-port N` publishes the gate actor (actors/coordinator/gate_actor.hpp),
/// nothing else; `mpakt worker --join HOST:PORT --token TOKEN` spawns a worker actor and
/// presents it with its join token; the gate hands it to the pool, which monitors it: a
/// volunteer that exits, crashes or stops answering heartbeats is removed within seconds
/// (docs/operators.md). Every message the worker speaks is announced (add_protocol_types) on
/// both sides, and weights travel as the same ≤ 16 MB pieces as in one process.

#include <chrono>
#include <cstdint>
#include <string>

#include "actors/cluster_guard.hpp"
#include "actors/cluster_tls.hpp"
#include "actors/protocol.hpp"
#include "runtime/status.hpp"

namespace mpakt {

/// Loads the middleman with the grid's heartbeat settings (each side sends a heartbeat every
/// second; a peer silent for five is declared dead). Call before creating the actor system.
void configure_cluster(caf::actor_system_config& cfg);

/// Publishes the gate: to CAF's middleman on loopback only (plain), and to volunteers on
/// `address:port` (0 = any free port) through `guard` (actors/cluster_guard.hpp: TLS with
/// `files`, every frame a volunteer sends looked at before CAF reads it); returns the port
/// volunteers join.
result<std::uint16_t> publish_gate(caf::actor_system& sys, const gate_actor& gate, const std::string& address,
                                   std::uint16_t port, cluster_guard& guard, const tls::link_files& files);

/// Connects to a published gate, retrying until `patience` has passed.
result<gate_actor> connect_gate(caf::actor_system& sys, const std::string& host, std::uint16_t port,
                                std::chrono::milliseconds patience);

/// "host:port" -> its parts; errors name the text.
result<std::pair<std::string, std::uint16_t>> parse_host_port(const std::string& text);

}  // namespace mpakt
