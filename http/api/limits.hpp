#pragma once
/// Abuse limits of the API (issue: hardening; docs/operators.md, "Abuse limits"): failed
/// logins per username and per address, and generations running at once per key. The
/// connection-level limits (open connections, slow clients) live in the HTTP server
/// (server_config). Both classes here are thread-safe: handlers call them on I/O threads and
/// actor threads alike; each holds one mutex for a few map operations, never while calling out.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace mpakt::http {

struct abuse_config {
  /// Failed logins one username may have within `login_window` before further attempts for
  /// it are answered 429 (0 = no limit).
  int login_failures_per_user = 10;
  /// Failed logins one client address may have within `login_window` (0 = no limit).
  int login_failures_per_address = 50;
  std::chrono::seconds login_window{300};
  /// Generations (POST /api/v3/generate and chat) one key may run at once (0 = no limit).
  int generations_per_key = 8;
};

/// Counts failed logins in a sliding window, per username (ignoring case, as usernames are
/// unique ignoring case) and per client address.
class login_limiter {
 public:
  using clock = std::chrono::steady_clock;
  explicit login_limiter(abuse_config cfg) : cfg_(cfg) {}

  /// When this attempt must wait: the seconds until the username's or the address's oldest
  /// failure leaves the window (at least 1); nullopt when it may go ahead.
  std::optional<std::chrono::seconds> blocked(const std::string& username, const std::string& address,
                                              clock::time_point now = clock::now());
  /// Records a failed login (a wrong password or an unknown user).
  void failed(const std::string& username, const std::string& address, clock::time_point now = clock::now());

 private:
  using window = std::deque<clock::time_point>;
  /// Drops failures older than the window; forgets names whose window is empty.
  void prune(std::map<std::string, window>& m, clock::time_point now);
  std::optional<std::chrono::seconds> wait_for(std::map<std::string, window>& m, const std::string& k, int limit,
                                               clock::time_point now);

  abuse_config cfg_;
  std::mutex m_;
  std::map<std::string, window> users_, addresses_;
  std::size_t calls_ = 0;
};

/// Generations running per key. acquire() hands out a slot that frees itself when the last
/// copy of the returned pointer goes (the generation's actor holds it until it ends).
class generation_slots : public std::enable_shared_from_this<generation_slots> {
 public:
  explicit generation_slots(int per_key) : per_key_(per_key) {}
  /// A slot for `key_id`, or null when the key already runs `per_key` generations.
  std::shared_ptr<void> acquire(const std::string& key_id);
  int per_key() const { return per_key_; }
  int running(const std::string& key_id);

 private:
  void release(const std::string& key_id);
  int per_key_;
  std::mutex m_;
  std::map<std::string, int> running_;
};

}  // namespace mpakt::http
