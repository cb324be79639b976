// The client over TLS, against an in-process TLS server with a certificate made on the spot:
// SNI is sent, the certificate chain and the host name are verified, verify_tls=false skips both.

#include "http/client.hpp"

#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace mpakt::http {
namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;

struct pem_pair {
  std::string cert, key;
};

/// A self-signed certificate for `name` (CN and subjectAltName), valid for a day.
pem_pair make_certificate(const std::string& name) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 24 * 3600);
  X509_set_pubkey(x, key);
  X509_NAME* subject = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509_set_issuer_name(x, subject);
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, x, x, nullptr, nullptr, 0);
  for (auto [nid, value] : {std::pair{NID_subject_alt_name, "DNS:" + name}, std::pair{NID_basic_constraints, std::string("critical,CA:TRUE")}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(x, key, EVP_sha256());
  auto to_string = [](auto write) {
    BIO* bio = BIO_new(BIO_s_mem());
    write(bio);
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio, &data);
    std::string out(data, std::size_t(n));
    BIO_free(bio);
    return out;
  };
  pem_pair out{to_string([&](BIO* b) { PEM_write_bio_X509(b, x); }),
               to_string([&](BIO* b) { PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr); })};
  X509_free(x);
  EVP_PKEY_free(key);
  return out;
}

/// Answers every request with "hello over tls"; records handshakes and the SNI name sent.
class tls_server {
 public:
  explicit tls_server(const pem_pair& pem) {
    ctx_.use_certificate_chain(net::buffer(pem.cert));
    ctx_.use_private_key(net::buffer(pem.key), ssl::context::pem);
    net::co_spawn(ioc_, accept_loop(), net::detached);
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~tls_server() {
    ioc_.stop();
    thread_.join();
  }
  std::uint16_t port() const { return port_; }
  int handshakes() const { return handshakes_.load(); }
  std::string sni() {
    std::lock_guard<std::mutex> l(m_);
    return sni_;
  }

 private:
  net::awaitable<void> accept_loop() {
    for (;;) {
      auto socket = co_await acceptor_.async_accept(net::use_awaitable);
      net::co_spawn(ioc_, serve(std::move(socket)), net::detached);
    }
  }
  net::awaitable<void> serve(tcp::socket socket) {
    beast::ssl_stream<beast::tcp_stream> s(std::move(socket), ctx_);
    co_await s.async_handshake(ssl::stream_base::server, net::use_awaitable);
    ++handshakes_;
    if (const char* name = SSL_get_servername(s.native_handle(), TLSEXT_NAMETYPE_host_name)) {
      std::lock_guard<std::mutex> l(m_);
      sni_ = name;
    }
    beast::flat_buffer buffer;
    for (;;) {
      bhttp::request<bhttp::string_body> req;
      co_await bhttp::async_read(s, buffer, req, net::use_awaitable);
      bhttp::response<bhttp::string_body> res(bhttp::status::ok, 11);
      res.body() = "hello over tls";
      res.keep_alive(req.keep_alive());
      res.prepare_payload();
      co_await bhttp::async_write(s, res, net::use_awaitable);
    }
  }

  net::io_context ioc_;
  ssl::context ctx_{ssl::context::tls_server};
  tcp::acceptor acceptor_{ioc_, tcp::endpoint(net::ip::address_v4::loopback(), 0)};
  std::uint16_t port_ = acceptor_.local_endpoint().port();
  std::thread thread_;
  std::atomic<int> handshakes_{0};
  std::mutex m_;
  std::string sni_;
};

class client_tls : public testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(ca_file_) << pem_.cert;
  }
  void TearDown() override { std::remove(ca_file_.c_str()); }

  std::string url(const std::string& host) const { return "https://" + host + ":" + std::to_string(server_.port()) + "/x"; }

  pem_pair pem_ = make_certificate("localhost");
  tls_server server_{pem_};
  std::string ca_file_ = testing::TempDir() + "mpakt_tls_ca_" + std::to_string(::getpid()) + ".pem";
};

TEST_F(client_tls, without_verification_it_talks_and_keeps_the_connection) {
  client_options o;
  o.verify_tls = false;
  client c(o);
  for (int i = 0; i < 2; ++i) {
    auto r = c.get(url("127.0.0.1"));
    ASSERT_TRUE(r.ok()) << r.err().message;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "hello over tls");
  }
  EXPECT_EQ(server_.handshakes(), 1);
}

TEST_F(client_tls, an_untrusted_certificate_is_refused_naming_the_host) {
  client c;  // the system store does not know our certificate
  auto r = c.get(url("localhost"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::unavailable);
  EXPECT_NE(r.err().message.find("localhost:" + std::to_string(server_.port())), std::string::npos) << r.err().message;
  EXPECT_NE(r.err().message.find("certificate verify failed"), std::string::npos) << r.err().message;
}

TEST_F(client_tls, a_trusted_certificate_for_the_host_passes_and_sni_is_sent) {
  client_options o;
  o.ca_file = ca_file_;
  client c(o);
  auto r = c.get(url("localhost"));
  ASSERT_TRUE(r.ok()) << r.err().message;
  EXPECT_EQ(r->body, "hello over tls");
  EXPECT_EQ(server_.sni(), "localhost");
}

TEST_F(client_tls, a_trusted_certificate_for_another_host_is_refused) {
  client_options o;
  o.ca_file = ca_file_;
  client c(o);
  auto r = c.get(url("127.0.0.1"));  // the certificate names localhost
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::unavailable);
}

TEST_F(client_tls, a_missing_ca_file_is_invalid) {
  client_options o;
  o.ca_file = ca_file_ + ".missing";
  client c(o);
  auto r = c.get(url("localhost"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::invalid);
  EXPECT_NE(r.err().message.find(".missing"), std::string::npos) << r.err().message;
}

}  // namespace
}  // namespace mpakt::http
