#pragma once
/// A volunteer's data connection: the bytes of the weights it loads travel here, beside the
/// cluster link, instead of inside CAF messages.
///
/// Why: CAF 0.17's middleman runs every link of a process on one I/O thread, serializes each
/// message whole and passes it through its TLS session in small records, so a volunteer's
/// load was bound by that thread on both ends (docs/performance.md). Here each volunteer has
/// one TLS connection of its own, written by a thread of its own on the coordinator and read
/// by one on the volunteer; the pieces' order and replies stay on the cluster link.
///
/// How a piece travels (docs/protocol.md, "Data connections"): the coordinator's relay for the
/// volunteer (actors/coordinator/data_relay.hpp) hands the piece's bytes to its `data_sender`,
/// which numbers them and queues them for its writer thread, and sends the volunteer
/// `tpieceref` (model, tensor, offset, length, number) over the cluster link in the piece's
/// place. The volunteer's reader thread puts arriving bytes in its `piece_inbox`; the
/// receiver, handling `tpieceref` in order, takes that number from the inbox (waiting for it if
/// the bytes are behind) and goes on as with `tpiece`. One relay sends both streams in one
/// order, so numbers are claimed in increasing order: whatever lies below a claimed number was
/// given up and is dropped.
///
/// Who may connect: the coordinator makes a random ticket per admitted volunteer and offers it
/// (`dlink`, port and ticket) over the cluster link, which is TLS and authenticated. The
/// volunteer connects to the coordinator's data port, checks the certificate there as it
/// checked the cluster port's (pinned fingerprint or CA), and presents the ticket; a ticket
/// opens one connection once. Anything else gets the connection closed; handshakes are bounded
/// in number and time.
///
/// Failures lose nothing: a volunteer that cannot connect loads over the cluster link as before;
/// a connection that breaks fails the pieces whose bytes were on it (the load ends with an
/// error naming the data connection, as any failed piece does), and the relay sends later
/// pieces over the cluster link.
///
/// Frames (coordinator to volunteer only, after the hello): 16 bytes — "MPDP", the length
/// (u32, at most `max_piece_bytes`), the number (u64), little-endian — then the bytes. Hello
/// (volunteer to coordinator): "MPAKT-DATA/1 " + the ticket (64 hex digits) + "\n"; answered
/// "OK\n" or the connection closed.

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
#include <vector>

#include "actors/cluster_tls.hpp"
#include "actors/spare_strings.hpp"
#include "runtime/status.hpp"

namespace mpakt::datalink {

/// The largest piece a frame may carry (pieces are at most 16 MB, LOAD-19; the rest is room).
inline constexpr std::uint32_t max_piece_bytes = 32u << 20;

/// Pieces that arrived over the data connection, by number, until the receiver claims them.
/// Thread-safety: every member may be called from any thread (the reader puts, the receiver
/// takes). Owned by the volunteer's worker config; outlives the connection.
class piece_inbox {
 public:
  /// `cap`: bytes held at most; `put` waits while the inbox holds more.
  explicit piece_inbox(std::uint64_t cap = std::uint64_t(256) << 20) : cap_(cap) {}
  /// Stores piece `seq`; waits while the inbox is over its cap. False when it is closed.
  bool put(std::uint64_t seq, std::string bytes);
  /// Piece `seq`, waiting for it as long as bytes keep arriving (at most `patience` without
  /// any: a slow link is not a dead one); pieces numbered below it are dropped. The error says
  /// whether the connection closed (and why) or stalled.
  result<std::string> take(std::uint64_t seq, std::chrono::milliseconds patience);
  /// The reader got `n` more bytes of a piece still arriving (what `take` counts as progress).
  void arrived(std::uint64_t n) { arrived_ += n; }
  /// Storage of a piece taken and used, kept for the reader's next piece (a few at most).
  void recycle(std::string bytes);
  /// A kept piece's storage (its old bytes still in it) for a piece of `bytes`: the smallest
  /// at least that long, else the longest (growing a string clears what it adds, and fresh
  /// storage faults its pages in as well), or an empty string.
  std::string spare(std::size_t bytes);
  /// The connection ended: waiting and later takes of missing pieces fail with `why`.
  void close(const std::string& why);
  /// A new connection: takes wait for pieces again (what was held is dropped).
  void reopen();
  std::uint64_t held_bytes() const;

 private:
  mutable std::mutex m_;
  std::condition_variable changed_;
  std::map<std::uint64_t, std::string> pieces_;
  /// (a coordinator has a few pieces on their way at once: load_job_config::pieces_held)
  spare_strings spares_{256, std::uint64_t(4) * max_piece_bytes};
  std::uint64_t held_ = 0;
  std::uint64_t floor_ = 0;  ///< numbers up to this one were claimed or given up
  std::atomic<std::uint64_t> arrived_{0};
  const std::uint64_t cap_;
  bool closed_ = false;
  std::string why_;
};

/// The coordinator's end of one volunteer's data connection. Made by `data_server::expect`
/// (waiting for the volunteer), attached when the volunteer presents its ticket, closed when
/// the relay ends or a write fails. Thread-safety: `send`, `up`, `close` and the counters may
/// be called from any thread; one writer thread of its own does the writing.
class data_sender {
 public:
  /// `max_queued`: bytes waiting for the writer at most (see send).
  data_sender(std::string ticket, std::uint64_t max_queued) : ticket_(std::move(ticket)), max_queued_(max_queued) {}
  ~data_sender();
  data_sender(const data_sender&) = delete;
  data_sender& operator=(const data_sender&) = delete;

  const std::string& ticket() const { return ticket_; }
  /// Queues `bytes` (moved from) and returns their number; nullopt, `bytes` untouched, when the
  /// connection is not up. The loader keeps a few pieces in flight and an honest volunteer
  /// answers a piece only once its bytes arrived, so a queue past `max_queued` means the
  /// volunteer answers pieces it has not read: the connection is closed (nullopt), so that the
  /// coordinator's memory is not the volunteer's to fill.
  std::optional<std::uint64_t> send(std::string& bytes);
  /// Whether the connection is up (attached, not failed or closed).
  bool up() const { return state_.load() == attached; }
  /// "waiting", "up", or "closed: why".
  std::string describe() const;
  std::uint64_t bytes_sent() const { return sent_.load(); }
  /// Ends the connection (the writer stops; queued pieces are dropped) and refuses its ticket.
  void close(const std::string& why = "closed by the coordinator");

  /// Takes over a connection whose hello presented this ticket (data_server); false if the
  /// sender was closed meanwhile (the caller then closes the connection).
  bool attach(int fd, void* ssl);

 private:
  void write_loop();
  enum state_t { waiting, attached, failed };
  const std::string ticket_;
  std::atomic<int> state_{waiting};
  std::atomic<std::uint64_t> sent_{0};
  mutable std::mutex m_;
  std::condition_variable queued_;
  std::deque<std::pair<std::uint64_t, std::string>> queue_;
  std::uint64_t queued_bytes_ = 0;
  const std::uint64_t max_queued_;
  std::uint64_t next_seq_ = 1;
  std::string why_;
  int fd_ = -1;
  void* ssl_ = nullptr;  ///< SSL*, owned
  std::thread writer_;
};

/// The coordinator's data port: accepts volunteers' data connections (TLS with the cluster
/// port's certificate) and hands each to the sender whose ticket it presents. Lifecycle: made
/// by `start` next to the cluster port, ended with the coordinator (its destructor stops the
/// acceptor and closes every connection it still attaches). Thread-safety: `expect` and `port`
/// from any thread.
class data_server {
 public:
  /// Listens on `address:port` (0: any free port) with the certificate and key files (PEM).
  static result<std::unique_ptr<data_server>> start(const std::string& address, std::uint16_t port,
                                                   const std::string& certificate_file, const std::string& key_file);
  ~data_server();
  std::uint16_t port() const { return port_; }
  /// A sender waiting for a connection that presents its (fresh, random) ticket; null if no
  /// random ticket could be made. `max_queued`: see data_sender::send.
  std::shared_ptr<data_sender> expect(std::uint64_t max_queued = std::uint64_t(256) << 20);
  /// Handshakes that failed (wrong ticket, not TLS, too slow) since the start.
  std::uint64_t refused() const { return refused_.load(); }

 private:
  data_server() = default;
  void accepted(int fd);
  void handshake(int fd);
  tls::tcp_listener listener_;
  std::uint16_t port_ = 0;
  void* ctx_ = nullptr;  ///< SSL_CTX*, owned
  std::mutex m_;
  std::condition_variable handshakes_done_;
  std::map<std::string, std::weak_ptr<data_sender>> waiting_;
  int handshakes_ = 0;
  std::set<int> in_handshake_;  ///< their sockets (shut down when the server ends)
  bool stopping_ = false;
  std::atomic<std::uint64_t> refused_{0};
};

/// The volunteer's end: connects, checks the coordinator's certificate with `check_peer` (PEM
/// of what the port presented → ok or why not), presents the ticket, then reads pieces into
/// `inbox` on a thread of its own until the connection ends (closing the inbox with the reason).
/// Ending it (destructor) closes the connection and joins the thread.
class data_client {
 public:
  static result<std::unique_ptr<data_client>> connect(const std::string& host, std::uint16_t port, const std::string& ticket,
                                                      const std::function<status(const std::string&)>& check_peer,
                                                      std::shared_ptr<piece_inbox> inbox);
  ~data_client();
  std::uint64_t bytes_received() const { return received_.load(); }

 private:
  data_client() = default;
  void read_loop();
  int fd_ = -1;
  void* ctx_ = nullptr;  ///< SSL_CTX*, owned
  void* ssl_ = nullptr;  ///< SSL*, owned
  std::shared_ptr<piece_inbox> inbox_;
  std::atomic<std::uint64_t> received_{0};
  std::atomic<bool> stopping_{false};
  std::thread reader_;
};

}  // namespace mpakt::datalink
