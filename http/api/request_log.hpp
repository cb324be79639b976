#pragma once
/// What the API records of each request: its id (returned in `x-request-id`, carried to the
/// actors in `caller::request_id`), one log line when it is answered, and the HTTP metrics
/// (mpakt_http_requests_total, mpakt_http_request_duration_seconds, mpakt_errors_total).
///
/// `observe()` wraps the server's responder: the first answer (a whole body, a stream or an
/// SSE stream's header) gets the header, is counted and logged; whatever the handler does
/// next goes to the server's responder unchanged. A stream's duration is the time to its
/// header, since its end is the client's business (docs/decisions.md).

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "http/server.hpp"

namespace mpakt::http {

/// One request as the log and the metrics see it. Thread-safe: the route and key are set on
/// the request's way in (I/O thread, then its actor), the answer may come from any thread.
class request_record {
 public:
  request_record(std::string id, std::string method, std::string remote);

  const std::string& id() const { return id_; }
  /// The route template ("/api/v3/sessions/:sessionId"), or "static" / "unmatched": never
  /// the raw path, so the metrics' label sets stay bounded.
  void set_route(std::string route);
  /// The key that authenticated it (its id, never the key).
  void set_key_id(std::string key_id);
  /// Counts and logs the answer, once.
  void on_answer(int status);

 private:
  const std::string id_, method_, remote_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::mutex m_;
  std::string route_ = "unmatched", key_id_;
  bool answered_ = false;
};

/// The request's id: the client's `x-request-id` when it is 1–64 characters of
/// [A-Za-z0-9._-], else a fresh one ("r_" + 24 hex digits).
std::string request_id_of(const request& req);

/// A responder that records the first answer in `rec` and adds `x-request-id` to it.
std::shared_ptr<responder> observe(std::shared_ptr<responder> inner, std::shared_ptr<request_record> rec);

}  // namespace mpakt::http
