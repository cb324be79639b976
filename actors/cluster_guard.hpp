#pragma once
/// The cluster port's front: TLS, and a look at every frame a volunteer sends before CAF's
/// middleman reads it.
///
/// Why: CAF 0.17's middleman reads a BASP header (32 bytes) and at once makes room for the
/// payload it announces (up to 4 GiB) and clears it, on the one I/O thread every link of the
/// process shares. Anyone who can reach the port can present the link certificate (public by
/// design, actors/cluster_tls.hpp), so before this front 72 bytes from a stranger made the
/// coordinator claim and clear 4 GiB (and stall every volunteer's link while it did); six
/// such connections at once outgrow a 24 GiB machine. CAF has no setting that bounds a payload.
///
/// How: the port is this guard's. It speaks TLS as CAF's module did (the coordinator's
/// certificate; the client must present one issued by the trusted file: the link certificate)
/// and passes each connection's bytes both ways to the gate's CAF port, published on loopback
/// only. It reads the frames a volunteer sends (never the coordinator's): a header whose
/// operation is not one of BASP's, or whose payload is larger than the connection may send,
/// closes the connection before CAF sees that header. Until the gate admits the volunteer on a
/// connection (`admit`), a frame carries at most `joining_frame` bytes (a handshake and a join
/// are a few hundred), and its messages may go only to the gate, to actors that sent it a
/// message on this connection (their replies) and to CAF's spawn server (the middleman's own
/// question to each peer it meets) — CAF delivers a message to any actor of the process whose
/// handle ever crossed a link, the pool's and the coordinator's among them, by its number,
/// which a stranger could guess: a message to the pool adding its own worker would skip the
/// token. Connections not yet admitted are bounded in number (in all and per address), and one
/// not admitted within `join_patience` is closed. No volunteer may send a routed message (one
/// the coordinator's middleman would pass on to another node: to another volunteer's actors):
/// every message of the grid goes between the coordinator and one volunteer. An admitted volunteer (it
/// presented a valid join token) may send frames as large as CAF allows: its replies carry
/// graph outputs and checkpoints.
///
/// The gate learns a volunteer's address from the middleman, which now sees the guard's
/// loopback connection; `peer_of` maps the port of that connection to the address the
/// volunteer connected from.
///
/// Lifecycle: made before the gate (its config holds it), started once the gate is published,
/// stopped by its destructor (the listener and every connection closed, their threads
/// joined). Thread-safety: every member from any thread. One thread per connection.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "actors/cluster_tls.hpp"
#include "runtime/status.hpp"

namespace mpakt {

/// Follows the BASP frames of one direction of a link as its bytes arrive, in pieces of any
/// size, and refuses a header CAF should never read.
class basp_frames {
 public:
  static constexpr std::size_t header_size = 32;  ///< operation, 3 bytes, length (u32, big-endian), 3 × u64
  static constexpr unsigned char last_operation = 6;  ///< heartbeat; 0–6 are BASP's message types
  static constexpr unsigned char direct_message = 2, routed_message = 3;
  static constexpr unsigned char named_receiver_flag = 0x01;  ///< the receiver is a name (an atom), not a number
  /// CAF's spawn server's name: a middleman asks it of every peer it meets.
  static const std::uint64_t spawn_server;
  /// Takes the next `n` bytes; an error names the frame's fault when a header completed in
  /// them is not BASP's, announces more than `max_payload` bytes, is a routed message unless
  /// `routed` (or `only_to` is given), or — with `only_to` — is a message for an actor not in
  /// it (or a name other than the spawn server's). The bytes are then not to be passed on: the
  /// connection is to be closed. With `senders`, the sending actor of each message read goes
  /// in (at most `max_senders`).
  status feed(const char* p, std::size_t n, std::uint32_t max_payload, const std::set<std::uint64_t>* only_to = nullptr,
              std::set<std::uint64_t>* senders = nullptr, bool routed = true);
  static constexpr std::size_t max_senders = 4096;
  /// Frames whose header has been read.
  std::uint64_t frames() const { return frames_; }

 private:
  unsigned char header_[header_size] = {};
  std::size_t have_ = 0;            ///< bytes of the current header read
  std::uint64_t payload_left_ = 0;  ///< bytes of the current payload still to come
  std::uint64_t frames_ = 0;
};

class cluster_guard {
 public:
  struct limits {
    std::uint32_t joining_frame = 1u << 20;  ///< a frame's payload before the volunteer is admitted
    int max_joining = 64;                    ///< connections not yet admitted, at once
    int max_joining_per_address = 8;
    std::chrono::milliseconds join_patience{60000};
    std::chrono::milliseconds handshake_patience{10000};  ///< TLS handshake, and the connection to CAF
  };

  explicit cluster_guard(limits l);
  cluster_guard() : cluster_guard(limits{}) {}
  ~cluster_guard();
  cluster_guard(const cluster_guard&) = delete;
  cluster_guard& operator=(const cluster_guard&) = delete;

  /// Listens on `address:port` (0: any free port) with TLS (`files`: the coordinator's
  /// certificate and key; clients must present a certificate issued by `files.trusted`), and
  /// passes every connection on to 127.0.0.1:`caf_port`, where actor `gate_actor_id` is
  /// published. Returns the port bound. Once only.
  result<std::uint16_t> start(const std::string& address, std::uint16_t port, const tls::link_files& files,
                              std::uint16_t caf_port, std::uint64_t gate_actor_id);
  /// The address of the volunteer whose connection reaches CAF from local port `p` (the port
  /// the middleman reports for that peer), while it is open.
  std::optional<std::string> peer_of(std::uint16_t p) const;
  /// The gate admitted the volunteer on the connection from local port `p`: no frame limit
  /// but CAF's, and no join patience, from now on.
  void admit(std::uint16_t p);
  /// Connections closed before reaching CAF or for a frame refused, since the start.
  std::uint64_t refused() const { return refused_.load(); }
  /// Connections open now (for tests and status).
  int open_connections() const;

 private:
  struct link {
    std::string peer;
    bool admitted = false;
  };
  void accepted(int fd, const std::string& peer);
  void serve(int fd, std::string peer);
  /// A connection from `peer` is no longer joining (admitted, or closed before); with m_ held.
  void left_joining(const std::string& peer);
  void pump(void* ssl, int client, int caf, std::uint16_t local_port);
  bool admitted(std::uint16_t p) const;
  /// Counts and logs a connection closed: `reason` tls, frame, busy or slow.
  void count_refused(const std::string& peer, const char* reason, const std::string& why);

  const limits limits_;
  void* ctx_ = nullptr;  ///< SSL_CTX*, owned
  tls::tcp_listener listener_;
  std::uint16_t caf_port_ = 0;
  std::uint64_t gate_id_ = 0;  ///< the only actor a joiner may message
  mutable std::mutex m_;
  std::condition_variable ended_;
  bool stopping_ = false;
  int threads_ = 0;                          ///< connection threads running
  int joining_ = 0;                          ///< connections not yet admitted (handshakes included)
  std::map<std::string, int> joining_from_;  ///< per address
  std::set<int> fds_;                        ///< every volunteer-side socket open
  std::map<std::uint16_t, link> links_;      ///< by the local port of the connection to CAF
  std::atomic<std::uint64_t> refused_{0};
};

}  // namespace mpakt
