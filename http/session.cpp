// One server connection: the Beast "session" of the listener → session pair, written as a
// coroutine on the connection's strand. See session.hpp for ownership and threads.

#include "http/session.hpp"

#include <sys/sendfile.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>

#include "http/sigpipe_guard.hpp"
#include "http/url.hpp"

namespace mpakt::http::detail {

namespace bhttp = beast::http;

namespace {

constexpr auto use_tuple = net::as_tuple(net::use_awaitable);

/// After refusing a request we stop sending and read (and drop) what the client still sends
/// for a moment: closing with unread data makes the kernel send RST, and the client might
/// lose our answer before reading it.
constexpr std::chrono::seconds linger_time{2};
constexpr std::size_t linger_bytes = std::size_t(16) << 20;

bool is_parse_error(const beast::error_code& ec) {
  return ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
         ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
}

/// Calls a user callback on an I/O thread without letting an exception kill the thread.
void call_guarded(const std::function<void()>& f, const char* what) {
  try {
    f();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpakt http: %s threw: %s\n", what, e.what());
  } catch (...) {
    std::fprintf(stderr, "mpakt http: %s threw\n", what);
  }
}

/// Status line and headers of a response, as the handler gave them.
bhttp::response<bhttp::empty_body> make_header(const response& r, bool keep_alive) {
  bhttp::response<bhttp::empty_body> h;
  h.version(11);
  h.result(static_cast<unsigned>(r.status));
  if (!r.content_type.empty()) h.set(bhttp::field::content_type, r.content_type);
  for (const auto& [name, value] : r.headers) h.set(name, value);
  // The handler may ask to close ("connection: close"); it cannot force keep-alive on a
  // client that asked to close.
  const bool handler_allows = h.keep_alive();
  h.keep_alive(keep_alive && handler_allows);
  return h;
}

}  // namespace

// ---- session_link ----

bool session_link::post(std::function<void(session&)> f) const {
  std::lock_guard<std::mutex> lock(gate_->m);
  if (!gate_->ioc) return false;  // the server stopped
  auto s = session_.lock();
  if (!s) return false;  // the connection is gone
  auto ex = s->executor();
  net::post(ex, [s = std::move(s), f = std::move(f)]() { f(*s); });
  return true;
}

// ---- sse_impl ----

std::string format_sse_event(std::string_view event, std::string_view data) {
  std::string out;
  out.reserve(event.size() + data.size() + 16);
  if (!event.empty()) out.append("event: ").append(event).append("\n");
  // A newline inside data would end the field: every line gets its own "data:".
  std::size_t start = 0;
  for (;;) {
    const auto nl = data.find('\n', start);
    out.append("data: ").append(data.substr(start, nl == std::string_view::npos ? nl : nl - start)).append("\n");
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out.append("\n");
  return out;
}

bool sse_impl::send(std::string_view event, std::string_view data) {
  if (closed_.load()) return false;
  auto self = shared_from_this();
  const bool posted =
      link_.post([self, text = format_sse_event(event, data)](session& s) mutable { s.on_sse_data(self, std::move(text)); });
  if (!posted) mark_disconnected();
  return posted && !closed_.load();
}

void sse_impl::close() {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (user_closed_ || disconnected_) return;
    user_closed_ = true;
  }
  closed_.store(true);
  auto self = shared_from_this();
  link_.post([self](session& s) { s.on_sse_close(self); });
}

void sse_impl::on_disconnect(std::function<void()> f) {
  std::unique_lock<std::mutex> lock(m_);
  if (disconnected_) {
    lock.unlock();
    call_guarded(f, "on_disconnect");  // the client is already gone: call it now
    return;
  }
  on_disconnect_ = std::move(f);
}

void sse_impl::mark_disconnected() {
  std::function<void()> f;
  {
    std::lock_guard<std::mutex> lock(m_);
    if (user_closed_ || disconnected_) return;
    disconnected_ = true;
    closed_.store(true);
    f = std::move(on_disconnect_);
  }
  if (f) call_guarded(f, "on_disconnect");
}

// ---- request_watch ----

void request_watch::on_disconnect(std::function<void()> f) {
  std::unique_lock<std::mutex> lock(m_);
  if (gone_) {
    lock.unlock();
    call_guarded(f, "on_disconnect");  // the client is already gone: call it now
    return;
  }
  on_gone_ = std::move(f);
}

void request_watch::mark_gone() {
  std::function<void()> f;
  {
    std::lock_guard<std::mutex> lock(m_);
    if (gone_) return;
    gone_ = true;
    f = std::move(on_gone_);
  }
  if (f) call_guarded(f, "on_disconnect");
}

// ---- responder_impl ----

responder_impl::~responder_impl() {
  if (claim()) {
    response r;
    r.status = 500;
    r.body = error_json("the request was dropped without an answer");
    deliver(answer{answer::kind::whole, std::move(r), std::nullopt, {}, {}});
  }
}

void responder_impl::deliver(answer a) {
  link_.post([a = std::move(a)](session& s) mutable { s.on_answer(std::move(a)); });
}

void responder_impl::respond(response r) {
  if (!claim()) return;
  deliver(answer{answer::kind::whole, std::move(r), std::nullopt, {}, {}});
}

std::shared_ptr<sse_stream> responder_impl::start_sse(int status, header_list headers) {
  auto stream = std::make_shared<sse_impl>(link_);
  if (!claim()) {
    stream->close();  // answered already: a stream that goes nowhere
    return stream;
  }
  response head;
  head.status = status;
  head.content_type = "text/event-stream";
  head.headers = std::move(headers);
  answer a{answer::kind::sse, std::move(head), std::nullopt, {}, stream};
  if (!link_.post([a = std::move(a)](session& s) mutable { s.on_answer(std::move(a)); })) stream->mark_disconnected();
  return stream;
}

void responder_impl::respond_stream(response head, std::optional<std::uint64_t> content_length, body_source source) {
  if (!claim()) return;
  deliver(answer{answer::kind::stream, std::move(head), content_length, std::move(source), {}});
}

// ---- file bodies ----

namespace {

/// One sendfile call; `err` is its errno (the guard's own calls may change errno after it).
ssize_t send_file_part(int socket, int fd, off_t& offset, std::size_t count, int& err) {
  sigpipe_guard guard;
  const ssize_t n = ::sendfile(socket, fd, &offset, count);
  err = errno;
  return n;
}

}  // namespace

file_handle::~file_handle() {
  if (fd >= 0) ::close(fd);
}

result<std::size_t> file_source::operator()(char* buf, std::size_t cap) {
  const std::size_t want = std::size_t(std::min<std::uint64_t>(cap, end - pos));
  if (want == 0) return std::size_t(0);
  for (;;) {
    const ssize_t n = ::pread(file->fd, buf, want, static_cast<off_t>(pos));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(errc::internal, "reading " + path + ": " + std::strerror(errno));
    if (n == 0) return make_error(errc::internal, path + " shrank while it was being sent");
    pos += static_cast<std::uint64_t>(n);
    return static_cast<std::size_t>(n);
  }
}

// ---- session ----

session::session(tcp::socket socket, const server_config& cfg, std::shared_ptr<const handler> h,
                 std::shared_ptr<gate> g)
    : stream_(std::move(socket)),
      signal_(stream_.get_executor()),
      cfg_(cfg),
      handler_(std::move(h)),
      gate_(std::move(g)) {
  beast::error_code ec;
  const auto ep = stream_.socket().remote_endpoint(ec);
  if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
}

session::~session() {
  // Dropped with the io_context (server::stop) in the middle of a stream.
  if (sse_) sse_->mark_disconnected();
}

net::awaitable<void> session::run(std::shared_ptr<session> self) {
  co_await self->serve();
  self->finished_ = true;
  if (self->sse_) self->sse_->mark_disconnected();
  beast::error_code ec;
  self->stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  self->stream_.socket().close(ec);
}

void session::on_answer(answer a) {
  if (finished_ || answer_) {
    if (a.sse) a.sse->mark_disconnected();  // the connection ended before the stream began
    return;
  }
  if (a.k == answer::kind::sse) sse_ = a.sse;
  answer_ = std::move(a);
  notify();
}

void session::on_sse_data(const std::shared_ptr<sse_impl>& s, std::string text) {
  if (s != sse_) {
    if (finished_) s->mark_disconnected();
    return;
  }
  sse_pending_ += text;
  if (sse_pending_.size() > cfg_.sse_backlog_limit && !peer_gone_) {
    // The client does not keep up: drop it rather than queue without end. Cancelling ends
    // the write that is stuck waiting for it.
    peer_gone_ = true;
    beast::error_code ec;
    stream_.socket().cancel(ec);
  }
  notify();
}

void session::on_sse_close(const std::shared_ptr<sse_impl>& s) {
  if (s != sse_) return;
  sse_close_ = true;
  notify();
}

net::awaitable<void> session::wait() {
  signal_.expires_at(net::steady_timer::time_point::max());
  co_await signal_.async_wait(use_tuple);
}

void session::notify() { signal_.cancel(); }

void session::start_watch() {
  watching_ = true;
  // The raw socket, not the tcp_stream: this read must not run under the write timeout.
  stream_.socket().async_read_some(
      net::buffer(watch_buf_), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
        self->watching_ = false;
        self->pipelined_.append(self->watch_buf_, n);
        if (!ec && !self->sse_ending_) {
          // Data while streaming is a pipelined next request: keep it, and keep watching
          // unless the client floods us (then the writes alone notice a disconnect).
          if (self->pipelined_.size() <= self->cfg_.header_limit) self->start_watch();
          return;
        }
        if (ec && !self->sse_ending_) self->peer_gone_ = true;  // EOF or reset mid-stream: the client left
        self->notify();
      });
}

net::awaitable<void> session::stop_watch() {
  sse_ending_ = true;
  if (watching_) {
    beast::error_code ec;
    stream_.socket().cancel(ec);
  }
  while (watching_) co_await wait();
  sse_ending_ = false;
}

void session::restore_pipelined() {
  if (pipelined_.empty()) return;
  const auto n = net::buffer_copy(buffer_.prepare(pipelined_.size()), net::buffer(pipelined_));
  buffer_.commit(n);
  pipelined_.clear();
}

net::awaitable<void> session::serve() {
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    // Limits from the config. The body limit is applied after the header, so that an
    // over-long Content-Length can be named in the 413.
    parser.header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(cfg_.header_limit, UINT32_MAX)));
    parser.body_limit(boost::none);

    // Between requests the connection may sit idle only this long; once a request's first
    // byte is here, its header must be complete within header_timeout (a client trickling
    // it is dropped).
    if (buffer_.size() == 0) {
      stream_.expires_after(cfg_.idle_timeout);
      auto [fec, fn] = co_await stream_.async_read_some(buffer_.prepare(4096), use_tuple);
      if (fec) co_return;  // closed between requests (the normal end), idle too long, or reset
      buffer_.commit(fn);
    }
    stream_.expires_after(cfg_.header_timeout);
    auto [ec, n] = co_await bhttp::async_read_header(stream_, buffer_, parser, use_tuple);
    if (ec == bhttp::error::end_of_stream) co_return;  // the client closed between requests: the normal end
    if (ec == bhttp::error::header_limit) {
      co_await refuse(431, "request header is over the " + std::to_string(cfg_.header_limit) + "-byte limit");
      co_return;
    }
    if (is_parse_error(ec)) {
      co_await refuse(400, "malformed request: " + ec.message());
      co_return;
    }
    if (ec) co_return;  // timed out, reset, or cut off mid-header: no one to answer

    if (const auto len = parser.content_length(); len && *len > cfg_.body_limit) {
      co_await refuse(413, "request body of " + std::to_string(*len) + " bytes is over the " +
                               std::to_string(cfg_.body_limit) + "-byte limit");
      co_return;
    }
    parser.body_limit(cfg_.body_limit);  // a chunked body is checked as it arrives
    if (!parser.is_done()) {
      const auto& h = parser.get();
      if (beast::iequals(h[bhttp::field::expect], "100-continue")) {
        // curl and others wait for this before sending a large body.
        static constexpr char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        stream_.expires_after(cfg_.idle_timeout);
        auto [wec, wn] = co_await net::async_write(stream_, net::buffer(cont, sizeof cont - 1), use_tuple);
        if (wec) co_return;
      }
      stream_.expires_after(cfg_.body_timeout);  // the whole body; a trickling one is dropped
      auto [bec, bn] = co_await bhttp::async_read(stream_, buffer_, parser, use_tuple);
      if (bec == bhttp::error::body_limit) {
        co_await refuse(413, "request body is over the " + std::to_string(cfg_.body_limit) + "-byte limit");
        co_return;
      }
      if (is_parse_error(bec)) {
        co_await refuse(400, "malformed request body: " + bec.message());
        co_return;
      }
      if (bec) co_return;
    }

    auto msg = parser.release();
    const bool head_only = msg.method() == bhttp::verb::head;
    const bool keep_alive = msg.keep_alive();
    request req;
    req.method = std::string(msg.method_string());
    req.remote = remote_;
    std::string why;
    auto target = parse_request_target(msg.target(), &why);
    if (!target) {
      co_await refuse(400, why);
      co_return;
    }
    req.path = std::move(target->path);
    req.query = std::move(target->query);
    for (const auto& f : msg) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
      req.headers.emplace_back(std::move(name), std::string(f.value()));
    }
    req.body = std::move(msg.body());

    // Hand it over. The responder reaches back here through a post to this strand; a
    // handler that throws drops the responder, which answers 500.
    answer_.reset();
    auto watch = std::make_shared<request_watch>();
    try {
      (*handler_)(std::move(req), std::make_shared<responder_impl>(session_link(gate_, weak_from_this()), watch));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mpakt http: handler threw: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "mpakt http: handler threw\n");
    }
    // No timeout: the handler decides how long it takes. Meanwhile a client that leaves is
    // noticed (a graph call then stops), and the connection ends without an answer.
    peer_gone_ = false;
    if (!answer_) start_watch();
    while (!answer_ && !peer_gone_) co_await wait();
    if (!answer_) {
      watch->mark_gone();
      co_return;
    }
    co_await stop_watch();
    restore_pipelined();

    bool again = false;
    switch (answer_->k) {
      case answer::kind::whole: again = co_await write_whole(answer_->head, head_only, keep_alive); break;
      case answer::kind::stream: again = co_await write_stream(*answer_, head_only, keep_alive); break;
      case answer::kind::sse: again = co_await write_sse(*answer_, head_only, keep_alive); break;
    }
    answer_.reset();
    if (!again) co_return;
  }
}

net::awaitable<bool> session::write_whole(response& r, bool head_only, bool keep_alive) {
  auto h = make_header(r, keep_alive);
  const bool again = h.keep_alive();
  stream_.expires_after(cfg_.idle_timeout);
  if (head_only) {
    // Headers only, with the length the body would have (unless the handler said).
    auto& res = h;
    if (res.find(bhttp::field::content_length) == res.end()) res.content_length(r.body.size());
    bhttp::response_serializer<bhttp::empty_body> sr(res);
    auto [ec, n] = co_await bhttp::async_write_header(stream_, sr, use_tuple);
    co_return !ec && again;
  }
  bhttp::response<bhttp::string_body> res(std::move(h.base()), std::move(r.body));
  res.prepare_payload();
  auto [ec, n] = co_await bhttp::async_write(stream_, res, use_tuple);
  co_return !ec && again;
}

net::awaitable<bool> session::write_stream(answer& a, bool head_only, bool keep_alive) {
  auto res = make_header(a.head, keep_alive);
  const bool again = res.keep_alive();
  if (a.content_length)
    res.content_length(*a.content_length);
  else
    res.chunked(true);
  bhttp::response_serializer<bhttp::empty_body> sr(res);
  stream_.expires_after(cfg_.idle_timeout);
  if (auto [ec, n] = co_await bhttp::async_write_header(stream_, sr, use_tuple); ec) co_return false;
  if (head_only) co_return again;

  if (auto* f = a.source.target<file_source>(); f && a.content_length) {
    const bool sent = co_await send_file(*f, *a.content_length);
    co_return sent && again;
  }

  // Pull a piece, write it, repeat: the piece buffer is all this response holds.
  std::uint64_t left = a.content_length.value_or(UINT64_MAX);
  std::vector<char> buf(std::max<std::size_t>(1, a.content_length ? std::min<std::uint64_t>(cfg_.stream_chunk_bytes, left)
                                                                   : cfg_.stream_chunk_bytes));
  while (left > 0) {
    const std::size_t want = std::min<std::uint64_t>(buf.size(), left);
    result<std::size_t> got = std::size_t(0);
    try {
      got = a.source(buf.data(), want);
    } catch (const std::exception& e) {
      got = make_error(errc::internal, e.what());
    }
    if (!got) {
      std::fprintf(stderr, "mpakt http: streamed body for %s failed: %s\n", remote_.c_str(), got.err().message.c_str());
      co_return false;  // the promised body cannot be completed: closing tells the client
    }
    const std::size_t n = std::min(*got, want);
    if (n == 0) break;
    stream_.expires_after(cfg_.idle_timeout);
    if (a.content_length) {
      auto [ec, w] = co_await net::async_write(stream_, net::buffer(buf.data(), n), use_tuple);
      if (ec) co_return false;
      left -= n;
    } else {
      auto [ec, w] = co_await net::async_write(stream_, bhttp::make_chunk(net::buffer(buf.data(), n)), use_tuple);
      if (ec) co_return false;
    }
  }
  if (a.content_length) co_return left == 0 && again;  // a short body breaks the framing
  stream_.expires_after(cfg_.idle_timeout);
  auto [ec, w] = co_await net::async_write(stream_, bhttp::make_chunk_last(), use_tuple);
  co_return !ec && again;
}

net::awaitable<bool> session::send_file(file_source& f, std::uint64_t length) {
  auto& socket = stream_.socket();
  beast::error_code ec;
  socket.native_non_blocking(true, ec);  // sendfile must not block this I/O thread
  if (ec) co_return false;
  std::uint64_t left = length;
  while (left > 0) {
    off_t off = static_cast<off_t>(f.pos);
    int err = 0;
    const ssize_t n = send_file_part(socket.native_handle(), f.file->fd, off,
                                     std::size_t(std::min<std::uint64_t>(left, std::uint64_t(1) << 30)), err);
    if (n > 0) {
      f.pos += std::uint64_t(n);
      left -= std::uint64_t(n);
      continue;
    }
    if (n == 0) {
      std::fprintf(stderr, "mpakt http: %s shrank while it was being sent to %s\n", f.path.c_str(), remote_.c_str());
      co_return false;  // the promised body cannot be completed: closing tells the client
    }
    if (err == EINTR) continue;
    if (err != EAGAIN && err != EWOULDBLOCK) co_return false;  // the client left
    // The socket's buffer is full: wait until it drains, for the idle timeout at most.
    net::steady_timer timer(stream_.get_executor());
    timer.expires_after(cfg_.idle_timeout);
    auto waiting = std::make_shared<bool>(true);  // a late expiry must not cancel a later wait
    timer.async_wait([&socket, waiting](beast::error_code e) {
      if (!e && *waiting) socket.cancel();  // a client that stopped reading
    });
    auto [wec] = co_await socket.async_wait(tcp::socket::wait_write, use_tuple);
    *waiting = false;
    timer.cancel();
    if (wec) co_return false;
  }
  co_return true;
}

net::awaitable<bool> session::write_sse(answer& a, bool head_only, bool keep_alive) {
  a.head.headers.emplace_back("cache-control", "no-cache");
  auto res = make_header(a.head, keep_alive);
  const bool again = res.keep_alive();
  res.chunked(true);
  bhttp::response_serializer<bhttp::empty_body> sr(res);
  stream_.expires_after(cfg_.idle_timeout);
  auto [hec, hn] = co_await bhttp::async_write_header(stream_, sr, use_tuple);
  if (hec || head_only) {
    // No stream to write: a failed write means the client left; HEAD wants no events.
    if (hec) sse_->mark_disconnected(); else sse_->close();
    sse_.reset();
    sse_pending_.clear();
    sse_close_ = false;
    co_return !hec && again;
  }

  sse_ending_ = false;
  peer_gone_ = false;
  start_watch();
  bool clean = false;
  for (;;) {
    while (sse_pending_.empty() && !sse_close_ && !peer_gone_) co_await wait();
    if (peer_gone_) break;
    if (!sse_pending_.empty()) {
      // Everything queued so far goes out as one chunk, in the order sent.
      std::string out;
      out.swap(sse_pending_);
      stream_.expires_after(cfg_.idle_timeout);
      auto [ec, n] = co_await net::async_write(stream_, bhttp::make_chunk(net::buffer(out)), use_tuple);
      if (ec) {
        peer_gone_ = true;
        break;
      }
      continue;
    }
    // close(): the last chunk ends the response and the connection goes back to reading.
    stream_.expires_after(cfg_.idle_timeout);
    auto [ec, n] = co_await net::async_write(stream_, bhttp::make_chunk_last(), use_tuple);
    clean = !ec;
    break;
  }

  // Stop the watch read before anyone else reads this socket.
  co_await stop_watch();
  if (!clean) sse_->mark_disconnected();
  sse_.reset();
  sse_pending_.clear();
  sse_close_ = false;
  if (!clean || peer_gone_) co_return false;
  // Bytes of a pipelined next request that the watch read took go back in front.
  restore_pipelined();
  co_return again;
}

net::awaitable<void> session::refuse(int status, const std::string& message) {
  bhttp::response<bhttp::string_body> res(static_cast<bhttp::status>(status), 11);
  res.set(bhttp::field::content_type, "application/json");
  res.keep_alive(false);
  res.body() = error_json(message);
  res.prepare_payload();
  stream_.expires_after(cfg_.idle_timeout);
  auto [ec, n] = co_await bhttp::async_write(stream_, res, use_tuple);
  if (!ec) co_await lingering_close();
}

net::awaitable<void> session::lingering_close() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.expires_after(linger_time);  // one deadline for all the reads below
  std::size_t total = 0;
  char sink[16384];
  while (total < linger_bytes) {
    auto [rec, n] = co_await stream_.async_read_some(net::buffer(sink), use_tuple);
    if (rec) break;
    total += n;
  }
}

}  // namespace mpakt::http::detail
