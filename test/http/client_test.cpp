#include "http/client.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "http/range.hpp"
#include "http/server.hpp"
#include "http/url.hpp"

namespace mpakt::http {
namespace {

using namespace std::chrono_literals;

/// A server with a few routes for the client to talk to:
///   /echo        the method, Range header and peer as text
///   /data        `data` (honours Range), Content-Length, streamed in 1000-byte pieces
///   /chunked     `data`, chunked
///   /r/abs       301 to an absolute URL of /data;  /r/path  302 to "/data"
///   /r/dir/rel   307 to "../../data" (relative);      /r/loop  302 to itself
///   /r/localhost 302 to /data on http://localhost (another origin, the same loopback host)
///   /slow        answers after 1.5 s;               /close  answers with "connection: close"
///   /ignore      200 with `data` whatever the Range; /missing 404
class client_test : public testing::Test {
 protected:
  void SetUp() override {
    data_.resize(100'000);
    for (std::size_t i = 0; i < data_.size(); ++i) data_[i] = char(i * 7 % 251);
    server_config cfg;
    cfg.stream_chunk_bytes = 1000;
    cfg.threads = 2;
    auto s = server::start(cfg, [this](request&& req, std::shared_ptr<responder> res) { route(std::move(req), res); });
    ASSERT_TRUE(s.ok()) << s.err().message;
    srv_ = std::move(*s);
    base_ = "http://127.0.0.1:" + std::to_string(srv_->port());
  }
  void TearDown() override {
    srv_->stop();
    for (auto& t : late_) t.join();
  }

  void route(request&& req, const std::shared_ptr<responder>& res) {
    {
      std::lock_guard<std::mutex> l(m_);
      peers_.insert(req.remote);
    }
    response r;
    r.content_type = "text/plain";
    auto redirect = [&](int status, const std::string& to) {
      r.status = status;
      r.headers.emplace_back("location", to);
      r.body = "moved";
      res->respond(std::move(r));
    };
    if (req.path == "/auth") {
      const auto* a = req.header("authorization");
      const auto* k = req.header("x-api-key");
      r.body = a ? *a : "-";
      if (k) r.body += " key " + *k;
      return res->respond(std::move(r));
    }
    if (req.path == "/r/auth-same") return redirect(302, "/auth");
    if (req.path == "/r/auth-elsewhere") return redirect(302, "http://localhost:" + std::to_string(srv_->port()) + "/auth");
    if (req.path == "/r/commit") {
      r.headers.emplace_back("x-repo-commit", "0123456789abcdef0123456789abcdef01234567");
      return redirect(302, "/auth");
    }
    if (req.path == "/echo") {
      const auto* range = req.header("range");
      r.body = req.method + " " + (range ? *range : "-") + " " + req.remote;
      return res->respond(std::move(r));
    }
    if (req.path == "/data" || req.path == "/chunked") {
      range_answer ra;
      if (const auto* h = req.header("range")) ra = evaluate_range(*h, data_.size());
      std::uint64_t first = 0, length = data_.size();
      if (ra.k == range_answer::kind::partial) {
        r.status = 206;
        r.headers.emplace_back("content-range", ra.content_range(data_.size()));
        first = ra.first;
        length = ra.length;
      }
      auto pos = std::make_shared<std::uint64_t>(first);
      const std::uint64_t end = first + length;
      body_source src = [this, pos, end](char* buf, std::size_t cap) -> result<std::size_t> {
        const std::size_t n = std::min<std::uint64_t>(cap, end - *pos);
        std::copy_n(data_.data() + *pos, n, buf);
        *pos += n;
        return n;
      };
      return res->respond_stream(std::move(r), req.path == "/data" ? std::optional<std::uint64_t>(length) : std::nullopt, src);
    }
    if (req.path == "/ignore") {
      r.body = data_;
      return res->respond(std::move(r));
    }
    if (req.path == "/r/abs") return redirect(301, base_ + "/data");
    if (req.path == "/r/path") return redirect(302, "/data");
    if (req.path == "/r/dir/rel") return redirect(307, "../../data");
    if (req.path == "/r/loop") return redirect(302, "/r/loop");
    if (req.path == "/r/localhost") return redirect(302, "http://localhost:" + std::to_string(srv_->port()) + "/data");
    if (req.path == "/close") {
      r.body = "closing";
      r.headers.emplace_back("connection", "close");
      return res->respond(std::move(r));
    }
    if (req.path == "/slow") {
      std::lock_guard<std::mutex> l(m_);
      late_.emplace_back([res] {
        std::this_thread::sleep_for(1500ms);
        response late;
        late.body = "finally";
        res->respond(std::move(late));
      });
      return;
    }
    r.status = 404;
    r.body = error_json("no such path " + req.path);
    res->respond(std::move(r));
  }

  std::size_t peer_count() {
    std::lock_guard<std::mutex> l(m_);
    return peers_.size();
  }

  std::string data_;
  std::unique_ptr<server> srv_;
  std::string base_;
  std::mutex m_;
  std::set<std::string> peers_;
  std::vector<std::thread> late_;
};

TEST_F(client_test, get_returns_status_body_and_lower_case_headers) {
  client c;
  auto r = c.get(base_ + "/data");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, data_);
  ASSERT_NE(r->header("content-length"), nullptr);
  EXPECT_EQ(*r->header("content-length"), "100000");
  EXPECT_EQ(r->final_url, base_ + "/data");
  auto m = c.get(base_ + "/missing");
  ASSERT_TRUE(m.ok());  // an HTTP error status is not an error
  EXPECT_EQ(m->status, 404);
  EXPECT_EQ(m->body, R"({"error": "no such path /missing"})");
}

TEST_F(client_test, keeps_one_connection_between_calls_and_reconnects_when_closed) {
  client c;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c.get(base_ + "/echo").ok());
  EXPECT_EQ(peer_count(), 1u);
  auto closing = c.get(base_ + "/close");
  ASSERT_TRUE(closing.ok());
  EXPECT_EQ(closing->body, "closing");
  auto after = c.get(base_ + "/echo");  // the server closed: a new connection, transparently
  ASSERT_TRUE(after.ok()) << after.err().message;
  EXPECT_EQ(peer_count(), 2u);
}

TEST(client, reconnects_when_the_server_timed_out_the_idle_connection) {
  server_config cfg;
  cfg.idle_timeout = 1s;
  auto s = server::start(cfg, [](request&&, std::shared_ptr<responder> res) {
    response r;
    r.body = "hi";
    res->respond(std::move(r));
  });
  ASSERT_TRUE(s.ok());
  client c;
  const std::string u = "http://127.0.0.1:" + std::to_string((*s)->port()) + "/";
  ASSERT_TRUE(c.get(u).ok());
  std::this_thread::sleep_for(1500ms);  // the server has closed our kept-alive connection
  auto r = c.get(u);
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->body, "hi");
}

TEST_F(client_test, range_head_and_method) {
  client c;
  auto e = c.get(base_ + "/echo", byte_range{10, 19});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->body.substr(0, e->body.rfind(' ')), "GET bytes=10-19");
  auto r = c.get(base_ + "/data", byte_range{10, 19});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status, 206);
  EXPECT_EQ(r->body, data_.substr(10, 10));
  EXPECT_EQ(*r->header("content-range"), "bytes 10-19/100000");
  auto h = c.head(base_ + "/data");
  ASSERT_TRUE(h.ok()) << h.err().message;
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(*h->header("content-length"), "100000");
  EXPECT_TRUE(h->body.empty());
  auto after = c.get(base_ + "/echo");  // the HEAD left the connection in a good state
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->body.substr(0, 6), "GET - ");
}

TEST_F(client_test, follows_absolute_path_and_relative_redirects) {
  client c;
  for (const char* from : {"/r/abs", "/r/path", "/r/dir/rel"}) {
    auto r = c.get(base_ + from, byte_range{0, 3});
    ASSERT_TRUE(r.ok()) << from << ": " << r.err().message;
    EXPECT_EQ(r->status, 206) << from;  // the Range went along
    EXPECT_EQ(r->body, data_.substr(0, 4)) << from;
    EXPECT_EQ(r->final_url, base_ + "/data") << from;
  }
  auto h = c.head(base_ + "/r/path");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->final_url, base_ + "/data");
}

TEST_F(client_test, private_addresses_are_refused_before_connecting_unless_trusted) {
  client_options o;
  o.allow_private_addresses = false;
  client strict(o);
  auto r = strict.get(base_ + "/data");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::forbidden);
  EXPECT_NE(r.err().message.find("resolves to 127.0.0.1, which is not a public address"), std::string::npos)
      << r.err().message;
  EXPECT_EQ(peer_count(), 0u);  // refused before any connection

  // The trusted origin is reached; a redirect from it to another origin on a private address
  // is checked like any URL.
  o.trusted_origins = {"http://127.0.0.1:" + std::to_string(srv_->port())};
  client trusting(o);
  auto ok = trusting.get(base_ + "/data", byte_range{0, 3});
  ASSERT_TRUE(ok.ok()) << ok.err().message;
  EXPECT_EQ(ok->status, 206);
  auto moved = trusting.get(base_ + "/r/localhost");
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.err().code, errc::forbidden);
  EXPECT_NE(moved.err().message.find("host localhost resolves to"), std::string::npos) << moved.err().message;
}

TEST(url, public_addresses_are_told_from_private_ones) {
  for (const char* ip : {"8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:8.8.8.8",
                         "2002:808:808::1"})
    EXPECT_TRUE(is_public_address(ip)) << ip;
  for (const char* ip : {"127.0.0.1", "127.1.2.3", "0.0.0.0", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1",
                         "169.254.169.254", "100.64.0.1", "224.0.0.1", "255.255.255.255", "192.0.2.1", "::", "::1",
                         "fe80::1", "fd00::1", "fc00::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
                         "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "2001:db8::1", "not an address", ""})
    EXPECT_FALSE(is_public_address(ip)) << ip;
}

TEST_F(client_test, the_bearer_token_goes_to_its_origin_only) {
  client_options o;
  o.bearer_token = "hf_secret";
  o.bearer_origin = base_;
  client c(o);
  auto direct = c.get(base_ + "/auth");
  ASSERT_TRUE(direct.ok()) << direct.err().message;
  EXPECT_EQ(direct->body, "Bearer hf_secret");
  auto same = c.get(base_ + "/r/auth-same");
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->body, "Bearer hf_secret");
  // a redirect to another origin (localhost is not 127.0.0.1's origin) gets no token
  auto elsewhere = c.get(base_ + "/r/auth-elsewhere");
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.err().message;
  EXPECT_EQ(elsewhere->final_url, "http://localhost:" + std::to_string(srv_->port()) + "/auth");
  EXPECT_EQ(elsewhere->body, "-");
  client plain;
  EXPECT_EQ(plain.get(base_ + "/auth")->body, "-");
}

TEST_F(client_test, origin_headers_go_to_their_origin_only) {
  client_options o;
  o.bearer_origin = base_;
  o.origin_headers = {{"x-api-key", "mpk_secret"}};
  client c(o);
  EXPECT_EQ(c.get(base_ + "/auth")->body, "- key mpk_secret");
  EXPECT_EQ(c.get(base_ + "/r/auth-same")->body, "- key mpk_secret");
  auto elsewhere = c.get(base_ + "/r/auth-elsewhere");
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.err().message;
  EXPECT_EQ(elsewhere->body, "-");
}

TEST_F(client_test, the_repo_commit_of_a_redirect_is_kept) {
  client c;
  auto r = c.get(base_ + "/r/commit");
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->repo_commit, "0123456789abcdef0123456789abcdef01234567");
  EXPECT_EQ(c.get(base_ + "/auth")->repo_commit, "");
}

TEST_F(client_test, too_many_redirects_is_an_error) {
  client_options o;
  o.max_redirects = 3;
  client c(o);
  auto r = c.get(base_ + "/r/loop");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.err().message.find("more than 3 redirects"), std::string::npos) << r.err().message;
  EXPECT_NE(r.err().message.find("/r/loop"), std::string::npos);
}

TEST_F(client_test, get_stream_hands_over_bounded_chunks) {
  for (const char* path : {"/data", "/chunked"}) {
    client c;
    std::string got;
    std::vector<std::size_t> sizes;
    auto r = c.get_stream(base_ + path, std::nullopt, 4096, [&](std::string_view chunk) {
      sizes.push_back(chunk.size());
      got.append(chunk);
      return true;
    });
    ASSERT_TRUE(r.ok()) << path << ": " << r.err().message;
    EXPECT_EQ(r->status, 200);
    EXPECT_TRUE(r->body.empty());
    EXPECT_EQ(got, data_) << path;
    ASSERT_FALSE(sizes.empty());
    for (std::size_t i = 0; i + 1 < sizes.size(); ++i) EXPECT_EQ(sizes[i], 4096u) << path;  // all full but the last
    EXPECT_LE(sizes.back(), 4096u);
  }
}

TEST_F(client_test, get_stream_of_a_range) {
  client c;
  std::string got;
  auto r = c.get_stream(base_ + "/r/path", byte_range{50'000, 79'999}, 7000, [&](std::string_view chunk) {
    got.append(chunk);
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->status, 206);
  EXPECT_EQ(got, data_.substr(50'000, 30'000));
}

TEST_F(client_test, get_stream_keeps_ignored_ranges_and_errors_out_of_the_sink) {
  client c;
  int calls = 0;
  auto sink = [&](std::string_view) { return ++calls, true; };
  auto ignored = c.get_stream(base_ + "/ignore", byte_range{0, 9}, 4096, sink);
  ASSERT_TRUE(ignored.ok()) << ignored.err().message;
  EXPECT_EQ(ignored->status, 200);  // the caller sees the host ignored Range
  auto missing = c.get_stream(base_ + "/missing", std::nullopt, 4096, sink);
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(missing->body, R"({"error": "no such path /missing"})");
  EXPECT_EQ(calls, 0);
  auto ok = c.get(base_ + "/echo");  // and the client still works
  ASSERT_TRUE(ok.ok()) << ok.err().message;
}

TEST_F(client_test, sink_refusal_is_a_conflict) {
  client c;
  auto r = c.get_stream(base_ + "/data", std::nullopt, 1000, [](std::string_view) { return false; });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::conflict);
  EXPECT_TRUE(c.get(base_ + "/echo").ok());
}

TEST_F(client_test, max_body_limits_get) {
  client_options o;
  o.max_body = 1000;
  client c(o);
  for (const char* path : {"/data", "/chunked"}) {
    auto r = c.get(base_ + path);
    ASSERT_FALSE(r.ok()) << path;
    EXPECT_EQ(r.err().code, errc::too_large) << path;
    EXPECT_NE(r.err().message.find("1000-byte limit"), std::string::npos) << r.err().message;
    EXPECT_NE(r.err().message.find(path), std::string::npos) << r.err().message;
  }
  auto small = c.get(base_ + "/data", byte_range{0, 999});
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->body.size(), 1000u);
}

TEST_F(client_test, timeout_is_reported_as_such) {
  client_options o;
  o.timeout = 300ms;
  client c(o);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.get(base_ + "/slow");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::timeout);
  EXPECT_NE(r.err().message.find("/slow"), std::string::npos) << r.err().message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1200ms);
  EXPECT_TRUE(c.get(base_ + "/echo").ok());  // a fresh connection afterwards
}

TEST(client, connection_refused_is_unavailable_naming_the_host) {
  // A port that was free a moment ago: bind, note it, close.
  std::uint16_t port = 0;
  {
    auto s = server::start({}, [](request&&, std::shared_ptr<responder>) {});
    ASSERT_TRUE(s.ok());
    port = (*s)->port();
  }
  client c;
  auto r = c.get("http://127.0.0.1:" + std::to_string(port) + "/x");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::unavailable);
  EXPECT_NE(r.err().message.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << r.err().message;
}

TEST(client, malformed_urls_are_invalid) {
  client c;
  for (const char* u : {"ftp://x/y", "not a url", "http://", "http://host:99999/"}) {
    auto r = c.get(u);
    ASSERT_FALSE(r.ok()) << u;
    EXPECT_EQ(r.err().code, errc::invalid) << u;
  }
}

TEST(url, resolve_location_handles_every_form) {
  const auto base = *parse_url("http://h:8080/a/b/c?q=1");
  auto str = [&](const char* loc) {
    auto u = resolve_location(base, loc);
    return u ? u->str() : std::string("none");
  };
  EXPECT_EQ(str("https://cdn.example/x"), "https://cdn.example/x");
  EXPECT_EQ(str("//other/y"), "http://other/y");
  EXPECT_EQ(str("/z"), "http://h:8080/z");
  EXPECT_EQ(str("d"), "http://h:8080/a/b/d");
  EXPECT_EQ(str("../d?x=2"), "http://h:8080/a/d?x=2");
  EXPECT_EQ(str("./"), "http://h:8080/a/b/");
  EXPECT_EQ(str("../../../../d"), "http://h:8080/d");
  EXPECT_EQ(str("?p=3"), "http://h:8080/a/b/c?p=3");
  EXPECT_EQ(str("mailto:x@y"), "none");
  EXPECT_EQ(str("d:e"), "none");  // a scheme, as RFC 3986 reads it
  EXPECT_EQ(str("./d:e"), "http://h:8080/a/b/d:e");
  EXPECT_EQ(str("ftp://x/"), "none");
  EXPECT_EQ(parse_url("http://[::1]:9000/p")->host_header(), "[::1]:9000");
}

TEST(range, evaluate_range_follows_the_rfc) {
  using k = range_answer::kind;
  auto check = [](const char* h, std::uint64_t size, k want, std::uint64_t first = 0, std::uint64_t length = 0) {
    const auto r = evaluate_range(h, size);
    EXPECT_EQ(r.k, want) << h;
    if (want == k::partial) {
      EXPECT_EQ(r.first, first) << h;
      EXPECT_EQ(r.length, length) << h;
    }
  };
  check("bytes=0-9", 100, k::partial, 0, 10);
  check("bytes=90-", 100, k::partial, 90, 10);
  check("bytes=-5", 100, k::partial, 95, 5);
  check("bytes=-500", 100, k::partial, 0, 100);
  check("bytes=50-1000", 100, k::partial, 50, 50);
  check("bytes=100-", 100, k::unsatisfiable);
  check("bytes=-0", 100, k::unsatisfiable);
  check("bytes=0-0", 0, k::unsatisfiable);
  check("bytes=5-2", 100, k::whole);
  check("bytes=0-1,5-6", 100, k::whole);
  check("items=0-1", 100, k::whole);
  check("bytes=x-1", 100, k::whole);
  EXPECT_EQ(evaluate_range("bytes=1-2", 10).content_range(10), "bytes 1-2/10");
  EXPECT_EQ(evaluate_range("bytes=10-", 10).content_range(10), "bytes */10");
}

}  // namespace
}  // namespace mpakt::http
