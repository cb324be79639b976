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
/// only. It reads the headers of the frames both ways (never a payload): a volunteer's header
/// whose operation is not one of BASP's, or whose payload is larger than the connection may
/// send (`joining_frame` until the gate admits the volunteer on it: a handshake and a join are a
/// few hundred bytes), closes the connection before CAF sees that header. Whom a volunteer's
/// messages may go to is `volunteer_rules`' (below): CAF delivers a message to any actor of
/// the process whose handle ever crossed a link — the pool's and the coordinator's among them —
/// by its number, which anyone could guess, so a volunteer's message to the pool adding its own
/// worker would skip the token before the join, and the checked worker standing in for it
/// after. Replies go only to the actor that asked that question on this connection; other
/// messages only to the gate and, once admitted, to the listeners of the generations started
/// on it, which the coordinator's stand-in for the volunteer grants (`allow`) as it starts each.
/// Connections not yet admitted are bounded in number in all (a new one past the bound closes
/// the oldest joiner) and per address (a new one past it is refused), and one not admitted
/// within `join_patience` is closed. An admitted volunteer's replies may be large (they carry
/// graph outputs and checkpoints; its other frames stay within `joining_frame`), so a reply
/// larger than `joining_frame` is held here until its last byte has come and only then passed
/// on whole: CAF's room for it is claimed by bytes the volunteer has sent, not by the number it
/// announced. Held replies share `reply_budget` (all links together; a reply larger is refused):
/// past it a link waits, but the earliest-begun held reply always goes on, so every held reply
/// completes and the front holds at most the budget and one reply. A held reply must come at
/// `reply_min_rate` on average (after `reply_grace`, time spent waiting for the budget not
/// counted) or the link is closed.
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
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "actors/cluster_tls.hpp"
#include "runtime/status.hpp"

namespace mpakt {

/// A BASP header as CAF 0.17 writes it: operation, two padding bytes, flags, the payload's
/// length (u32), operation data (a message's id), source and receiving actor (u64 each), all
/// big-endian.
struct basp_header {
  static constexpr std::size_t size = 32;
  static constexpr unsigned char last_operation = 6;  ///< heartbeat; 0–6 are BASP's message types
  static constexpr unsigned char direct_message = 2, routed_message = 3, monitor_message = 4;
  static constexpr unsigned char named_receiver_flag = 0x01;  ///< the receiver is a name (an atom), not a number
  /// In a message's id (caf::message_id): it answers a request; the request's number.
  static constexpr std::uint64_t response_flag = 0x8000000000000000ull, request_number = 0x0FFFFFFFFFFFFFFFull;

  unsigned char operation = 0, flags = 0;
  std::uint32_t payload = 0;
  std::uint64_t data = 0, from = 0, to = 0;

  bool named() const { return (flags & named_receiver_flag) != 0; }
  bool response() const { return (data & response_flag) != 0; }
  /// A request: a direct message with a request number that is not a response.
  bool request() const { return operation == direct_message && !response() && (data & request_number) != 0; }
};

/// Follows the BASP frames of one direction of a link as its bytes arrive, in pieces of any
/// size, and passes on the frames a judge lets through.
class basp_frames {
 public:
  static constexpr std::size_t header_size = basp_header::size;
  /// CAF's spawn server's name: a middleman asks it of every peer it meets.
  static const std::uint64_t spawn_server;
  /// What becomes of a frame whose header is read: passed on, left out (header and payload), or
  /// held back and passed on once its last byte has come.
  enum class verdict { pass, drop, hold };
  using judge = std::function<result<verdict>(const basp_header&)>;
  /// Takes the next `n` bytes and appends to `out` those to pass on (a header once it is whole
  /// and judged: at most 31 bytes are held). An error names the frame's fault — a header that
  /// is not BASP's, or the judge's own (a payload too large among them) — and the stream is
  /// then not to be passed on further: the connection is to be closed.
  status feed(const char* p, std::size_t n, std::vector<char>& out, const judge& j);
  /// Frames whose header has been read.
  std::uint64_t frames() const { return frames_; }
  /// The number of the frame held back now (0: none), and its bytes come so far (header
  /// included).
  std::uint64_t holding() const { return holding_; }
  std::size_t held() const { return held_.size(); }

 private:
  /// Passes on the held frame, now whole, and frees its room.
  void release(std::vector<char>& out);

  unsigned char header_[header_size] = {};
  std::size_t have_ = 0;            ///< bytes of the current header read
  std::uint64_t payload_left_ = 0;  ///< bytes of the current payload still to come
  bool dropping_ = false;           ///< the current payload is left out
  std::uint64_t frames_ = 0;
  std::uint64_t holding_ = 0;
  std::vector<char> held_;
};

/// Whom a volunteer's connection may send messages to, judged frame by frame from the BASP
/// headers of both directions (the payloads stay unread). CAF delivers a peer's message to any
/// actor of the process whose handle ever crossed a link — the pool, the coordinator, the
/// sessions — by its number, which is small and guessable; so a volunteer's messages may go:
/// - as replies: to an actor that asked this connection that very question (a request the
///   coordinator sent on it, its number and its sender, answered once); any other reply is
///   left out (one answering another volunteer's question, or one asked long ago);
/// - otherwise: to the gate; to CAF's spawn server by name (the middleman's own question to
///   each peer); to an actor that sent this connection a message other than a request or a
///   reply before the admission, or one for its spawn server by name at any time (the
///   middleman's own, answering that question); and, once
///   admitted, to the listeners of the generations started on this volunteer (`listeners`,
///   which the coordinator fills as it starts them). Anything else closes the connection;
/// - monitors (a proxy made for one of the coordinator's actors): of an actor that recently
///   sent this connection a message, the gate or a listener, once each; others are left out
///   (each would make the coordinator keep a note until that actor ends).
/// No routed message (for another node). Thread-safety: one connection's pump thread, but
/// `listeners` is shared with the coordinator's actors.
class volunteer_rules {
 public:
  /// A set that forgets its oldest half when full: the last `max_remembered` insertions stay.
  static constexpr std::size_t max_remembered = 4096;
  struct recent {
    std::set<std::uint64_t> now, before;
    bool has(std::uint64_t x) const { return now.count(x) || before.count(x); }
    /// Whether `x` is new.
    bool add(std::uint64_t x) {
      if (has(x)) return false;
      if (now.size() >= max_remembered) before = std::exchange(now, {});
      now.insert(x);
      return true;
    }
  };
  /// The listeners granted to one connection: live ones, and the last ones that ended (a
  /// volunteer's last tokens may cross its listener's end; CAF drops messages for an ended
  /// actor, whose number is never given again).
  struct listeners {
    mutable std::mutex m;
    std::set<std::uint64_t> live;
    recent ended;
    bool has(std::uint64_t id) const {
      std::lock_guard<std::mutex> lock(m);
      return live.count(id) > 0 || ended.has(id);
    }
    void grant(std::uint64_t id) {
      std::lock_guard<std::mutex> lock(m);
      live.insert(id);
    }
    /// A granted listener ended: it stays among the recently ended.
    void end(std::uint64_t id) {
      std::lock_guard<std::mutex> lock(m);
      if (live.erase(id)) ended.add(id);
    }
  };
  /// Requests awaiting their reply, per connection: past this many, the oldest is forgotten.
  static constexpr std::size_t max_outstanding = 1u << 16;

  /// `asking`: how many of the connection's requests to the gate (its join) await their answer.
  /// `max_unasked`: the largest payload of any frame before the admission, and after it of a
  /// frame that is not a reply (its tokens, a down message: small; only a reply carries
  /// outputs or a checkpoint); a reply larger is held until whole (`verdict::hold`).
  /// `max_reply`: the largest payload of a reply.
  volunteer_rules(std::uint64_t gate, std::shared_ptr<const listeners> l,
                  std::shared_ptr<std::atomic<int>> asking = std::make_shared<std::atomic<int>>(0),
                  std::uint32_t max_unasked = 1u << 20, std::uint32_t max_reply = 0xFFFFFFFFu);
  /// A frame of the coordinator's, towards the volunteer (read before it is passed on).
  void heard(const basp_header& h, bool admitted);
  /// A frame of the volunteer's: pass it, leave it out, or an error (errc::unauthorized) naming
  /// the frame and its receiver: close the connection.
  result<basp_frames::verdict> judge(const basp_header& h, std::uint64_t frame, bool admitted);
  /// Frames left out so far: replies nobody awaited, monitors of actors not the volunteer's.
  std::uint64_t stray_replies() const { return stray_replies_; }
  std::uint64_t stray_monitors() const { return stray_monitors_; }

 private:
  struct ask {
    std::uint64_t actor, number;
    bool operator==(const ask& o) const { return actor == o.actor && number == o.number; }
  };
  struct ask_hash {
    std::size_t operator()(const ask& a) const { return std::hash<std::uint64_t>()(a.actor * 0x9E3779B97F4A7C15ull ^ a.number); }
  };
  const std::uint64_t gate_;
  const std::shared_ptr<const listeners> listeners_;
  std::unordered_set<ask, ask_hash> outstanding_;
  std::deque<ask> asked_;                    ///< in the order asked (some answered since)
  std::set<std::uint64_t> early_senders_;    ///< non-request messages' senders before the admission, and the middleman's questioner
  recent recent_senders_, monitored_;
  std::uint64_t stray_replies_ = 0, stray_monitors_ = 0;
  const std::shared_ptr<std::atomic<int>> asking_;
  const std::uint32_t max_unasked_, max_reply_;
  std::set<std::uint64_t> gate_asks_;  ///< numbers of its requests to the gate not yet answered
};

class cluster_guard {
 public:
  struct limits {
    std::uint32_t joining_frame = 1u << 20;  ///< a frame's payload before the admission; after it, any frame's but a reply's
    /// Connections not yet admitted, at once: past it a new one closes the oldest joiner.
    int max_joining = 64;
    int max_joining_per_address = 8;
    std::chrono::milliseconds join_patience{60000};
    std::chrono::milliseconds handshake_patience{10000};  ///< TLS handshake, and the connection to CAF
    /// Bytes of volunteers' replies held until whole, all links together (default: a quarter of
    /// the machine's memory); also the largest reply.
    std::uint64_t reply_budget = default_reply_budget();
    /// A held reply's least average rate, bytes a second, once `reply_grace` has passed.
    std::uint64_t reply_min_rate = 256u << 10;
    std::chrono::milliseconds reply_grace{30000};
  };
  /// A quarter of the machine's memory, at least 256 MiB.
  static std::uint64_t default_reply_budget();

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
  /// Whether the connection from local port `p` has a request to the gate (a join) that is
  /// not yet answered: the gate admits a worker only on the connection that asked.
  bool asking_gate(std::uint16_t p) const;
  /// The gate admitted the volunteer on the connection from local port `p`: no frame limit
  /// but CAF's, and no join patience, from now on. Returns the connection's number for
  /// `allow` (0: no such connection open).
  std::uint64_t admit(std::uint16_t p);
  /// The admitted connection `link` may send messages to actor `id` (a listener of a
  /// generation started on its volunteer: volunteer_rules), until `forget`.
  void allow(std::uint64_t link, std::uint64_t id);
  void forget(std::uint64_t link, std::uint64_t id);
  /// Connections closed before reaching CAF or for a frame refused, since the start.
  std::uint64_t refused() const { return refused_.load(); }
  /// Connections open now (for tests and status).
  int open_connections() const;
  /// Bytes of replies held now, all links together (for tests and status).
  std::uint64_t held_bytes() const { return held_.load(); }

 private:
  struct link {
    std::string peer;
    bool admitted = false;
    std::uint64_t number = 0;
    int fd = -1;  ///< the volunteer's side
    std::shared_ptr<std::atomic<int>> asking_gate = std::make_shared<std::atomic<int>>(0);
    std::shared_ptr<volunteer_rules::listeners> listeners = std::make_shared<volunteer_rules::listeners>();
  };
  void accepted(int fd, const std::string& peer);
  void serve(int fd, std::string peer);
  /// A connection from `peer` is no longer joining (admitted, or closed before); with m_ held.
  void left_joining(const std::string& peer);
  void pump(void* ssl, int client, int caf, std::uint16_t local_port, std::shared_ptr<const volunteer_rules::listeners> l,
            std::shared_ptr<std::atomic<int>> asking_gate);
  bool admitted(std::uint16_t p) const;
  /// The listeners of the connection numbered `link` (of an admitted one only, if so asked).
  std::shared_ptr<volunteer_rules::listeners> listeners_of(std::uint64_t link, bool admitted_only) const;
  /// Counts and logs a connection closed: `reason` tls, frame, busy or slow.
  void count_refused(const std::string& peer, const char* reason, const std::string& why);

  const limits limits_;
  void* ctx_ = nullptr;  ///< SSL_CTX*, owned
  tls::tcp_listener listener_;
  std::uint16_t caf_port_ = 0;
  std::uint64_t gate_id_ = 0;
  mutable std::mutex m_;
  std::condition_variable ended_;
  bool stopping_ = false;
  int threads_ = 0;                          ///< connection threads running
  int joining_ = 0;                          ///< connections not yet admitted (handshakes included)
  std::map<std::string, int> joining_from_;  ///< per address
  struct joiner {
    std::string peer;
    std::chrono::steady_clock::time_point since;
  };
  std::map<int, joiner> joiners_;  ///< joining connections that may still be closed to make room, by socket
  std::set<int> evicted_;          ///< sockets closed to make room, their threads not yet ended
  std::set<int> fds_;                        ///< every volunteer-side socket open
  std::map<std::uint16_t, link> links_;      ///< by the local port of the connection to CAF
  std::uint64_t next_link_ = 0;
  std::atomic<std::uint64_t> refused_{0};
  std::atomic<std::uint64_t> held_{0};  ///< bytes of held replies (and of whole ones still on their way to CAF)
  std::set<std::uint64_t> holders_;     ///< the held replies, by when each began (with m_ held)
  std::uint64_t next_hold_ = 0;
};

}  // namespace mpakt
