#include "actors/cluster.hpp"

#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <thread>

namespace mpakt {

void configure_cluster(caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::seconds(1)});
  cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::seconds(5)});
}

result<std::uint16_t> publish_gate(caf::actor_system& sys, const gate_actor& gate, const std::string& address,
                                   std::uint16_t port, cluster_guard& guard, const tls::link_files& files) {
  auto inner = caf::io::publish(gate, 0, "127.0.0.1", true);
  if (!inner) return make_error(errc::unavailable, "cannot publish the gate on loopback: " + sys.render(inner.error()));
  return guard.start(address, port, files, *inner, gate.id());
}

result<gate_actor> connect_gate(caf::actor_system& sys, const std::string& host, std::uint16_t port,
                                std::chrono::milliseconds patience) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  std::string last;
  for (;;) {
    auto gate = caf::openssl::remote_actor<gate_actor>(sys, host, port);
    if (gate) return *gate;
    last = sys.render(gate.error());
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return make_error(errc::unavailable, "cannot join the coordinator at " + host + ":" + std::to_string(port) + ": " + last);
}

result<std::pair<std::string, std::uint16_t>> parse_host_port(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    return invalid("\"" + text + "\" is not HOST:PORT");
  const std::string port_text = text.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(port_text.c_str(), &end, 10);
  if (*end != '\0' || port <= 0 || port > 65535) return invalid("\"" + port_text + "\" in " + text + " is not a port");
  return std::pair{text.substr(0, colon), std::uint16_t(port)};
}

}  // namespace mpakt
