#pragma once
/// TLS on the cluster port — the coordinator's front (actors/cluster_guard.hpp) and, on each
/// volunteer, CAF 0.17's OpenSSL module: the files each side uses, and what a volunteer does
/// before it joins.
///
/// - The coordinator presents its own certificate: `--cluster-cert`/`--cluster-key`, or a key
///   pair and self-signed certificate made in `<data-dir>/cluster/` on first start. Volunteers
///   pin its SHA-256 fingerprint (`--coordinator-fingerprint`) or trust a CA (`--ca FILE`).
/// - CAF's module, once any certificate is configured, makes both ends present one and verify
///   the other's (the front asks the same of volunteers). Volunteers are authenticated by their join token (the gate), not by a
///   certificate, so every volunteer presents the same *link certificate*: an Ed25519 key pair
///   derived from a fixed, public seed and a self-signed certificate with fixed fields, made
///   byte for byte the same on every host. It proves nothing and is not meant to; the
///   coordinator trusts it so the handshake completes. What protects the link is the
///   coordinator's certificate, which the volunteer checks, and the token, which travels only
///   inside the encrypted link.
/// - Before joining, a volunteer that pins a fingerprint opens one TLS connection of its own to
///   the port, reads the certificate presented, checks its fingerprint, and hands CAF that
///   certificate as the only one it trusts — so the link CAF then makes can only reach the
///   holder of that certificate's key.
///
/// Thread-safety: plain functions; OpenSSL 3 needs no global setup.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include <caf/actor_system_config.hpp>

#include "runtime/status.hpp"

struct ssl_st;  // (OpenSSL's SSL)

namespace mpakt::tls {

/// Files CAF's OpenSSL module reads on each connection.
struct link_files {
  std::string certificate;  ///< this end's certificate (PEM)
  std::string key;          ///< its private key (PEM)
  std::string trusted;      ///< the certificates this end accepts from the other (PEM)
};

/// The coordinator's certificate and key: `cert`/`key` when given (both or neither), else the
/// pair in `dir` (made there on first start: EC P-256, self-signed, valid 20 years; the key
/// file 0600). Also writes the link certificate into `dir` as what volunteers present.
/// `fingerprint` receives the coordinator certificate's SHA-256 fingerprint.
result<link_files> coordinator_files(const std::string& dir, const std::string& cert, const std::string& key,
                                     std::string* fingerprint);

/// The volunteer's files in `dir` (a private temporary folder): the link certificate and key,
/// and `trusted_pem` (the pinned certificate, or the CA file's contents) as what it trusts.
result<link_files> volunteer_files(const std::string& dir, const std::string& trusted_pem);

/// The SHA-256 fingerprint of a PEM certificate's DER bytes: 64 lowercase hex digits.
result<std::string> fingerprint_of(const std::string& pem);

/// A fingerprint as written by a person ("AB:CD:…", "abcd…", spaces) as 64 lowercase hex
/// digits; refused naming what is wrong.
result<std::string> normalize_fingerprint(const std::string& text);

/// Whether `peer_pem` (what the port presented) is issued, directly or through the chain it
/// came with, by one of the CA certificates in `ca_pem`, is valid now, and names `host` (a
/// DNS name matched against its subject alternative names, or an IP address literal against
/// its IP entries): what a volunteer joining with `--ca` checks before anything of its own
/// travels. The error says which of these failed.
status check_issued_for(const std::string& peer_pem, const std::string& ca_pem, const std::string& host);

/// Connects to the TLS server at host:port (presenting the link certificate), and returns
/// the certificate it presents, as PEM — unverified: the caller checks its fingerprint.
/// Retries a refused or unreachable connection until `patience` has passed.
result<std::string> fetch_certificate(const std::string& host, std::uint16_t port, std::chrono::milliseconds patience);

/// `fallback` with the calling thread's last OpenSSL error in brackets (if any); empties
/// that thread's error queue.
std::string ssl_error(const std::string& fallback);

/// SO_RCVTIMEO and SO_SNDTIMEO of socket `fd` (0: none).
void set_socket_timeouts(int fd, std::chrono::milliseconds read, std::chrono::milliseconds write);

/// The certificate the other end of a TLS connection presented, as PEM (unverified);
/// errc::unauthorized when it presented none.
result<std::string> peer_certificate(ssl_st* ssl);

/// A TCP connection to host:port (each address it resolves to, in turn) with `timeout` on
/// connect, reads and writes; -1 with `why` set when none answers.
int connect_tcp(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout, std::string& why);

/// A listening TCP socket and the thread that accepts on it: the coordinator's data port and
/// its cluster port's front. Each connection goes to `on_accept` (the socket, owned by it from
/// then on, and the peer's address) on that thread. `stop` ends the thread and closes the
/// socket (the destructor too); the owner stops it before what `on_accept` uses goes away.
class tcp_listener {
 public:
  using accept_fn = std::function<void(int fd, const std::string& peer)>;
  ~tcp_listener() { stop(); }
  /// Listens on `address:port` (the first address it resolves to that binds; port 0: any free
  /// one); the port bound. The error is the reason alone (the caller names the port).
  result<std::uint16_t> start(const std::string& address, std::uint16_t port, accept_fn on_accept);
  void stop();

 private:
  void accept_loop();
  accept_fn on_accept_;
  int fd_ = -1;
  int wake_[2] = {-1, -1};  ///< a pipe that ends accept_loop's poll
  std::thread thread_;
};

/// Loads CAF's OpenSSL module with `files` (after the middleman: configure_cluster): a
/// volunteer's side of the link.
void configure_link(caf::actor_system_config& cfg, const link_files& files);

}  // namespace mpakt::tls
