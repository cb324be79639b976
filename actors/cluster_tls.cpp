#include "actors/cluster_tls.hpp"

#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "actors/digest.hpp"

namespace mpakt::tls {

namespace {

template <class T, void (*Free)(T*)>
struct deleter {
  void operator()(T* p) const { Free(p); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, deleter<EVP_PKEY, EVP_PKEY_free>>;
using x509_ptr = std::unique_ptr<X509, deleter<X509, X509_free>>;
using bio_ptr = std::unique_ptr<BIO, deleter<BIO, BIO_free_all>>;
using ctx_ptr = std::unique_ptr<SSL_CTX, deleter<SSL_CTX, SSL_CTX_free>>;
using ssl_ptr = std::unique_ptr<SSL, deleter<SSL, SSL_free>>;

std::string read_bio(BIO* b) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  return n > 0 ? std::string(data, std::size_t(n)) : std::string();
}

result<std::string> pem_of(X509* x) {
  bio_ptr b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_X509(b.get(), x) != 1) return make_error(errc::internal, ssl_error("cannot write a certificate"));
  return read_bio(b.get());
}

result<std::string> pem_of(EVP_PKEY* k) {
  bio_ptr b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_PrivateKey(b.get(), k, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return make_error(errc::internal, ssl_error("cannot write a private key"));
  return read_bio(b.get());
}

result<x509_ptr> parse_pem(const std::string& pem) {
  bio_ptr b(BIO_new_mem_buf(pem.data(), int(pem.size())));
  x509_ptr x(b ? PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!x) return invalid(ssl_error("not a PEM certificate"));
  return x;
}

result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Writes `text` to `path` (replacing it), readable by its owner only when `secret`.
status write_file(const std::string& path, const std::string& text, bool secret) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, secret ? 0600 : 0644);
  if (fd < 0) return make_error(errc::internal, "cannot write " + path);
  if (secret) ::fchmod(fd, 0600);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      ::close(fd);
      return make_error(errc::internal, "cannot write " + path);
    }
    done += std::size_t(n);
  }
  ::close(fd);
  return {};
}

/// A self-signed certificate for `key` named `name`, valid from `not_before` to `not_after`
/// (ASN.1 time text), with `serial`; `md` null for Ed25519.
result<x509_ptr> self_signed(EVP_PKEY* key, const std::string& name, long serial, const char* not_before,
                             const char* not_after, const EVP_MD* md) {
  x509_ptr x(X509_new());
  if (!x) return make_error(errc::internal, ssl_error("cannot make a certificate"));
  X509_set_version(x.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x.get()), serial);
  if (ASN1_TIME_set_string(X509_getm_notBefore(x.get()), not_before) != 1 ||
      ASN1_TIME_set_string(X509_getm_notAfter(x.get()), not_after) != 1)
    return make_error(errc::internal, ssl_error("cannot set a certificate's validity"));
  X509_set_pubkey(x.get(), key);
  X509_NAME* n = X509_get_subject_name(x.get());
  X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  X509_set_issuer_name(x.get(), n);
  if (X509_sign(x.get(), key, md) <= 0) return make_error(errc::internal, ssl_error("cannot sign a certificate"));
  return x;
}

/// ASN.1 time text `seconds` from now (UTCTime before 2050, as RFC 5280 asks).
std::string asn1_time_from_now(long long seconds) {
  const std::time_t t = std::time(nullptr) + seconds;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  if (tm.tm_year + 1900 < 2050) std::strftime(buf, sizeof buf, "%y%m%d%H%M%SZ", &tm);
  else std::strftime(buf, sizeof buf, "%Y%m%d%H%M%SZ", &tm);
  return buf;
}

/// The link certificate's key: Ed25519 from a fixed, public seed (the same on every host).
result<pkey_ptr> link_key() {
  static const char seed_text[] = "mpakt cluster link certificate, public by design, v1";
  unsigned char seed[32];
  unsigned int len = 0;
  if (EVP_Digest(seed_text, sizeof seed_text - 1, seed, &len, EVP_sha256(), nullptr) != 1 || len != 32)
    return make_error(errc::internal, ssl_error("cannot derive the link key"));
  pkey_ptr k(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, seed, sizeof seed));
  if (!k) return make_error(errc::internal, ssl_error("cannot make the link key"));
  return k;
}

/// The link certificate for the link key: fixed fields, and Ed25519 signatures are
/// deterministic, so the same bytes on every host.
result<x509_ptr> link_certificate(EVP_PKEY* key) {
  return self_signed(key, "mpakt volunteer link (public)", 1, "260101000000Z", "20991231235959Z", nullptr);
}

/// The link certificate and key, as PEM.
result<std::pair<std::string, std::string>> link_pems() {
  auto k = link_key();
  if (!k) return std::move(k).err();
  auto x = link_certificate(k->get());
  if (!x) return std::move(x).err();
  auto cert = pem_of(x->get());
  if (!cert) return std::move(cert).err();
  auto key = pem_of(k->get());
  if (!key) return std::move(key).err();
  return std::pair{std::move(*cert), std::move(*key)};
}

}  // namespace

std::string ssl_error(const std::string& fallback) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return fallback;
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return fallback + " (" + buf + ")";
}

void set_socket_timeouts(int fd, std::chrono::milliseconds read, std::chrono::milliseconds write) {
  auto tv = [](std::chrono::milliseconds t) {
    timeval v{};
    v.tv_sec = long(t.count() / 1000);
    v.tv_usec = long(t.count() % 1000) * 1000;
    return v;
  };
  const timeval r = tv(read), w = tv(write);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof r);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &w, sizeof w);
}

result<std::string> peer_certificate(ssl_st* ssl) {
  x509_ptr peer(SSL_get1_peer_certificate(ssl));
  if (!peer) return make_error(errc::unauthorized, "no certificate presented");
  return pem_of(peer.get());
}

int connect_tcp(const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    why = std::string("cannot resolve ") + host + ": " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    set_socket_timeouts(fd, timeout, timeout);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      why = "cannot connect to " + host + ":" + std::to_string(port) + ": " + std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  return fd;
}

namespace {

/// A listening TCP socket on `address:port`, close-on-exec; `bound` gets the port. -1 with
/// `why` set when none binds.
int listen_tcp(const std::string& address, std::uint16_t port, std::uint16_t& bound, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(address.empty() ? nullptr : address.c_str(), std::to_string(port).c_str(), &hints, &found);
      rc != 0) {
    why = std::string("cannot resolve ") + address + ": " + gai_strerror(rc);
    return -1;
  }
  why = "no address to listen on";
  int listening = -1;
  for (addrinfo* a = found; a && listening < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 64) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      continue;
    }
    listening = fd;
  }
  ::freeaddrinfo(found);
  if (listening < 0) return -1;
  sockaddr_storage at{};
  socklen_t len = sizeof at;
  ::getsockname(listening, reinterpret_cast<sockaddr*>(&at), &len);
  bound = ntohs(at.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&at)->sin6_port
                                         : reinterpret_cast<sockaddr_in*>(&at)->sin_port);
  return listening;
}

/// The address of a peer as text ("1.2.3.4", "::1").
std::string address_of(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
  else if (a.ss_family == AF_INET6) ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof buf);
  std::string s = buf;
  if (s.rfind("::ffff:", 0) == 0 && s.find('.') != std::string::npos) s = s.substr(7);  // (an IPv4 peer on a v6 socket)
  return s;
}

}  // namespace

result<std::uint16_t> tcp_listener::start(const std::string& address, std::uint16_t port, accept_fn on_accept) {
  if (fd_ >= 0) return make_error(errc::internal, "already listening");
  std::string why;
  std::uint16_t bound = 0;
  fd_ = listen_tcp(address, port, bound, why);
  if (fd_ < 0) return make_error(errc::unavailable, why);
  if (::pipe2(wake_, O_CLOEXEC) != 0) return make_error(errc::internal, "cannot make a pipe");
  on_accept_ = std::move(on_accept);
  thread_ = std::thread([this] { accept_loop(); });
  return bound;
}

void tcp_listener::stop() {
  if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  for (int* fd : {&fd_, &wake_[0], &wake_[1]})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
}

void tcp_listener::accept_loop() {
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    sockaddr_storage from{};
    socklen_t len = sizeof from;
    const int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (fd >= 0) on_accept_(fd, address_of(from));
  }
}

result<std::string> fingerprint_of(const std::string& pem) {
  auto x = parse_pem(pem);
  if (!x) return std::move(x).err();
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (X509_digest(x->get(), EVP_sha256(), md, &n) != 1) return make_error(errc::internal, ssl_error("cannot hash a certificate"));
  return to_hex(md, n);
}

result<std::string> normalize_fingerprint(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == ':' || c == ' ' || c == '-') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c)))
      return invalid("a fingerprint is 64 hex digits (SHA-256, colons allowed); \"" + text + "\" has '" + std::string(1, c) + "'");
    out += char(std::tolower(static_cast<unsigned char>(c)));
  }
  if (out.size() != 64)
    return invalid("a fingerprint is 64 hex digits (SHA-256, colons allowed); \"" + text + "\" has " + std::to_string(out.size()));
  return out;
}

result<link_files> coordinator_files(const std::string& dir, const std::string& cert, const std::string& key,
                                     std::string* fingerprint) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(errc::internal, "cannot create " + dir + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  link_files f;
  if (!cert.empty() || !key.empty()) {
    if (cert.empty() || key.empty()) return invalid("--cluster-cert and --cluster-key go together");
    f.certificate = cert;
    f.key = key;
  } else {
    f.certificate = (std::filesystem::path(dir) / "coordinator.pem").string();
    f.key = (std::filesystem::path(dir) / "coordinator.key").string();
    if (!std::filesystem::exists(f.certificate) || !std::filesystem::exists(f.key)) {
      pkey_ptr k(EVP_EC_gen("P-256"));
      if (!k) return make_error(errc::internal, ssl_error("cannot make the coordinator's key"));
      long serial = 0;
      RAND_bytes(reinterpret_cast<unsigned char*>(&serial), sizeof serial);
      serial = (serial & 0x7fffffffffffL) | 1;
      auto x = self_signed(k.get(), "mpakt coordinator", serial, asn1_time_from_now(-3600).c_str(),
                           asn1_time_from_now(20LL * 366 * 24 * 3600).c_str(), EVP_sha256());
      if (!x) return std::move(x).err();
      auto key_pem = pem_of(k.get());
      if (!key_pem) return std::move(key_pem).err();
      auto cert_pem = pem_of(x->get());
      if (!cert_pem) return std::move(cert_pem).err();
      MPAKT_TRY(write_file(f.key, *key_pem, true));
      MPAKT_TRY(write_file(f.certificate, *cert_pem, false));
    }
  }
  auto pem = read_file(f.certificate);
  if (!pem) return std::move(pem).err();
  auto fp = fingerprint_of(*pem);
  if (!fp) return error{errc::invalid, f.certificate + ": " + fp.err().message};
  if (fingerprint) *fingerprint = *fp;
  auto link = link_pems();
  if (!link) return std::move(link).err();
  f.trusted = (std::filesystem::path(dir) / "volunteer-link.pem").string();
  MPAKT_TRY(write_file(f.trusted, link->first, false));
  return f;
}

result<link_files> volunteer_files(const std::string& dir, const std::string& trusted_pem) {
  auto link = link_pems();
  if (!link) return std::move(link).err();
  link_files f;
  f.certificate = (std::filesystem::path(dir) / "link.pem").string();
  f.key = (std::filesystem::path(dir) / "link.key").string();
  f.trusted = (std::filesystem::path(dir) / "trusted.pem").string();
  MPAKT_TRY(write_file(f.certificate, link->first, false));
  MPAKT_TRY(write_file(f.key, link->second, true));
  MPAKT_TRY(write_file(f.trusted, trusted_pem, false));
  return f;
}

result<std::string> fetch_certificate(const std::string& host, std::uint16_t port, std::chrono::milliseconds patience) {
  auto key = link_key();
  if (!key) return std::move(key).err();
  auto cert = link_certificate(key->get());
  if (!cert) return std::move(cert).err();
  ctx_ptr ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx || SSL_CTX_use_certificate(ctx.get(), cert->get()) != 1 || SSL_CTX_use_PrivateKey(ctx.get(), key->get()) != 1)
    return make_error(errc::internal, ssl_error("cannot set up TLS"));
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);  // (the caller checks the fingerprint)
  const auto deadline = std::chrono::steady_clock::now() + patience;
  std::string why;
  for (;;) {
    const int fd = connect_tcp(host, port, std::chrono::milliseconds(10000), why);
    if (fd >= 0) {
      ssl_ptr ssl(SSL_new(ctx.get()));
      SSL_set_fd(ssl.get(), fd);
      if (SSL_connect(ssl.get()) == 1) {
        auto pem = peer_certificate(ssl.get());
        SSL_shutdown(ssl.get());
        ::close(fd);
        if (!pem && pem.err().code == errc::unauthorized)
          return make_error(errc::unauthorized, host + ":" + std::to_string(port) + " presented no certificate");
        return pem;
      }
      // A TLS failure is an answer (not a server still starting): a plain-text port, or no TLS.
      const std::string e = ssl_error("the TLS handshake failed");
      ::close(fd);
      return make_error(errc::unauthorized, host + ":" + std::to_string(port) + " does not speak the cluster's TLS: " + e);
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return make_error(errc::unavailable, why);
}

status check_issued_for(const std::string& peer_pem, const std::string& ca_pem, const std::string& host) {
  auto peer = parse_pem(peer_pem);
  if (!peer) return make_error(errc::unauthorized, "the certificate the cluster port presents: " + peer.err().message);
  std::unique_ptr<X509_STORE, deleter<X509_STORE, X509_STORE_free>> store(X509_STORE_new());
  if (!store) return make_error(errc::internal, ssl_error("cannot set up certificate checks"));
  bio_ptr b(BIO_new_mem_buf(ca_pem.data(), int(ca_pem.size())));
  int cas = 0;
  while (b) {
    x509_ptr ca(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
    if (!ca) break;
    if (X509_STORE_add_cert(store.get(), ca.get()) == 1) ++cas;
  }
  ERR_clear_error();  // (the end of the file reads as an error)
  if (cas == 0) return invalid("--ca holds no PEM certificate");
  std::unique_ptr<X509_STORE_CTX, deleter<X509_STORE_CTX, X509_STORE_CTX_free>> ctx(X509_STORE_CTX_new());
  if (!ctx || X509_STORE_CTX_init(ctx.get(), store.get(), peer->get(), nullptr) != 1)
    return make_error(errc::internal, ssl_error("cannot set up certificate checks"));
  if (X509_verify_cert(ctx.get()) != 1)
    return make_error(errc::unauthorized, std::string("the cluster port's certificate is not issued by a CA of --ca (") +
                                              X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get())) + ")");
  // An address literal is matched against the certificate's IP entries, a name against its DNS ones.
  const int named = X509_check_ip_asc(peer->get(), host.c_str(), 0) == 1 ||
                    X509_check_host(peer->get(), host.data(), host.size(), X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS, nullptr) == 1;
  ERR_clear_error();
  if (!named)
    return make_error(errc::unauthorized, "the cluster port's certificate is issued by a CA of --ca but not for " + host +
                                              ": join by a name (or address) it was issued for");
  return ok_status();
}

void configure_link(caf::actor_system_config& cfg, const link_files& files) {
  cfg.load<caf::openssl::manager>();
  cfg.openssl_certificate = files.certificate;
  cfg.openssl_key = files.key;
  cfg.openssl_cafile = files.trusted;
}

}  // namespace mpakt::tls
