// The server: the listener half of Beast's listener → session pair, the I/O threads, and the
// helpers of server.hpp (error_json, the streaming responder methods).

#include "http/server.hpp"

// GCC 12 pairs Boost.Asio's coroutine frame deallocation (awaitable_frame_base's sized
// operator delete) with the wrong allocation function when it inlines a frame's destruction,
// and warns -Wmismatched-new-delete; both are Asio's own pair.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "http/session.hpp"
#include "runtime/utf8.hpp"

namespace mpakt::http {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

// ---- small helpers of server.hpp ----

const std::string* request::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers)
    if (name == lower_name) return &value;
  return nullptr;
}

std::string error_json(std::string_view message) {
  std::string out = "{\"error\": \"";
  for (std::size_t i = 0; i < message.size();) {
    const char c = message[i];
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      default: break;
    }
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(static_cast<unsigned char>(c)));
      out += buf;
      ++i;
      continue;
    }
    // Messages quote user input (paths, names, ids): bytes that are not well-formed UTF-8
    // (overlong forms and surrogates included) would make the whole document invalid
    // JSON, so each becomes U+FFFD.
    const std::size_t n = utf8_sequence_length(message, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(message.substr(i, n));
      i += n;
    }
  }
  out += "\"}";
  return out;
}

void responder::on_disconnect(std::function<void()>) {}

void responder::respond_stream(response head, std::optional<std::uint64_t> content_length, body_source source) {
  // Buffering fallback for responders that are not the server's (fakes in tests).
  std::string body;
  std::vector<char> buf(std::size_t(1) << 20);
  for (;;) {
    std::size_t want = buf.size();
    if (content_length) want = std::min<std::uint64_t>(want, *content_length - body.size());
    if (want == 0) break;
    auto got = source(buf.data(), want);
    if (!got) {
      response r;
      r.status = 500;
      r.body = error_json(got.err().message);
      respond(std::move(r));
      return;
    }
    if (*got == 0) break;
    body.append(buf.data(), std::min(*got, want));
  }
  head.body = std::move(body);
  respond(std::move(head));
}

status responder::respond_file(const std::string& path, std::uint64_t offset, std::optional<std::uint64_t> length,
                               response head) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(errc::not_found, "cannot open " + path + ": " + std::strerror(errno));
  auto file = std::make_shared<detail::file_handle>(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return make_error(errc::not_found, path + " is not a regular file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (offset > size || (length && *length > size - offset))
    return make_error(errc::invalid, "bytes " + std::to_string(offset) + "+" + std::to_string(length.value_or(0)) +
                                         " are past the end of " + path + " (" + std::to_string(size) + " bytes)");
  const std::uint64_t len = length.value_or(size - offset);
  respond_stream(std::move(head), len, detail::file_source{std::move(file), offset, offset + len, path});
  return ok_status();
}

// ---- the server ----

namespace {

constexpr auto use_tuple = net::as_tuple(net::use_awaitable);

/// Open connections, in all and per client address (server_config::max_connections).
/// Touched by the listener and by sessions ending on any I/O thread.
struct connection_counts {
  std::mutex m;
  std::size_t total = 0;
  std::map<std::string, std::size_t> per_address;
};

/// A place among the open connections for `address`, released when the last copy goes; null
/// with the status to answer (503 or 429) and why, when a limit is reached.
std::shared_ptr<void> admit(const std::shared_ptr<connection_counts>& counts, const server_config& cfg,
                            const std::string& address, int& status, std::string& why) {
  std::lock_guard<std::mutex> lock(counts->m);
  std::size_t& mine = counts->per_address[address];
  if (cfg.max_connections > 0 && counts->total >= cfg.max_connections) {
    status = 503;
    why = "the server holds " + std::to_string(counts->total) + " open connections, its limit (--max-connections); try again soon";
  } else if (cfg.max_connections_per_address > 0 && mine >= cfg.max_connections_per_address) {
    status = 429;
    why = "this address holds " + std::to_string(mine) +
          " open connections, the limit per address (--max-connections-per-address); close some first";
  }
  if (status != 0) {
    if (mine == 0) counts->per_address.erase(address);
    return nullptr;
  }
  ++counts->total;
  ++mine;
  return std::shared_ptr<void>(new char(0), [counts, address](void* p) {
    delete static_cast<char*>(p);
    std::lock_guard<std::mutex> lock(counts->m);
    --counts->total;
    auto it = counts->per_address.find(address);
    if (it != counts->per_address.end() && --it->second == 0) counts->per_address.erase(it);
  });
}

/// Answers a connection over the limits with one JSON error and closes it, reading (and
/// dropping) what the client sends for a moment so that the answer is not lost to a reset.
net::awaitable<void> turn_away(beast::tcp_stream stream, int status, std::string why) {
  const std::string body = error_json(why);
  const std::string text = "HTTP/1.1 " + std::to_string(status) + (status == 503 ? " Service Unavailable" : " Too Many Requests") +
                           "\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body;
  stream.expires_after(std::chrono::seconds(2));
  auto [wec, wn] = co_await net::async_write(stream, net::buffer(text), use_tuple);
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (!wec) {
    char sink[4096];
    for (std::size_t total = 0; total < (std::size_t(1) << 20);) {
      auto [rec, n] = co_await stream.async_read_some(net::buffer(sink), use_tuple);
      if (rec) break;
      total += n;
    }
  }
  stream.socket().close(ec);
}

/// Accepts connections and starts a session for each, on its own strand.
net::awaitable<void> listen(net::io_context& ioc, tcp::acceptor acceptor, server_config cfg,
                            std::shared_ptr<const handler> h, std::shared_ptr<detail::gate> g) {
  net::steady_timer backoff(ioc);
  auto counts = std::make_shared<connection_counts>();
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(net::make_strand(ioc), use_tuple);
    if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
    if (ec) {
      // Out of descriptors and the like: accepting again at once would spin.
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(use_tuple);
      continue;
    }
    // Without TCP_NODELAY small writes (SSE events) wait ~40 ms for Nagle's algorithm.
    beast::error_code opt_ec;
    socket.set_option(tcp::no_delay(true), opt_ec);
    beast::error_code ep_ec;
    const auto peer = socket.remote_endpoint(ep_ec);
    const std::string address = ep_ec ? std::string() : peer.address().to_string();
    int status = 0;
    std::string why;
    auto ticket = admit(counts, cfg, address, status, why);
    if (!ticket) {
      beast::tcp_stream stream(std::move(socket));
      auto ex = stream.get_executor();
      net::co_spawn(ex, turn_away(std::move(stream), status, std::move(why)), net::detached);
      continue;
    }
    auto s = std::make_shared<detail::session>(std::move(socket), cfg, h, g);
    s->hold(std::move(ticket));
    auto ex = s->executor();
    net::co_spawn(ex, detail::session::run(std::move(s)), [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        std::fprintf(stderr, "mpakt http: connection failed: %s\n", x.what());
      } catch (...) {
      }
    });
  }
}

/// Owns the io_context and its threads. The io_context is destroyed in stop(), after the
/// threads are joined and the gate is closed, which also destroys every session.
class server_impl final : public server {
 public:
  ~server_impl() override { stop(); }
  std::uint16_t port() const override { return port_; }

  void stop() override {
    std::lock_guard<std::mutex> lock(stop_m_);
    if (!ioc_) return;
    {
      std::lock_guard<std::mutex> g(gate_->m);
      gate_->ioc = nullptr;  // from now on responders and streams post nothing
    }
    ioc_->stop();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
    ioc_.reset();  // closes the acceptor and all connections
  }

  std::unique_ptr<net::io_context> ioc_;
  std::shared_ptr<detail::gate> gate_ = std::make_shared<detail::gate>();
  std::vector<std::thread> threads_;
  std::uint16_t port_ = 0;
  std::mutex stop_m_;
};

}  // namespace

result<std::unique_ptr<server>> server::start(server_config cfg, handler h) {
  auto s = std::make_unique<server_impl>();
  const int threads = std::max(1, cfg.threads);
  s->ioc_ = std::make_unique<net::io_context>(threads);
  const std::string where = cfg.address + ":" + std::to_string(cfg.port);

  beast::error_code ec;
  tcp::resolver resolver(*s->ioc_);
  auto endpoints = resolver.resolve(cfg.address, std::to_string(cfg.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty())
    return make_error(errc::unavailable, "cannot listen on " + where + ": " + (ec ? ec.message() : "no such address"));
  const tcp::endpoint ep = endpoints.begin()->endpoint();

  tcp::acceptor acceptor(*s->ioc_);
  acceptor.open(ep.protocol(), ec);
  // SO_REUSEADDR: a restarted server can bind while old connections sit in TIME_WAIT.
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return make_error(errc::unavailable, "cannot listen on " + where + ": " + ec.message());
  s->port_ = acceptor.local_endpoint(ec).port();

  s->gate_->ioc = s->ioc_.get();
  auto shared_handler = std::make_shared<const handler>(std::move(h));
  net::co_spawn(*s->ioc_, listen(*s->ioc_, std::move(acceptor), cfg, shared_handler, s->gate_), net::detached);
  for (int i = 0; i < threads; ++i)
    s->threads_.emplace_back([ioc = s->ioc_.get()] {
      // A throwing callback must not take the I/O thread down with it.
      for (;;) {
        try {
          ioc->run();
          return;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "mpakt http: I/O thread caught: %s\n", e.what());
        }
      }
    });
  return std::unique_ptr<server>(std::move(s));
}

}  // namespace mpakt::http
