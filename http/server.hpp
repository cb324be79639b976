#pragma once
/// The HTTP/1.1 front end: a Boost.Beast server on its own io_context threads.
///
/// It parses requests (keep-alive, size limits), hands each one to a handler with a
/// `responder`, and writes the answer — a whole body or an SSE event stream over chunked
/// transfer. It knows nothing of tensors or actors: handlers (http/routes in the
/// coordinator) turn requests into actor messages and answer when the actor replies.
///
/// Threads: Beast runs on the server's own threads, one strand per connection. Handlers are
/// called on an I/O thread and must not block; `responder` and `sse_stream` may be used
/// from any thread (they post to the connection's strand). TCP_NODELAY is set so SSE events
/// are not delayed ~40 ms by Nagle's algorithm.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/status.hpp"

namespace mpakt::http {

using header_list = std::vector<std::pair<std::string, std::string>>;  ///< names lower-case

struct request {
  std::string method;  ///< "GET", "POST", "DELETE", "HEAD", ...
  std::string path;    ///< percent-decoded path, without the query
  std::string query;   ///< raw query string (parse with http::parse_query)
  header_list headers;
  std::string body;
  std::string remote;  ///< peer address, for logs

  /// A header by lower-case name, or nullptr.
  const std::string* header(std::string_view lower_name) const;
};

struct response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  header_list headers;  ///< extra headers
};

/// An SSE event stream on one connection (chunked transfer, so the connection stays
/// reusable afterwards). Thread-safe; events are written in the order sent.
class sse_stream {
 public:
  virtual ~sse_stream() = default;
  /// Queues "event: <event>\ndata: <data>\n\n" (no event line when `event` is empty; a
  /// multi-line `data` gets one "data:" line per line). Never blocks. False once the client
  /// has gone; a client that lets more than server_config::sse_backlog_limit pile up counts
  /// as gone.
  virtual bool send(std::string_view event, std::string_view data) = 0;
  /// Ends the stream with the final chunk.
  virtual void close() = 0;
  /// True once the client disconnected (or close() was called).
  virtual bool closed() const = 0;
  /// Called once, on an I/O thread, if the client disconnects before close(). Set it right
  /// after start_sse(); a disconnect that already happened calls it immediately (on the
  /// caller's thread). server::stop() counts as a disconnect and calls it on stop()'s thread.
  /// Keep it short and non-blocking: post to an actor, nothing more.
  virtual void on_disconnect(std::function<void()> f) = 0;
};

/// Produces a streamed response body piece by piece: fills `buf` with up to `cap` bytes and
/// returns how many; 0 ends the body. Called on the connection's I/O thread, one call at a
/// time, only as fast as the client reads — so it must be quick (a file read is fine,
/// waiting for an actor is not). An error aborts the response and closes the connection,
/// since the promised length can no longer be kept.
using body_source = std::function<result<std::size_t>(char* buf, std::size_t cap)>;

/// Answers one request exactly once, by respond(), start_sse() or respond_stream() (a second
/// answer is ignored). Thread-safe. A responder destroyed without answering answers 500 with
/// a JSON error. Using it after the server stopped does nothing.
class responder {
 public:
  virtual ~responder() = default;
  virtual void respond(response r) = 0;
  /// Starts an SSE stream answering `status`, with `headers` besides the stream's own.
  virtual std::shared_ptr<sse_stream> start_sse(int status = 200, header_list headers = {}) = 0;

  /// Answers with a body pulled from `source` in pieces of at most
  /// server_config::stream_chunk_bytes, so a large body (a multi-gigabyte checkpoint) is
  /// never held whole. `head` gives status, content type and extra headers; its body is
  /// ignored. With `content_length` the body goes out with Content-Length and `source` must
  /// yield exactly that many bytes (it is not asked for more); without it, chunked. A HEAD
  /// request gets the headers only and `source` is never called.
  /// The server's responder streams; this default (for fakes in tests) pulls the whole body
  /// into memory and calls respond().
  virtual void respond_stream(response head, std::optional<std::uint64_t> content_length, body_source source);

  /// respond_stream() over bytes [offset, offset + length) of a file (to its end when
  /// `length` is empty), read from disk one chunk at a time. The file is opened here, on the
  /// caller's thread: when it cannot be opened or the range does not fit, this returns
  /// errc::not_found / errc::invalid naming the path and leaves the responder unanswered,
  /// so the caller can still answer 404.
  status respond_file(const std::string& path, std::uint64_t offset, std::optional<std::uint64_t> length,
                      response head);

  /// Calls `f` once, on an I/O thread, if the client disconnects (closes or resets the
  /// connection) while this request waits for its answer — a graph call then stops its graph.
  /// A disconnect that already happened calls it at once, on the caller's thread; one after the
  /// answer began never does (an SSE stream has its own on_disconnect). server::stop() does
  /// not count. Keep it short and non-blocking: post to an actor, nothing more. This default
  /// (fakes in tests) never calls it.
  virtual void on_disconnect(std::function<void()> f);
};

using handler = std::function<void(request&& req, std::shared_ptr<responder> res)>;

struct server_config {
  std::string address = "127.0.0.1";
  std::uint16_t port = 0;  ///< 0 = pick a free port (see server::port())
  int threads = 1;         ///< I/O threads
  /// Request bodies above this get 413 {"error": ...} before the body is read.
  std::size_t body_limit = std::size_t(256) << 20;
  std::size_t header_limit = 64 * 1024;
  /// A keep-alive connection idle this long is closed. It also bounds every single write, so
  /// a client that stops reading an SSE stream or a download is dropped.
  std::chrono::seconds idle_timeout{120};
  /// Slow clients: once the first byte of a request arrived, its header must be complete
  /// within header_timeout, and its body within body_timeout of the header's end; a client
  /// trickling either is dropped (nothing is answered: it would not be read either).
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{300'000};
  /// Open connections: past max_connections in all (0 = no limit) a new one is answered 503,
  /// past max_connections_per_address from one client address 429, both with Retry-After,
  /// and closed at once.
  std::size_t max_connections = 1024;
  std::size_t max_connections_per_address = 256;
  /// Size of the pieces respond_stream()/respond_file() pull and write: the memory one
  /// streamed response holds.
  std::size_t stream_chunk_bytes = std::size_t(1) << 20;
  /// SSE events queued for a client that does not read them fast enough: past this the
  /// client counts as gone (on_disconnect fires) rather than growing the queue forever.
  std::size_t sse_backlog_limit = std::size_t(64) << 20;
};

class server {
 public:
  /// Binds, listens and starts the I/O threads. Fails (errc::unavailable) when the address
  /// cannot be bound, naming it.
  static result<std::unique_ptr<server>> start(server_config cfg, handler h);
  virtual ~server() = default;
  /// The bound port (useful with port 0).
  virtual std::uint16_t port() const = 0;
  /// Stops accepting, closes connections and joins the I/O threads. Idempotent. Must not be
  /// called from a handler or any other I/O-thread callback (it joins those threads).
  /// Connections are dropped, not drained: open SSE streams see on_disconnect, called on the
  /// thread that calls stop(); responders still held elsewhere become no-ops.
  virtual void stop() = 0;
};

/// {"error": "<message>"} as JSON text (escaping done properly). Every error body of the API
/// is made here, so it is always strict UTF-8: bytes of the message that are not well-formed
/// UTF-8 (runtime/utf8.hpp: overlong forms and surrogates too) become U+FFFD.
std::string error_json(std::string_view message);

}  // namespace mpakt::http
