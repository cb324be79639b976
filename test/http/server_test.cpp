#include "http/server.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "http/client.hpp"
#include "test/http/raw_connection.hpp"

namespace mpakt::http {
namespace {

using namespace std::chrono_literals;
namespace bhttp = boost::beast::http;
using test::raw_connection;

std::unique_ptr<server> start_server(handler h, server_config cfg = {}) {
  auto s = server::start(cfg, std::move(h));
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.err().message);
  return s.ok() ? std::move(*s) : nullptr;
}

std::string get_request(const std::string& target, const std::string& extra = "") {
  return "GET " + target + " HTTP/1.1\r\nHost: test\r\n" + extra + "\r\n";
}

std::string base(const server& s) { return "http://127.0.0.1:" + std::to_string(s.port()); }

/// Responders handed from the I/O thread to the test thread.
struct responder_queue {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::pair<request, std::shared_ptr<responder>>> q;

  void push(request&& r, std::shared_ptr<responder> res) {
    std::lock_guard<std::mutex> l(m);
    q.emplace_back(std::move(r), std::move(res));
    cv.notify_all();
  }
  std::pair<request, std::shared_ptr<responder>> pop() {
    std::unique_lock<std::mutex> l(m);
    if (!cv.wait_for(l, 5s, [&] { return !q.empty(); })) return {};
    auto out = std::move(q.front());
    q.pop_front();
    return out;
  }
};

response text(std::string body, int status = 200) {
  response r;
  r.status = status;
  r.content_type = "text/plain";
  r.body = std::move(body);
  return r;
}

TEST(http_server, keep_alive_serves_two_requests_on_one_connection) {
  auto s = start_server([](request&& req, std::shared_ptr<responder> res) { res->respond(text(req.path + " " + req.remote)); });
  raw_connection c(s->port());
  ASSERT_TRUE(c.connected());
  bhttp::response<bhttp::string_body> a, b;
  ASSERT_FALSE(c.send(get_request("/a")));
  ASSERT_FALSE(c.read_response(a));
  ASSERT_FALSE(c.send(get_request("/b")));
  ASSERT_FALSE(c.read_response(b));
  EXPECT_EQ(a.result_int(), 200u);
  const std::string peer = "127.0.0.1:" + std::to_string(c.local_port());
  EXPECT_EQ(a.body(), "/a " + peer);
  EXPECT_EQ(b.body(), "/b " + peer);
  EXPECT_TRUE(b.keep_alive());
}

TEST(http_server, request_fields_reach_the_handler) {
  std::promise<request> seen;
  auto s = start_server([&](request&& req, std::shared_ptr<responder> res) {
    seen.set_value(req);
    res->respond(text("ok"));
  });
  raw_connection c(s->port());
  ASSERT_FALSE(c.send("POST /a%20b/c?x=1&y=two HTTP/1.1\r\nHost: t\r\nX-Thing: Value\r\nContent-Length: 5\r\n\r\nhello"));
  bhttp::response<bhttp::string_body> r;
  ASSERT_FALSE(c.read_response(r));
  auto req = seen.get_future().get();
  EXPECT_EQ(req.method, "POST");
  EXPECT_EQ(req.path, "/a b/c");
  EXPECT_EQ(req.query, "x=1&y=two");
  ASSERT_NE(req.header("x-thing"), nullptr);
  EXPECT_EQ(*req.header("x-thing"), "Value");
  EXPECT_EQ(req.header("no-such"), nullptr);
  EXPECT_EQ(req.body, "hello");
}

TEST(http_server, body_over_the_limit_is_413_without_reading_it) {
  std::atomic<int> calls{0};
  server_config cfg;
  cfg.body_limit = 1024;
  auto s = start_server([&](request&&, std::shared_ptr<responder> res) { ++calls, res->respond(text("x")); }, cfg);
  raw_connection c(s->port());
  // The body is never sent: the answer must come from the header alone.
  ASSERT_FALSE(c.send("POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n"));
  bhttp::response<bhttp::string_body> r;
  ASSERT_FALSE(c.read_response(r));
  EXPECT_EQ(r.result_int(), 413u);
  EXPECT_EQ(r.body(), R"({"error": "request body of 100000000 bytes is over the 1024-byte limit"})");
  EXPECT_FALSE(r.keep_alive());
  EXPECT_TRUE(c.wait_closed());
  EXPECT_EQ(calls.load(), 0);
}

TEST(http_server, chunked_body_over_the_limit_is_413) {
  server_config cfg;
  cfg.body_limit = 1024;
  auto s = start_server([&](request&&, std::shared_ptr<responder> res) { res->respond(text("x")); }, cfg);
  raw_connection c(s->port());
  ASSERT_FALSE(c.send("POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n" + std::string(2000, 'a') +
                      "\r\n0\r\n\r\n"));
  bhttp::response<bhttp::string_body> r;
  ASSERT_FALSE(c.read_response(r));
  EXPECT_EQ(r.result_int(), 413u);
  EXPECT_NE(r.body().find("over the 1024-byte limit"), std::string::npos);
}

TEST(http_server, garbage_is_400_then_close) {
  std::atomic<int> calls{0};
  auto s = start_server([&](request&&, std::shared_ptr<responder> res) { ++calls, res->respond(text("x")); });
  raw_connection c(s->port());
  ASSERT_FALSE(c.send("THIS IS NOT HTTP AT ALL\r\n\r\n"));
  bhttp::response<bhttp::string_body> r;
  ASSERT_FALSE(c.read_response(r));
  EXPECT_EQ(r.result_int(), 400u);
  EXPECT_EQ(r[bhttp::field::content_type], "application/json");
  EXPECT_NE(r.body().find("malformed request"), std::string::npos) << r.body();
  EXPECT_TRUE(c.wait_closed());
  EXPECT_EQ(calls.load(), 0);
}

TEST(http_server, header_over_the_limit_is_431) {
  server_config cfg;
  cfg.header_limit = 2048;
  auto s = start_server([&](request&&, std::shared_ptr<responder> res) { res->respond(text("x")); }, cfg);
  raw_connection c(s->port());
  ASSERT_FALSE(c.send(get_request("/", "X-Big: " + std::string(4000, 'b') + "\r\n")));
  bhttp::response<bhttp::string_body> r;
  ASSERT_FALSE(c.read_response(r));
  EXPECT_EQ(r.result_int(), 431u);
  EXPECT_NE(r.body().find("2048-byte limit"), std::string::npos);
}

TEST(http_server, idle_connection_is_closed) {
  server_config cfg;
  cfg.idle_timeout = 1s;
  auto s = start_server([&](request&&, std::shared_ptr<responder> res) { res->respond(text("x")); }, cfg);
  raw_connection c(s->port());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.wait_closed());
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 900ms);
  EXPECT_LT(waited, 4s);
}

TEST(http_server, head_answer_has_headers_but_no_body) {
  auto s = start_server([](request&& req, std::shared_ptr<responder> res) { res->respond(text("hello world")); });
  raw_connection c(s->port());
  ASSERT_FALSE(c.send("HEAD / HTTP/1.1\r\nHost: t\r\n\r\n" + get_request("/")));  // pipelined
  bhttp::response<bhttp::string_body> h, g;
  ASSERT_FALSE(c.read_response(h, true));
  EXPECT_EQ(h[bhttp::field::content_length], "11");
  ASSERT_FALSE(c.read_response(g));  // would be garbage had the HEAD answer carried a body
  EXPECT_EQ(g.body(), "hello world");
}

TEST(http_server, handler_can_ask_to_close) {
  auto s = start_server([](request&&, std::shared_ptr<responder> res) {
    auto r = text("bye");
    r.headers.emplace_back("connection", "close");
    res->respond(std::move(r));
  });
  raw_connection c(s->port());
  ASSERT_FALSE(c.send(get_request("/")));
  bhttp::response<bhttp::string_body> r;
  ASSERT_FALSE(c.read_response(r));
  EXPECT_FALSE(r.keep_alive());
  EXPECT_TRUE(c.wait_closed());
}

TEST(http_server, responder_answers_from_another_thread) {
  responder_queue q;
  auto s = start_server([&](request&& req, std::shared_ptr<responder> res) { q.push(std::move(req), std::move(res)); });
  auto got = std::async(std::launch::async, [&] {
    client cl;
    return cl.get(base(*s) + "/late");
  });
  auto [req, res] = q.pop();
  ASSERT_TRUE(res);
  EXPECT_EQ(req.path, "/late");
  std::this_thread::sleep_for(50ms);
  res->respond(text("answered late", 202));
  auto r = got.get();
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->status, 202);
  EXPECT_EQ(r->body, "answered late");
}

TEST(http_server, concurrent_requests_are_served_together) {
  // Each answer takes 300 ms on a thread of its own; eight requests in parallel must not
  // take eight times that.
  server_config cfg;
  cfg.threads = 2;
  auto s = start_server(
      [](request&& req, std::shared_ptr<responder> res) {
        std::thread([res, path = req.path] {
          std::this_thread::sleep_for(300ms);
          res->respond(text(path));
        }).detach();
      },
      cfg);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::future<std::string>> answers;
  for (int i = 0; i < 8; ++i)
    answers.push_back(std::async(std::launch::async, [&, i] {
      client cl;
      auto r = cl.get(base(*s) + "/n" + std::to_string(i));
      return r.ok() ? r->body : r.err().message;
    }));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(answers[std::size_t(i)].get(), "/n" + std::to_string(i));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms);
}

TEST(http_server, dropped_responder_answers_500) {
  auto s = start_server([](request&&, std::shared_ptr<responder>) {});
  client cl;
  auto r = cl.get(base(*s) + "/");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->status, 500);
  EXPECT_EQ(r->body, R"({"error": "the request was dropped without an answer"})");
  auto again = cl.get(base(*s) + "/");  // the connection is still good
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->status, 500);
}

TEST(http_server, a_second_answer_is_ignored) {
  auto s = start_server([](request&&, std::shared_ptr<responder> res) {
    res->respond(text("first"));
    res->respond(text("second"));
    EXPECT_TRUE(res->start_sse()->closed());
  });
  client cl;
  for (int i = 0; i < 2; ++i) {
    auto r = cl.get(base(*s) + "/");
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->body, "first");
  }
}

TEST(http_server, start_fails_on_a_taken_port_naming_it) {
  auto a = start_server([](request&&, std::shared_ptr<responder> res) { res->respond(text("a")); });
  server_config cfg;
  cfg.port = a->port();
  auto b = server::start(cfg, [](request&&, std::shared_ptr<responder>) {});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.err().code, errc::unavailable);
  EXPECT_NE(b.err().message.find("127.0.0.1:" + std::to_string(a->port())), std::string::npos) << b.err().message;
}

TEST(http_server, stop_is_idempotent_and_late_responders_are_harmless) {
  responder_queue q;
  auto s = start_server([&](request&& req, std::shared_ptr<responder> res) { q.push(std::move(req), std::move(res)); });
  auto pending = std::async(std::launch::async, [&] {
    client_options o;
    o.timeout = 3s;
    client cl(o);
    return cl.get(base(*s) + "/");
  });
  auto [req, res] = q.pop();
  ASSERT_TRUE(res);
  s->stop();
  s->stop();
  EXPECT_FALSE(pending.get().ok());  // the connection was dropped
  res->respond(text("too late"));     // must not crash or hang
  auto sse = res->start_sse();
  EXPECT_TRUE(sse->closed());
}

// ---- streamed bodies ----

TEST(http_server, respond_stream_pulls_pieces_no_larger_than_the_configured_chunk) {
  server_config cfg;
  cfg.stream_chunk_bytes = 1000;
  std::atomic<std::size_t> largest{0};
  std::string body(10'500, '\0');
  for (std::size_t i = 0; i < body.size(); ++i) body[i] = char('a' + i % 26);
  auto s = start_server(
      [&](request&&, std::shared_ptr<responder> res) {
        auto pos = std::make_shared<std::size_t>(0);
        res->respond_stream(text(""), body.size(), [&, pos](char* buf, std::size_t cap) -> result<std::size_t> {
          largest = std::max(largest.load(), cap);
          const std::size_t n = std::min(cap, body.size() - *pos);
          std::copy_n(body.data() + *pos, n, buf);
          *pos += n;
          return n;
        });
      },
      cfg);
  client cl;
  auto r = cl.get(base(*s) + "/");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->body, body);
  ASSERT_NE(r->header("content-length"), nullptr);
  EXPECT_EQ(*r->header("content-length"), "10500");
  EXPECT_LE(largest.load(), 1000u);
}

TEST(http_server, respond_stream_without_length_is_chunked) {
  auto s = start_server([&](request&&, std::shared_ptr<responder> res) {
    auto left = std::make_shared<int>(3);
    res->respond_stream(text(""), std::nullopt, [left](char* buf, std::size_t) -> result<std::size_t> {
      if ((*left)-- == 0) return std::size_t(0);
      buf[0] = 'x';
      return std::size_t(1);
    });
  });
  raw_connection c(s->port());
  ASSERT_FALSE(c.send(get_request("/") + get_request("/")));
  for (int i = 0; i < 2; ++i) {
    bhttp::response<bhttp::string_body> r;
    ASSERT_FALSE(c.read_response(r));
    EXPECT_TRUE(r.chunked());
    EXPECT_EQ(r.body(), "xxx");
  }
}

TEST(http_server, respond_stream_for_head_never_pulls) {
  std::atomic<int> pulls{0};
  auto s = start_server([&](request&&, std::shared_ptr<responder> res) {
    res->respond_stream(text(""), 12345, [&](char*, std::size_t) -> result<std::size_t> { return ++pulls, std::size_t(0); });
  });
  client cl;
  auto r = cl.head(base(*s) + "/");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(*r->header("content-length"), "12345");
  EXPECT_EQ(pulls.load(), 0);
}

TEST(http_server, failing_source_closes_the_connection) {
  auto s = start_server([&](request&&, std::shared_ptr<responder> res) {
    auto calls = std::make_shared<int>(0);
    res->respond_stream(text(""), 100, [calls](char* buf, std::size_t) -> result<std::size_t> {
      if ((*calls)++ > 0) return make_error(errc::internal, "disk on fire");
      std::fill_n(buf, 10, 'z');
      return std::size_t(10);
    });
  });
  client cl;
  auto r = cl.get(base(*s) + "/");
  EXPECT_FALSE(r.ok());  // 10 of the promised 100 bytes, then the connection closed
}

TEST(http_server, respond_file_streams_a_byte_range_and_refuses_missing_files) {
  const std::string path = testing::TempDir() + "mpakt_respond_file.bin";
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("0123456789abcdef", f);
    std::fclose(f);
  }
  auto s = start_server([&](request&& req, std::shared_ptr<responder> res) {
    if (auto st = res->respond_file(req.path == "/missing" ? path + ".nope" : path, 3, 5, text("")); !st) {
      EXPECT_EQ(st.err().code, errc::not_found);
      res->respond(text(st.err().message, 404));
    }
  });
  client cl;
  auto r = cl.get(base(*s) + "/");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->body, "34567");
  auto m = cl.get(base(*s) + "/missing");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->status, 404);
  std::remove(path.c_str());
}

TEST(http_server, a_file_body_survives_a_client_that_leaves_mid_download) {
  // Large enough that the socket's buffers fill and the server is still sending when the
  // client goes: sendfile then fails with EPIPE or a reset, which must neither raise SIGPIPE
  // in this process (this test would die) nor keep the server from answering the next one.
  const std::string path = testing::TempDir() + "mpakt_respond_file_big.bin";
  const std::string content = [] {
    std::string c(std::size_t(48) << 20, '\0');
    for (std::size_t i = 0; i < c.size(); ++i) c[i] = char(i * 31 + i / 4099);
    return c;
  }();
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(content.data(), 1, content.size(), f), content.size());
    std::fclose(f);
  }
  auto s = start_server([&](request&& req, std::shared_ptr<responder> res) {
    if (auto st = res->respond_file(path, 0, std::nullopt, text("")); !st) res->respond(text(st.err().message, 404));
  });
  for (int i = 0; i < 3; ++i) {
    raw_connection c(s->port());
    ASSERT_TRUE(c.connected());
    ASSERT_FALSE(c.send("GET /big HTTP/1.1\r\nhost: x\r\n\r\n"));
    ASSERT_FALSE(c.read_stream_header());
    std::string some;
    ASSERT_FALSE(c.read_stream_some(some));
    EXPECT_EQ(some, content.substr(0, some.size()));
  }  // each closed with most of the body unread
  client cl;
  auto r = cl.get(base(*s) + "/whole");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_TRUE(r->body == content);
  std::remove(path.c_str());
}

// ---- SSE ----

struct sse_fixture {
  std::promise<std::shared_ptr<sse_stream>> stream;
  std::unique_ptr<server> srv;

  explicit sse_fixture(server_config cfg = {}) {
    srv = start_server(
        [this](request&& req, std::shared_ptr<responder> res) {
          if (req.path == "/events")
            stream.set_value(res->start_sse());
          else
            res->respond(text("after " + req.path));
        },
        cfg);
  }
};

/// Reads until `count` complete events ("\n\n"-terminated) have arrived.
std::string read_events(raw_connection& c, std::string& got, int count) {
  auto complete = [&] {
    int n = 0;
    for (std::size_t p = 0; (p = got.find("\n\n", p)) != std::string::npos; p += 2) ++n;
    return n;
  };
  while (complete() < count) {
    auto ec = c.read_stream_some(got);
    if (ec) return ec.message();
    if (c.stream_done()) break;
  }
  return "";
}

TEST(http_sse, events_arrive_in_order_and_promptly_and_the_connection_is_reused) {
  sse_fixture f;
  raw_connection c(f.srv->port());
  ASSERT_FALSE(c.send(get_request("/events")));
  auto stream = f.stream.get_future().get();
  ASSERT_FALSE(c.read_stream_header());
  const auto& h = c.stream_header();
  EXPECT_EQ(h.result_int(), 200u);
  EXPECT_EQ(h[bhttp::field::content_type], "text/event-stream");
  EXPECT_EQ(h[bhttp::field::cache_control], "no-cache");
  EXPECT_TRUE(h.chunked());

  // One at a time, timing each: with Nagle's algorithm left on these take ~40 ms.
  std::string got;
  std::vector<std::chrono::steady_clock::duration> latency;
  for (int i = 0; i < 10; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(stream->send("tick", std::to_string(i)));
    ASSERT_EQ(read_events(c, got, i + 1), "");
    latency.push_back(std::chrono::steady_clock::now() - t0);
  }
  std::sort(latency.begin(), latency.end());
  EXPECT_LT(latency[latency.size() / 2], 20ms);

  // A burst keeps its order.
  for (int i = 10; i < 100; ++i) stream->send("tick", std::to_string(i));
  stream->send("", "multi\nline");
  stream->close();
  EXPECT_TRUE(stream->closed());
  EXPECT_FALSE(stream->send("tick", "after close"));
  while (!c.stream_done()) ASSERT_FALSE(c.read_stream_some(got));
  std::string want;
  for (int i = 0; i < 100; ++i) want += "event: tick\ndata: " + std::to_string(i) + "\n\n";
  want += "data: multi\ndata: line\n\n";
  EXPECT_EQ(got, want);

  // Same connection, next request.
  ASSERT_FALSE(c.send(get_request("/next")));
  bhttp::response<bhttp::string_body> r;
  ASSERT_FALSE(c.read_response(r));
  EXPECT_EQ(r.body(), "after /next");
}

TEST(http_sse, client_disconnect_mid_stream_fires_on_disconnect_once) {
  sse_fixture f;
  raw_connection c(f.srv->port());
  ASSERT_FALSE(c.send(get_request("/events")));
  auto stream = f.stream.get_future().get();
  std::promise<void> gone;
  std::atomic<int> fired{0};
  stream->on_disconnect([&] {
    if (fired++ == 0) gone.set_value();
  });
  ASSERT_FALSE(c.read_stream_header());
  ASSERT_TRUE(stream->send("tick", "1"));
  std::string got;
  ASSERT_EQ(read_events(c, got, 1), "");
  EXPECT_FALSE(stream->closed());

  // The client leaves while nothing is being sent: only the watch read can tell.
  c.close();
  ASSERT_EQ(gone.get_future().wait_for(3s), std::future_status::ready);
  EXPECT_TRUE(stream->closed());
  EXPECT_FALSE(stream->send("tick", "2"));
  stream->close();
  EXPECT_EQ(fired.load(), 1);

  // Registering after the fact calls the callback at once.
  bool late = false;
  stream->on_disconnect([&] { late = true; });
  EXPECT_TRUE(late);
}

TEST(http_sse, stopping_the_server_counts_as_a_disconnect) {
  sse_fixture f;
  raw_connection c(f.srv->port());
  ASSERT_FALSE(c.send(get_request("/events")));
  auto stream = f.stream.get_future().get();
  std::atomic<bool> gone{false};
  stream->on_disconnect([&] { gone = true; });
  ASSERT_FALSE(c.read_stream_header());
  f.srv->stop();
  EXPECT_TRUE(gone.load());
  EXPECT_TRUE(stream->closed());
  EXPECT_FALSE(stream->send("x", "y"));
}

TEST(http_sse, a_reader_that_falls_too_far_behind_is_dropped) {
  server_config cfg;
  cfg.sse_backlog_limit = 1 << 20;
  cfg.idle_timeout = 2s;
  sse_fixture f(cfg);
  raw_connection c(f.srv->port());
  ASSERT_FALSE(c.send(get_request("/events")));
  auto stream = f.stream.get_future().get();
  std::promise<void> gone;
  stream->on_disconnect([&] { gone.set_value(); });
  // Never read: the socket buffers fill, then the backlog, then the stream is dropped.
  const std::string blob(64 * 1024, 'q');
  for (int i = 0; i < 2000 && stream->send("blob", blob); ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(gone.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(stream->closed());
}

TEST(http_server, error_json_escapes) {
  EXPECT_EQ(error_json("plain"), R"({"error": "plain"})");
  EXPECT_EQ(error_json("a\"b\\c\nd\te\x01"), R"({"error": "a\"b\\c\nd\te\u0001"})");
  EXPECT_EQ(error_json("caf\xC3\xA9"), "{\"error\": \"caf\xC3\xA9\"}");
  EXPECT_EQ(error_json("bad \xFF byte"), "{\"error\": \"bad \xEF\xBF\xBD byte\"}");
  // overlong forms, surrogates and code points above U+10FFFF are not UTF-8 either
  EXPECT_EQ(error_json("m_\xC0\xAF"), "{\"error\": \"m_\xEF\xBF\xBD\xEF\xBF\xBD\"}");
  EXPECT_EQ(error_json("\xED\xA0\x80"), "{\"error\": \"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"}");
  EXPECT_EQ(error_json("\xF4\x90\x80\x80!"), "{\"error\": \"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD!\"}");
}

}  // namespace
}  // namespace mpakt::http
