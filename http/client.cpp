// The blocking client of client.hpp. Every network step is an async Beast operation run to
// completion on the client's private io_context, because only async operations honour
// tcp_stream's timeouts; the caller's thread is the only one that runs it.

#include "http/client.hpp"

#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <variant>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "http/url.hpp"

namespace mpakt::http {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

const std::string* client_response::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers)
    if (name == lower_name) return &value;
  return nullptr;
}

namespace {

/// Response headers are read whole; bodies never are (they go through buffer_body).
constexpr std::uint32_t response_header_limit = 64 * 1024;
/// Bodies of redirects and of answers not handed to a sink (errors, ignored ranges) are kept
/// up to this much, for messages; past it the connection is dropped instead of drained.
constexpr std::size_t side_body_limit = 64 * 1024;
/// Piece size for get(): the body grows in a string anyway, this only sizes the reads.
constexpr std::size_t get_piece_bytes = 64 * 1024;
/// Connections kept alive at once (the hub and its CDN, a worker's peers).
constexpr std::size_t max_idle_connections = 4;

using plain_stream = beast::tcp_stream;
using tls_stream = beast::ssl_stream<beast::tcp_stream>;

bool is_redirect(unsigned s) { return s == 301 || s == 302 || s == 303 || s == 307 || s == 308; }

/// An error that says the server closed a kept-alive connection before we used it.
bool is_stale(const beast::error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
         ec == net::error::broken_pipe || ec == bhttp::error::partial_message || ec == ssl::error::stream_truncated;
}

}  // namespace

struct client::impl {
  /// One kept-alive connection to scheme://host:port.
  struct connection {
    std::variant<std::unique_ptr<plain_stream>, std::unique_ptr<tls_stream>> stream;
    beast::flat_buffer buffer;

    beast::tcp_stream& tcp() {
      return std::visit([](auto& s) -> beast::tcp_stream& { return beast::get_lowest_layer(*s); }, stream);
    }
  };

  /// What to do with the body of the final response.
  enum class mode { head, whole, sink, into };

  /// Where a streamed body goes: a sink in chunks (mode::sink) or caller memory (mode::into).
  struct body_target {
    std::size_t chunk_bytes = 0;
    const std::function<bool(std::string_view)>* sink = nullptr;
    std::span<const std::span<char>> parts;
    std::uint64_t* received = nullptr;
    const std::function<void(std::size_t)>* filled = nullptr;  ///< (mode::into) a part is full
  };

  /// A write position over the caller's parts (mode::into).
  struct parts_cursor {
    std::span<const std::span<char>> parts;
    const std::function<void(std::size_t)>* filled = nullptr;
    std::size_t part = 0;
    std::size_t offset = 0;  ///< within parts[part]

    /// Where the next bytes go: the rest of the current part (empty when all are full). The
    /// parts it passes, full, are announced to `filled` first.
    std::span<char> room() {
      while (part < parts.size() && offset == parts[part].size()) {
        if (filled) (*filled)(part);
        ++part;
        offset = 0;
      }
      return part < parts.size() ? parts[part].subspan(offset) : std::span<char>();
    }
    void advance(std::size_t n) { offset += n; }
    /// Copies `bytes` in; false when they do not fit.
    bool put(std::string_view bytes) {
      while (!bytes.empty()) {
        auto r = room();
        if (r.empty()) return false;
        const std::size_t n = std::min(r.size(), bytes.size());
        std::memcpy(r.data(), bytes.data(), n);
        advance(n);
        bytes.remove_prefix(n);
      }
      return true;
    }
  };

  client_options opts;
  net::io_context ioc;
  std::optional<ssl::context> tls_ctx;  // made on the first https URL: loading the CA store takes ~40 ms
  std::map<std::string, std::unique_ptr<connection>> pool;  // by scheme://host:port

  explicit impl(client_options o) : opts(o) {}

  result<ssl::context*> tls_context() {
    if (!tls_ctx) {
      ssl::context ctx(ssl::context::tls_client);
      beast::error_code ec;
      ctx.set_default_verify_paths(ec);
      if (!ec && !opts.ca_file.empty()) ctx.load_verify_file(opts.ca_file, ec);
      if (ec) return make_error(errc::invalid, "cannot load trusted certificates" +
                                                   (opts.ca_file.empty() ? std::string() : " from " + opts.ca_file) +
                                                   ": " + ec.message());
      SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
      tls_ctx.emplace(std::move(ctx));
    }
    return &*tls_ctx;
  }

  /// Runs one async operation to completion on this thread and returns its error.
  template <class Initiate>
  beast::error_code run(Initiate&& initiate) {
    beast::error_code result = net::error::would_block;
    initiate([&result](beast::error_code ec, auto&&...) { result = ec; });
    ioc.restart();
    ioc.run();
    return result;
  }

  /// Runs one async read to completion on this thread: its error and the bytes it read.
  template <class Initiate>
  std::pair<beast::error_code, std::size_t> run_read(Initiate&& initiate) {
    beast::error_code result = net::error::would_block;
    std::size_t n = 0;
    initiate([&](beast::error_code ec, std::size_t got) {
      result = ec;
      n = got;
    });
    ioc.restart();
    ioc.run();
    return {result, n};
  }

  std::string op_name(mode m) const { return m == mode::head ? "HEAD" : "GET"; }

  error net_error(const beast::error_code& ec, const std::string& what, const url& u, mode m) const {
    const std::string where = op_name(m) + " " + u.str() + ": ";
    if (ec == beast::error::timeout || ec == net::error::timed_out)
      return make_error(errc::timeout,
                        where + what + " timed out after " + std::to_string(opts.timeout.count()) + " ms");
    return make_error(errc::unavailable, where + what + " failed: " + ec.message());
  }

  /// Opens a connection to u's host: resolve, connect, and for https the TLS handshake.
  result<std::unique_ptr<connection>> connect(const url& u, mode m) {
    const std::string host_port = u.host + ":" + std::to_string(u.port);
    // Resolve, with the timeout done by hand: the resolver has none of its own.
    tcp::resolver resolver(ioc);
    tcp::resolver::results_type endpoints;
    bool timed_out = false;
    net::steady_timer timer(ioc, opts.timeout);
    timer.async_wait([&](beast::error_code ec) {
      if (!ec) {
        timed_out = true;
        resolver.cancel();
      }
    });
    beast::error_code ec = net::error::would_block;
    resolver.async_resolve(u.host, std::to_string(u.port), [&](beast::error_code e, tcp::resolver::results_type r) {
      ec = e;
      endpoints = std::move(r);
      timer.cancel();
    });
    ioc.restart();
    ioc.run();
    if (timed_out) return net_error(beast::error::timeout, "resolving " + u.host, u, m);
    if (ec) return make_error(errc::unavailable, op_name(m) + " " + u.str() + ": cannot resolve host " + u.host + ": " + ec.message());
    if (!opts.allow_private_addresses &&
        std::find(opts.trusted_origins.begin(), opts.trusted_origins.end(), u.origin()) == opts.trusted_origins.end())
      for (const auto& e : endpoints) {
        const std::string address = e.endpoint().address().to_string();
        if (!is_public_address(address))
          return make_error(errc::forbidden, op_name(m) + " " + u.str() + ": host " + u.host + " resolves to " + address +
                                                 ", which is not a public address");
      }

    auto c = std::make_unique<connection>();
    if (u.tls()) {
      auto ctx = tls_context();
      if (!ctx) return std::move(ctx).err();
      auto s = std::make_unique<tls_stream>(ioc, **ctx);
      // SNI: without it, hosts behind shared front ends (the hub's CDN) present the wrong
      // certificate or none.
      if (!SSL_set_tlsext_host_name(s->native_handle(), u.host.c_str()))
        return make_error(errc::internal, "cannot set SNI host name " + u.host);
      if (opts.verify_tls) {
        s->set_verify_mode(ssl::verify_peer);
        s->set_verify_callback(ssl::host_name_verification(u.host));
      } else {
        s->set_verify_mode(ssl::verify_none);
      }
      c->stream = std::move(s);
    } else {
      c->stream = std::make_unique<plain_stream>(ioc);
    }
    auto& tcp = c->tcp();
    tcp.expires_after(opts.timeout);
    ec = run([&](auto h) { tcp.async_connect(endpoints, std::move(h)); });
    if (ec == beast::error::timeout) return net_error(ec, "connecting to " + host_port, u, m);
    if (ec) return make_error(errc::unavailable, op_name(m) + " " + u.str() + ": cannot connect to " + host_port + ": " + ec.message());
    tcp.socket().set_option(tcp::no_delay(true), ec);
    if (auto* s = std::get_if<std::unique_ptr<tls_stream>>(&c->stream)) {
      tcp.expires_after(opts.timeout);
      ec = run([&](auto h) { (*s)->async_handshake(ssl::stream_base::client, std::move(h)); });
      if (ec == beast::error::timeout) return net_error(ec, "TLS handshake with " + host_port, u, m);
      if (ec) return make_error(errc::unavailable, op_name(m) + " " + u.str() + ": TLS handshake with " + host_port + " failed: " + ec.message());
    }
    return c;
  }

  void drop(const std::string& key) { pool.erase(key); }

  /// One request/response with redirects. `target` says where a streamed body goes.
  result<client_response> perform(const std::string& text, mode m, std::optional<byte_range> range,
                                   const body_target& target) {
    auto parsed = parse_url(text);
    if (!parsed) return make_error(errc::invalid, "malformed URL \"" + text + "\" (want http:// or https://)");
    if (range && range->last < range->first)
      return make_error(errc::invalid, op_name(m) + " " + text + ": byte range " + std::to_string(range->first) + "-" +
                                           std::to_string(range->last) + " ends before it starts");
    if (m == mode::sink && target.chunk_bytes == 0) return make_error(errc::invalid, "GET " + text + ": chunk size 0");
    url u = *parsed;
    std::string commit;
    for (int hop = 0;; ++hop) {
      client_response out;
      out.final_url = u.str();
      bool redirected = false;
      url next;
      auto st = exchange(u, m, range, target, out, redirected, next);
      if (!st) return std::move(st).err();
      if (const auto* c = out.header("x-repo-commit"); c && commit.empty()) commit = *c;
      if (!redirected) {
        out.repo_commit = commit;
        return out;
      }
      if (hop >= opts.max_redirects)
        return make_error(errc::unavailable, op_name(m) + " " + text + ": more than " +
                                                 std::to_string(opts.max_redirects) + " redirects (last to " +
                                                 next.str() + ")");
      u = next;
    }
  }

  /// One hop: send the request on a pooled (or new) connection and read the answer.
  /// Sets `redirected` and `next` when the answer is a redirect to follow.
  status exchange(const url& u, mode m, std::optional<byte_range> range, const body_target& target,
                  client_response& out, bool& redirected, url& next) {
    const std::string key = u.scheme + "://" + u.host + ":" + std::to_string(u.port);
    bhttp::request<bhttp::empty_body> req(m == mode::head ? bhttp::verb::head : bhttp::verb::get, u.target, 11);
    req.set(bhttp::field::host, u.host_header());
    req.set(bhttp::field::user_agent, "mpakt");
    req.keep_alive(true);
    if (range) req.set(bhttp::field::range, "bytes=" + std::to_string(range->first) + "-" + std::to_string(range->last));
    if (!opts.bearer_token.empty() && u.origin() == opts.bearer_origin)
      req.set(bhttp::field::authorization, "Bearer " + opts.bearer_token);
    if (u.origin() == opts.bearer_origin)
      for (const auto& [name, value] : opts.origin_headers) req.set(name, value);

    // A pooled connection may have been closed by the server since; if the first exchange
    // on it fails that way, reconnect once and send again.
    std::optional<bhttp::response_parser<bhttp::buffer_body>> parser;
    connection* c = nullptr;
    for (int attempt = 0;; ++attempt) {
      bool reused = false;
      if (auto it = pool.find(key); it != pool.end()) {
        c = it->second.get();
        reused = true;
      } else {
        auto fresh = connect(u, m);
        if (!fresh) return std::move(fresh).err();
        if (pool.size() >= max_idle_connections) pool.erase(pool.begin());
        c = pool.emplace(key, std::move(*fresh)).first->second.get();
      }
      c->tcp().expires_after(opts.timeout);
      auto ec = std::visit([&](auto& s) { return run([&](auto h) { bhttp::async_write(*s, req, std::move(h)); }); },
                           c->stream);
      if (!ec) {
        parser.emplace();
        parser->header_limit(response_header_limit);
        parser->body_limit(boost::none);  // bodies are bounded by max_body / chunk_bytes below
        if (m == mode::head) parser->skip(true);
        c->tcp().expires_after(opts.timeout);
        ec = std::visit(
            [&](auto& s) { return run([&](auto h) { bhttp::async_read_header(*s, c->buffer, *parser, std::move(h)); }); },
            c->stream);
      }
      if (!ec) break;
      drop(key);
      if (reused && attempt == 0 && is_stale(ec)) continue;
      return net_error(ec, "the request", u, m);
    }

    auto& res = parser->get();
    out.status = static_cast<int>(res.result_int());
    for (const auto& f : res) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
      out.headers.emplace_back(std::move(name), std::string(f.value()));
    }
    const bool keep = res.keep_alive();

    if (is_redirect(res.result_int()) && res.find(bhttp::field::location) != res.end()) {
      const std::string location(res[bhttp::field::location]);
      auto target = resolve_location(u, location);
      if (!target)
        return make_error(errc::invalid, op_name(m) + " " + u.str() + ": cannot follow redirect to \"" + location + "\"");
      if (m != mode::head) {
        std::string ignored;
        MPAKT_TRY(read_side_body(*c, key, *parser, u, m, ignored));
      }
      if (!keep || !parser->is_done()) drop(key);
      redirected = true;
      next = *target;
      return ok_status();
    }

    if (m == mode::head) {
      if (!keep) drop(key);
      return ok_status();
    }

    const bool success = out.status >= 200 && out.status < 300;
    if (m == mode::whole) {
      if (const auto len = parser->content_length(); len && *len > opts.max_body) {
        drop(key);
        return too_large(u, *len);
      }
      bool over = false;
      auto st = read_body(*c, *parser, get_piece_bytes, u, m, [&](std::string_view piece) {
        over = out.body.size() + piece.size() > opts.max_body;
        if (!over) out.body.append(piece);
        return !over;
      });
      if (!st) {
        drop(key);
        return st;
      }
      if (over) {  // a chunked body past max_body
        drop(key);
        return too_large(u, std::nullopt);
      }
      if (!keep) drop(key);
      return ok_status();
    }

    // mode::sink and mode::into. Only the body asked for is delivered: a 200 answer to a
    // range request (a host that ignores Range) or an error page would be taken for tensor
    // bytes.
    const bool deliver = success && (!range || out.status == 206);
    if (!deliver) {
      MPAKT_TRY(read_side_body(*c, key, *parser, u, m, out.body));
      if (!keep || !parser->is_done()) drop(key);
      return ok_status();
    }
    if (m == mode::into) {
      bool reusable = false;
      auto st = read_body_into(*c, *parser, u, target, reusable);
      if (!st || !reusable || !keep) drop(key);
      return st;
    }
    bool refused = false;
    auto st = read_body(*c, *parser, target.chunk_bytes, u, m, [&](std::string_view piece) {
      if ((*target.sink)(piece)) return true;
      refused = true;
      return false;
    });
    if (!st) {
      drop(key);
      return st;
    }
    if (refused) {
      drop(key);
      return make_error(errc::conflict, "GET " + u.str() + ": the receiver stopped the download");
    }
    if (!keep) drop(key);
    return ok_status();
  }

  error too_large(const url& u, std::optional<std::uint64_t> len) const {
    return make_error(errc::too_large, "GET " + u.str() + ": body" +
                                           (len ? " of " + std::to_string(*len) + " bytes" : std::string()) +
                                           " is over the " + std::to_string(opts.max_body) + "-byte limit");
  }

  /// Reads a body we only keep for messages (redirects, errors): up to side_body_limit, the
  /// rest left unread (the caller drops the connection when the parser is not done).
  status read_side_body(connection& c, const std::string& key, bhttp::response_parser<bhttp::buffer_body>& p,
                        const url& u, mode m, std::string& body) {
    if (const auto len = p.content_length(); len && *len > side_body_limit) return ok_status();
    auto st = read_body(c, p, side_body_limit, u, m, [&](std::string_view piece) {
      body.append(piece);
      return body.size() < side_body_limit;
    });
    if (!st) drop(key);
    return st;
  }

  /// mode::into: the body straight into the target's parts. With a Content-Length (what model
  /// hosts send for ranges), the bytes Beast read along with the header are copied out of
  /// the connection's buffer and the rest is read from the socket directly into the parts,
  /// in reads as large as the kernel has data for — no 64 KiB staging buffer, no per-read
  /// copy. Otherwise (chunked) Beast parses it and the pieces are copied in. `reusable`:
  /// the body was consumed exactly, so the connection can serve the next request.
  status read_body_into(connection& c, bhttp::response_parser<bhttp::buffer_body>& p, const url& u,
                        const body_target& t, bool& reusable) {
    std::uint64_t cap = 0;
    for (const auto& part : t.parts) cap += part.size();
    parts_cursor cur{t.parts, t.filled};
    const auto more_than_asked = [&] {
      return make_error(errc::conflict, "GET " + u.str() + ": the answer has more bytes than the " + std::to_string(cap) +
                                            " asked for");
    };
    const auto len = p.content_length();
    if (p.chunked() || !len) {
      bool over = false;
      std::uint64_t got = 0;
      MPAKT_TRY(read_body(c, p, std::size_t(1) << 20, u, mode::into, [&](std::string_view piece) {
        over = !cur.put(piece);
        got += piece.size();
        return !over;
      }));
      if (over) return more_than_asked();
      cur.room();  // (announces the parts the body filled)
      *t.received = got;
      reusable = p.is_done();
      return ok_status();
    }
    if (*len > cap) return more_than_asked();
    // What arrived with the header.
    const auto buffered = c.buffer.data();
    const std::size_t early = std::size_t(std::min<std::uint64_t>(net::buffer_size(buffered), *len));
    cur.put(std::string_view(static_cast<const char*>(buffered.data()), early));
    c.buffer.consume(early);
    std::uint64_t done = early;
    auto* tls = std::get_if<std::unique_ptr<tls_stream>>(&c.stream);
    while (done < *len) {
      auto room = cur.room();
      const std::size_t want = std::size_t(std::min<std::uint64_t>(room.size(), *len - done));
      std::size_t n = 0;
      if (tls) {
        c.tcp().expires_after(opts.timeout);
        auto [ec, got] = run_read([&](auto h) { (*tls)->async_read_some(net::buffer(room.data(), want), std::move(h)); });
        if (ec) return net_error(ec, "reading the body", u, mode::into);
        n = got;
      } else {
        auto got = recv_some(c.tcp().socket().native_handle(), room.data(), want, u);
        if (!got) return std::move(got).err();
        n = *got;
      }
      cur.advance(n);
      done += n;
    }
    cur.room();  // (announces the parts the body filled)
    *t.received = done;
    reusable = true;
    return ok_status();
  }

  /// One read from a plain socket into `dst`: whatever the kernel holds, up to `n` bytes,
  /// waiting (poll, up to the timeout) only when it holds nothing. Used without Asio because
  /// a blocking client gains nothing from the reactor here, and each Asio read would arm a
  /// timer and go through epoll — most of the cost of a loopback load.
  result<std::size_t> recv_some(int fd, char* dst, std::size_t n, const url& u) {
    for (;;) {
      const ssize_t r = ::recv(fd, dst, n, MSG_DONTWAIT);
      if (r > 0) return std::size_t(r);
      if (r == 0) return net_error(bhttp::error::partial_message, "reading the body", u, mode::into);
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        return net_error(beast::error_code(errno, boost::system::system_category()), "reading the body", u, mode::into);
      pollfd pfd{fd, POLLIN, 0};
      const int ready = ::poll(&pfd, 1, int(std::min<std::int64_t>(opts.timeout.count(), INT32_MAX)));
      if (ready == 0) return net_error(beast::error::timeout, "reading the body", u, mode::into);
      if (ready < 0 && errno != EINTR)
        return net_error(beast::error_code(errno, boost::system::system_category()), "reading the body", u, mode::into);
    }
  }

  /// Reads the body in pieces of at most `piece_bytes` (every piece but the last is full) and
  /// hands each to `on_piece`, which returns false to stop early (the parser is then not done).
  template <class OnPiece>
  status read_body(connection& c, bhttp::response_parser<bhttp::buffer_body>& p, std::size_t piece_bytes,
                   const url& u, mode m, OnPiece&& on_piece) {
    std::vector<char> piece(piece_bytes);
    std::size_t filled = 0;
    while (!p.is_done()) {
      p.get().body().data = piece.data() + filled;
      p.get().body().size = piece.size() - filled;
      c.tcp().expires_after(opts.timeout);
      auto ec = std::visit(
          [&](auto& s) { return run([&](auto h) { bhttp::async_read_some(*s, c.buffer, p, std::move(h)); }); },
          c.stream);
      if (ec == bhttp::error::need_buffer) ec = {};  // the piece is full
      if (ec == ssl::error::stream_truncated && p.need_eof()) {
        // A TLS server that ends an EOF-delimited body without close_notify.
        p.put_eof(ec);
      }
      if (ec) return net_error(ec, "reading the body", u, m);
      filled = piece.size() - p.get().body().size;
      if (filled == piece.size() || (p.is_done() && filled > 0)) {
        if (!on_piece(std::string_view(piece.data(), filled))) return ok_status();
        filled = 0;
      }
    }
    return ok_status();
  }
};

client::client(client_options opts) : p_(std::make_unique<impl>(opts)) {}
client::~client() = default;

result<client_response> client::get(const std::string& url, std::optional<byte_range> range) {
  return p_->perform(url, impl::mode::whole, range, {});
}

result<client_response> client::head(const std::string& url) {
  return p_->perform(url, impl::mode::head, std::nullopt, {});
}

result<client_response> client::get_stream(const std::string& url, std::optional<byte_range> range,
                                           std::size_t chunk_bytes,
                                           const std::function<bool(std::string_view chunk)>& sink) {
  impl::body_target t;
  t.chunk_bytes = chunk_bytes;
  t.sink = &sink;
  return p_->perform(url, impl::mode::sink, range, t);
}

result<client_response> client::get_range_into(const std::string& url, byte_range range,
                                               std::span<const std::span<char>> parts, std::uint64_t& received,
                                               const std::function<void(std::size_t)>* filled) {
  received = 0;
  impl::body_target t;
  t.parts = parts;
  t.received = &received;
  t.filled = filled;
  return p_->perform(url, impl::mode::into, range, t);
}

}  // namespace mpakt::http
