#pragma once
/// A test-side HTTP connection that speaks bytes, not a client API: for sending garbage,
/// pipelining, reading SSE as it arrives and seeing exactly when the server closes. Every
/// operation is async under a deadline, so a broken server fails the test instead of hanging.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace mpakt::test {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

class raw_connection {
 public:
  explicit raw_connection(std::uint16_t port, std::chrono::milliseconds deadline = std::chrono::seconds(5))
      : deadline_(deadline) {
    connected_ = !run([&](auto h) {
      stream_.async_connect(net::ip::tcp::endpoint(net::ip::address_v4::loopback(), port), std::move(h));
    });
    beast::error_code ec;
    if (connected_) stream_.socket().set_option(net::ip::tcp::no_delay(true), ec);
  }

  bool connected() const { return connected_; }
  std::uint16_t local_port() { return stream_.socket().local_endpoint().port(); }

  beast::error_code send(std::string_view bytes) {
    return run([&](auto h) { net::async_write(stream_, net::buffer(bytes.data(), bytes.size()), std::move(h)); });
  }

  /// Reads one whole response; `head` for the answer to a HEAD request.
  beast::error_code read_response(bhttp::response<bhttp::string_body>& out, bool head = false) {
    bhttp::response_parser<bhttp::string_body> p;
    p.body_limit(boost::none);
    if (head) p.skip(true);
    auto ec = run([&](auto h) { bhttp::async_read(stream_, buffer_, p, std::move(h)); });
    if (!ec) out = p.release();
    return ec;
  }

  /// Starts reading a streamed response: the header only.
  beast::error_code read_stream_header() {
    stream_parser_.emplace();
    stream_parser_->body_limit(boost::none);
    return run([&](auto h) { bhttp::async_read_header(stream_, buffer_, *stream_parser_, std::move(h)); });
  }
  const bhttp::response<bhttp::buffer_body>& stream_header() { return stream_parser_->get(); }
  bool stream_done() const { return stream_parser_->is_done(); }

  /// Body bytes of the streamed response that have arrived (waits for at least one).
  beast::error_code read_stream_some(std::string& out) {
    char buf[65536];
    stream_parser_->get().body().data = buf;
    stream_parser_->get().body().size = sizeof buf;
    auto ec = run([&](auto h) { bhttp::async_read_some(stream_, buffer_, *stream_parser_, std::move(h)); });
    if (ec == bhttp::error::need_buffer) ec = {};
    out.append(buf, sizeof buf - stream_parser_->get().body().size);
    return ec;
  }

  /// Reads until the server closes; true when it did (EOF or reset) before the deadline.
  bool wait_closed() {
    char buf[4096];
    for (;;) {
      auto ec = run([&](auto h) { stream_.async_read_some(net::buffer(buf), std::move(h)); });
      if (ec == beast::error::timeout) return false;
      if (ec) return true;
    }
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

 private:
  template <class Initiate>
  beast::error_code run(Initiate&& initiate) {
    beast::error_code result = net::error::would_block;
    stream_.expires_after(deadline_);
    initiate([&](beast::error_code ec, auto&&...) { result = ec; });
    ioc_.restart();
    ioc_.run();
    return result;
  }

  std::chrono::milliseconds deadline_;
  net::io_context ioc_;
  beast::tcp_stream stream_{ioc_};
  beast::flat_buffer buffer_;
  std::optional<bhttp::response_parser<bhttp::buffer_body>> stream_parser_;
  bool connected_ = false;
};

}  // namespace mpakt::test
