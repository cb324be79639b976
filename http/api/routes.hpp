#pragma once
/// The v3 API's routes: HTTP requests → typed requests to the coordinator's actors →
/// HTTP responses. Knows the API's paths, keys and JSON error shape, not tensors.
///
/// Every answer comes from an actor callback; nothing here blocks an I/O thread. Each
/// request gets a short-lived actor that checks the key and forwards the call.

#include <chrono>
#include <string>

#include "actors/protocol.hpp"
#include "http/api/limits.hpp"
#include "http/server.hpp"

namespace mpakt::http {

struct api_config {
  /// The plain-text API reference served at /llms.txt.
  std::string llms_txt;
  /// The chat page's folder (web/), served at /; empty = none.
  std::string web_dir;
  std::chrono::milliseconds request_timeout{5 * 60 * 1000 + 10 * 1000};
  /// Failed-login and per-key generation limits (serve flags; docs/operators.md).
  abuse_config abuse;
  /// GET /metrics without a key (`mpakt serve --metrics-open`): for a listen address only
  /// the operator's network reaches.
  bool metrics_open = false;
};

struct api_actors {
  coordinator_actor coordinator;
  accounts_actor accounts;
};

/// The handler `mpakt serve` gives the HTTP server.
handler make_api_handler(caf::actor_system& sys, api_actors actors, api_config cfg);

}  // namespace mpakt::http
