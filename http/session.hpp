#pragma once
/// Internal to http/: one accepted connection of the server (see server.hpp for the public
/// side), and the responder / SSE stream objects handlers get for it.
///
/// Ownership and threads: a `session` is owned by its coroutine (and by handlers posted to
/// its strand), so it lives inside the io_context and dies with it at the latest. Handlers'
/// objects (`responder_impl`, `sse_impl`) may live on any thread for any time; they reach the
/// session only through a `session_link`, which posts to the session's strand while both the
/// session and the server are alive and does nothing afterwards. Nothing outside the strand
/// touches the socket.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "http/server.hpp"

namespace mpakt::http::detail {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

/// The server's io_context as seen from foreign threads. server::stop() clears `ioc` (under
/// `m`) before it destroys the io_context, so a post either lands while it is alive or not
/// at all.
struct gate {
  std::mutex m;
  net::io_context* ioc = nullptr;
};

class session;

/// How objects held by handlers reach their session from any thread.
class session_link {
 public:
  session_link(std::shared_ptr<gate> g, std::weak_ptr<session> s) : gate_(std::move(g)), session_(std::move(s)) {}
  /// Runs f(session&) on the session's strand. False when the session or the server is gone.
  bool post(std::function<void(session&)> f) const;

 private:
  std::shared_ptr<gate> gate_;
  std::weak_ptr<session> session_;
};

/// The handler's side of an SSE stream. Sending posts the formatted event to the session;
/// the disconnect state lives here so on_disconnect works even after the session is gone.
class sse_impl final : public sse_stream, public std::enable_shared_from_this<sse_impl> {
 public:
  explicit sse_impl(session_link link) : link_(std::move(link)) {}
  bool send(std::string_view event, std::string_view data) override;
  void close() override;
  bool closed() const override { return closed_.load(); }
  void on_disconnect(std::function<void()> f) override;

  /// Session side: the client went away (or the server stopped) before close(). Fires the
  /// on_disconnect callback; does nothing the second time or after close().
  void mark_disconnected();

 private:
  session_link link_;
  std::atomic<bool> closed_{false};
  std::mutex m_;  // guards the fields below
  bool user_closed_ = false;
  bool disconnected_ = false;
  std::function<void()> on_disconnect_;  // taken (so called once) when the disconnect happens
};

/// Whether a request's client left before its answer: the session marks it, the handler
/// listens (responder::on_disconnect). Thread-safe; the callback runs at most once.
class request_watch {
 public:
  void on_disconnect(std::function<void()> f);
  /// Session side: the client went away while the request waited for its answer.
  void mark_gone();

 private:
  std::mutex m_;
  bool gone_ = false;
  std::function<void()> on_gone_;
};

/// "event: <event>\ndata: <line>\n...\n" — one data line per line of `data`, as SSE wants.
std::string format_sse_event(std::string_view event, std::string_view data);

/// An open file descriptor, closed with the last copy of the body source that reads it.
struct file_handle {
  int fd = -1;
  explicit file_handle(int f) : fd(f) {}
  ~file_handle();
  file_handle(const file_handle&) = delete;
  file_handle& operator=(const file_handle&) = delete;
};

/// The body source respond_file() makes: bytes [pos, end) of a file. Called, it reads the
/// next piece with pread (the general path); the session recognises it inside the
/// body_source and sends the file with sendfile(2) instead — the kernel moves the pages to
/// the socket, with no copy into user memory and back.
struct file_source {
  std::shared_ptr<file_handle> file;
  std::uint64_t pos = 0;
  std::uint64_t end = 0;
  std::string path;  ///< for messages
  result<std::size_t> operator()(char* buf, std::size_t cap);
};

/// What the handler answered: a whole body, an SSE stream or a pulled body.
struct answer {
  enum class kind { whole, sse, stream };
  kind k = kind::whole;
  response head;                                ///< the whole response, or status and headers
  std::optional<std::uint64_t> content_length;  ///< stream: known length, else chunked
  body_source source;                           ///< stream
  std::shared_ptr<sse_impl> sse;                ///< sse
};

/// The server's responder: answers once, by posting the answer to the session.
class responder_impl final : public responder {
 public:
  responder_impl(session_link link, std::shared_ptr<request_watch> watch) : link_(std::move(link)), watch_(std::move(watch)) {}
  ~responder_impl() override;  // answers 500 when nothing else did
  void respond(response r) override;
  std::shared_ptr<sse_stream> start_sse(int status, header_list headers) override;
  void respond_stream(response head, std::optional<std::uint64_t> content_length, body_source source) override;
  void on_disconnect(std::function<void()> f) override { watch_->on_disconnect(std::move(f)); }

 private:
  bool claim() { return !answered_.exchange(true); }
  void deliver(answer a);

  session_link link_;
  std::shared_ptr<request_watch> watch_;
  std::atomic<bool> answered_{false};
};

/// One connection: reads requests (keep-alive), calls the handler, writes its answer.
/// Every member is touched only on the connection's strand.
class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket socket, const server_config& cfg, std::shared_ptr<const handler> h, std::shared_ptr<gate> g);
  ~session();

  /// The connection's life, spawned on its strand by the listener.
  static net::awaitable<void> run(std::shared_ptr<session> self);
  net::any_io_executor executor() { return stream_.get_executor(); }

  /// Keeps `ticket` (the connection's place in the server's count of open connections)
  /// until the session is destroyed.
  void hold(std::shared_ptr<void> ticket) { ticket_ = std::move(ticket); }

  // Called on the strand, through session_link::post.
  void on_answer(answer a);
  void on_sse_data(const std::shared_ptr<sse_impl>& s, std::string text);
  void on_sse_close(const std::shared_ptr<sse_impl>& s);

 private:
  net::awaitable<void> serve();
  /// Writes the answer; false when the connection must close afterwards.
  net::awaitable<bool> write_whole(response& r, bool head_only, bool keep_alive);
  net::awaitable<bool> write_stream(answer& a, bool head_only, bool keep_alive);
  /// The body of a file answer on a plain TCP connection, by sendfile(2); false when the
  /// connection must close (the client left, a timeout, the file shrank).
  net::awaitable<bool> send_file(file_source& f, std::uint64_t length);
  net::awaitable<bool> write_sse(answer& a, bool head_only, bool keep_alive);
  /// Answers with a JSON error and closes (the request could not be read to its end).
  net::awaitable<void> refuse(int status, const std::string& message);
  net::awaitable<void> lingering_close();

  /// Suspends until notify(); callers loop on their condition around it.
  net::awaitable<void> wait();
  void notify();
  /// While an SSE stream is open, or a request waits for its answer: a read that fails means
  /// the client left (bytes it gets are a pipelined next request, kept in `pipelined_`).
  void start_watch();
  /// Ends the watch read before anyone else reads the socket.
  net::awaitable<void> stop_watch();
  /// Puts the bytes the watch read took back in front of the read buffer.
  void restore_pipelined();

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  net::steady_timer signal_;  // never expires: cancel() is the wake-up
  const server_config cfg_;
  std::shared_ptr<const handler> handler_;
  std::shared_ptr<gate> gate_;
  std::string remote_;

  std::optional<answer> answer_;  // set by on_answer, consumed by serve()
  bool finished_ = false;         // serve() has returned; late answers are dropped

  // SSE state, for the stream being written.
  std::shared_ptr<sse_impl> sse_;
  std::string sse_pending_;  // formatted events not yet written
  bool sse_close_ = false;   // the handler called close()
  bool peer_gone_ = false;   // the watch read failed, or the backlog overflowed
  bool watching_ = false;    // a watch read is outstanding
  bool sse_ending_ = false;  // the watch read is being cancelled on purpose (SSE or waiting)
  std::string pipelined_;    // bytes the watch read got: the start of the next request
  char watch_buf_[4096];
  std::shared_ptr<void> ticket_;  // released with the session: one fewer open connection
};

}  // namespace mpakt::http::detail
