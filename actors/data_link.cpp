#include "actors/data_link.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <cstring>

#include "actors/cluster_tls.hpp"
#include "actors/digest.hpp"
#include "actors/loader/fetch.hpp"
#include "http/sigpipe_guard.hpp"

namespace mpakt::datalink {

namespace {

using tls::ssl_error;
using tls::set_socket_timeouts;

constexpr char hello_prefix[] = "MPAKT-DATA/1 ";
constexpr std::size_t hello_prefix_len = sizeof hello_prefix - 1;
constexpr std::size_t ticket_len = 64;
constexpr std::size_t hello_len = hello_prefix_len + ticket_len + 1;
constexpr std::size_t header_len = 16;
constexpr int max_handshakes = 8;  ///< connections in their handshake at once; more are closed at once
constexpr std::chrono::seconds handshake_patience{10};
constexpr std::chrono::seconds write_patience{60};  ///< a volunteer that stops reading this long is cut off

SSL* as_ssl(void* p) { return static_cast<SSL*>(p); }
SSL_CTX* as_ctx(void* p) { return static_cast<SSL_CTX*>(p); }

/// Reads exactly `n` bytes, telling `inbox` (if any) of each run as it comes; false on an
/// error or the end of the stream.
bool read_exact(SSL* ssl, char* out, std::size_t n, piece_inbox* inbox = nullptr) {
  while (n > 0) {
    std::size_t got = 0;
    if (SSL_read_ex(ssl, out, n, &got) != 1 || got == 0) return false;
    if (inbox) inbox->arrived(got);
    out += got;
    n -= got;
  }
  return true;
}

bool write_all(SSL* ssl, const char* data, std::size_t n) {
  while (n > 0) {
    std::size_t put = 0;
    if (SSL_write_ex(ssl, data, n, &put) != 1 || put == 0) return false;
    data += put;
    n -= put;
  }
  return true;
}

void put_le(char* p, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = char((v >> (8 * i)) & 0xff);
}
std::uint64_t get_le(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

/// The ticket's digest: what the server's table is keyed by, so that looking a ticket up
/// compares digests, never the secret itself.
std::string ticket_key(const std::string& ticket) { return nonce_digest("mpakt data ticket", ticket); }

}  // namespace

// ---------------------------------------------------------------- piece_inbox

bool piece_inbox::put(std::uint64_t seq, std::string bytes) {
  std::unique_lock<std::mutex> lock(m_);
  changed_.wait(lock, [&] { return closed_ || pieces_.empty() || held_ + bytes.size() <= cap_; });
  if (closed_) return false;
  if (seq <= floor_) return true;  // (given up already: its claim came and went)
  held_ += bytes.size();
  pieces_.emplace(seq, std::move(bytes));
  changed_.notify_all();
  return true;
}

result<std::string> piece_inbox::take(std::uint64_t seq, std::chrono::milliseconds patience) {
  std::unique_lock<std::mutex> lock(m_);
  // Numbers are claimed in increasing order: what lies below this one will never be claimed.
  if (seq > floor_) floor_ = seq - 1;
  while (!pieces_.empty() && pieces_.begin()->first < seq) {
    held_ -= pieces_.begin()->second.size();
    pieces_.erase(pieces_.begin());
  }
  changed_.notify_all();
  const auto here = [&] { return closed_ || pieces_.count(seq) > 0; };
  for (std::uint64_t seen = arrived_.load(); !changed_.wait_for(lock, patience, here);) {
    const std::uint64_t now = arrived_.load();
    if (now == seen) break;  // (nothing for a whole `patience`)
    seen = now;
  }
  floor_ = std::max(floor_, seq);
  auto it = pieces_.find(seq);
  if (it == pieces_.end()) {
    if (closed_) return make_error(errc::unavailable, "piece " + std::to_string(seq) + " did not arrive: " + why_);
    return make_error(errc::unavailable, "piece " + std::to_string(seq) + " did not arrive: nothing came over the data connection for " +
                                             std::to_string(patience.count()) + " ms");
  }
  std::string bytes = std::move(it->second);
  held_ -= bytes.size();
  pieces_.erase(it);
  changed_.notify_all();
  return bytes;
}

void piece_inbox::recycle(std::string bytes) { spares_.give(std::move(bytes)); }

std::string piece_inbox::spare(std::size_t bytes) { return spares_.take(bytes); }

void piece_inbox::close(const std::string& why) {
  std::lock_guard<std::mutex> lock(m_);
  if (!closed_) why_ = why;
  closed_ = true;
  changed_.notify_all();
}

void piece_inbox::reopen() {
  std::lock_guard<std::mutex> lock(m_);
  pieces_.clear();
  held_ = 0;
  floor_ = 0;
  closed_ = false;
  why_.clear();
  changed_.notify_all();
}

std::uint64_t piece_inbox::held_bytes() const {
  std::lock_guard<std::mutex> lock(m_);
  return held_;
}

// ---------------------------------------------------------------- data_sender

data_sender::~data_sender() {
  close();
  if (writer_.joinable()) writer_.join();
  if (ssl_) SSL_free(as_ssl(ssl_));
  if (fd_ >= 0) ::close(fd_);
}

std::optional<std::uint64_t> data_sender::send(std::string& bytes) {
  std::unique_lock<std::mutex> lock(m_);
  if (state_.load() != attached) return std::nullopt;
  if (queued_bytes_ + bytes.size() > max_queued_) {
    lock.unlock();
    close("the volunteer answered pieces it had not read (" + std::to_string(max_queued_ >> 20) + " MB waiting to be sent)");
    return std::nullopt;
  }
  const std::uint64_t seq = next_seq_++;
  queued_bytes_ += bytes.size();
  queue_.emplace_back(seq, std::move(bytes));
  queued_.notify_one();
  return seq;
}

std::string data_sender::describe() const {
  std::lock_guard<std::mutex> lock(m_);
  switch (state_.load()) {
    case waiting: return "waiting";
    case attached: return "up";
    default: return "closed: " + why_;
  }
}

void data_sender::close(const std::string& why) {
  int fd = -1;
  {
    std::lock_guard<std::mutex> lock(m_);
    if (state_.load() != failed) {
      state_ = failed;
      why_ = why;
    }
    queue_.clear();
    queued_bytes_ = 0;
    fd = fd_;
  }
  queued_.notify_all();
  if (fd >= 0) ::shutdown(fd, SHUT_RDWR);  // (ends a write in progress)
}

bool data_sender::attach(int fd, void* ssl) {
  std::lock_guard<std::mutex> lock(m_);
  if (state_.load() != waiting) return false;
  fd_ = fd;
  ssl_ = ssl;
  state_ = attached;
  writer_ = std::thread([this] { write_loop(); });
  return true;
}

void data_sender::write_loop() {
  const http::sigpipe_guard no_sigpipe;  // (a volunteer gone is a failed write, not the process's end)
  SSL* ssl = as_ssl(ssl_);
  // The volunteer hears "OK" only from here, so nothing else ever writes on this connection.
  bool ok = write_all(ssl, "OK\n", 3);
  while (ok) {
    std::pair<std::uint64_t, std::string> item;
    {
      std::unique_lock<std::mutex> lock(m_);
      queued_.wait(lock, [&] { return !queue_.empty() || state_.load() != attached; });
      if (state_.load() != attached) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= item.second.size();
    }
    char header[header_len];
    std::memcpy(header, "MPDP", 4);
    put_le(header + 4, item.second.size(), 4);
    put_le(header + 8, item.first, 8);
    ok = write_all(ssl, header, header_len) && write_all(ssl, item.second.data(), item.second.size());
    if (ok) sent_ += item.second.size();
    loader::give_back_piece(std::move(item.second));
  }
  const std::string why = ssl_error(std::string("writing to the volunteer failed: ") + std::strerror(errno));
  close(why);
}

// ---------------------------------------------------------------- data_server

result<std::unique_ptr<data_server>> data_server::start(const std::string& address, std::uint16_t port,
                                                       const std::string& certificate_file, const std::string& key_file) {
  std::unique_ptr<data_server> s(new data_server());
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  s->ctx_ = ctx;
  if (!ctx || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
      SSL_CTX_use_certificate_chain_file(ctx, certificate_file.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1)
    return make_error(errc::internal, ssl_error("the data port cannot use the cluster certificate"));
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);  // (volunteers prove themselves by their ticket)

  auto bound = s->listener_.start(address, port, [p = s.get()](int fd, const std::string&) { p->accepted(fd); });
  if (!bound)
    return make_error(bound.err().code, "the data port cannot listen on " + address + ":" + std::to_string(port) + ": " +
                                            bound.err().message);
  s->port_ = *bound;
  return s;
}

data_server::~data_server() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stopping_ = true;
    for (int fd : in_handshake_) ::shutdown(fd, SHUT_RDWR);
  }
  listener_.stop();
  {
    std::unique_lock<std::mutex> lock(m_);
    handshakes_done_.wait(lock, [&] { return handshakes_ == 0; });
  }
  if (ctx_) SSL_CTX_free(as_ctx(ctx_));
}

std::shared_ptr<data_sender> data_server::expect(std::uint64_t max_queued) {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof raw) != 1) return nullptr;
  auto sender = std::make_shared<data_sender>(to_hex(raw, sizeof raw), max_queued);
  std::lock_guard<std::mutex> lock(m_);
  // (forget the tickets of senders already gone)
  for (auto it = waiting_.begin(); it != waiting_.end();) it = it->second.expired() ? waiting_.erase(it) : std::next(it);
  waiting_[ticket_key(sender->ticket())] = sender;
  return sender;
}

void data_server::accepted(int fd) {
  std::lock_guard<std::mutex> lock(m_);
  if (stopping_ || handshakes_ >= max_handshakes) {
    ::close(fd);
    ++refused_;
    return;
  }
  ++handshakes_;
  in_handshake_.insert(fd);
  std::thread([this, fd] { handshake(fd); }).detach();
}

void data_server::handshake(int fd) {
  const http::sigpipe_guard no_sigpipe;
  set_socket_timeouts(fd, handshake_patience, handshake_patience);
  SSL* ssl = SSL_new(as_ctx(ctx_));
  std::shared_ptr<data_sender> sender;
  bool taken = false;
  char hello[hello_len];
  if (ssl && SSL_set_fd(ssl, fd) == 1 && SSL_accept(ssl) == 1 && read_exact(ssl, hello, hello_len) &&
      std::memcmp(hello, hello_prefix, hello_prefix_len) == 0 && hello[hello_len - 1] == '\n') {
    const std::string key = ticket_key(std::string(hello + hello_prefix_len, ticket_len));
    std::lock_guard<std::mutex> lock(m_);
    if (auto it = waiting_.find(key); it != waiting_.end()) {
      sender = it->second.lock();
      waiting_.erase(it);  // (a ticket opens one connection)
    }
  }
  ERR_clear_error();
  {
    std::lock_guard<std::mutex> lock(m_);
    in_handshake_.erase(fd);
    if (sender && !stopping_) {
      set_socket_timeouts(fd, std::chrono::milliseconds(0), write_patience);
      taken = sender->attach(fd, ssl);
    }
    if (!taken) ++refused_;
  }
  if (!taken) {
    if (ssl) SSL_free(ssl);
    ::close(fd);
  }
  std::lock_guard<std::mutex> lock(m_);
  --handshakes_;
  handshakes_done_.notify_all();
}

// ---------------------------------------------------------------- data_client

result<std::unique_ptr<data_client>> data_client::connect(const std::string& host, std::uint16_t port, const std::string& ticket,
                                                         const std::function<status(const std::string&)>& check_peer,
                                                         std::shared_ptr<piece_inbox> inbox) {
  if (ticket.size() != ticket_len) return make_error(errc::invalid, "a data ticket is 64 hex digits");
  const std::string where = host + ":" + std::to_string(port);
  const http::sigpipe_guard no_sigpipe;  // (for this thread's writes below)
  std::unique_ptr<data_client> c(new data_client());
  c->inbox_ = std::move(inbox);
  std::string why;
  c->fd_ = tls::connect_tcp(host, port, std::chrono::milliseconds(handshake_patience), why);
  if (c->fd_ < 0) return make_error(errc::unavailable, "the coordinator's data port: " + why);
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  c->ctx_ = ctx;
  if (!ctx || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1)
    return make_error(errc::internal, ssl_error("cannot set up TLS"));
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);  // (check_peer decides, as for the cluster port)
  SSL* ssl = SSL_new(ctx);
  c->ssl_ = ssl;
  if (!ssl || SSL_set_fd(ssl, c->fd_) != 1 || SSL_connect(ssl) != 1)
    return make_error(errc::unavailable, ssl_error("the data port at " + where + " does not speak TLS"));
  auto peer = tls::peer_certificate(ssl);
  if (!peer) return make_error(errc::unauthorized, "the data port at " + where + ": " + peer.err().message);
  if (auto ok = check_peer(*peer); !ok)
    return make_error(errc::unauthorized, "the data port at " + where + ": " + ok.err().message);
  const std::string hello = hello_prefix + ticket + "\n";
  char answer[3];
  if (!write_all(ssl, hello.data(), hello.size()) || !read_exact(ssl, answer, 3) || std::memcmp(answer, "OK\n", 3) != 0) {
    ERR_clear_error();
    return make_error(errc::unauthorized, "the data port at " + where + " refused this volunteer's ticket");
  }
  set_socket_timeouts(c->fd_, std::chrono::milliseconds(0), std::chrono::milliseconds(handshake_patience));  // (loads pause for long)
  c->inbox_->reopen();
  c->reader_ = std::thread([p = c.get()] { p->read_loop(); });
  return c;
}

data_client::~data_client() {
  stopping_ = true;
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  if (inbox_) inbox_->close("the data connection was closed");  // (a reader waiting for room ends too)
  if (reader_.joinable()) reader_.join();
  if (ssl_) SSL_free(as_ssl(ssl_));
  if (ctx_) SSL_CTX_free(as_ctx(ctx_));
  if (fd_ >= 0) ::close(fd_);
}

void data_client::read_loop() {
  const http::sigpipe_guard no_sigpipe;  // (TLS may answer the coordinator while reading)
  SSL* ssl = as_ssl(ssl_);
  std::string why;
  for (;;) {
    char header[header_len];
    if (!read_exact(ssl, header, header_len)) {
      why = "the coordinator closed the data connection";
      break;
    }
    const std::uint64_t len = get_le(header + 4, 4), seq = get_le(header + 8, 8);
    if (std::memcmp(header, "MPDP", 4) != 0 || len > max_piece_bytes || seq == 0) {
      why = "the data connection carried a malformed frame";
      break;
    }
    std::string bytes = inbox_->spare(len);
    bytes.resize(len);  // (a spare piece's storage: no fresh pages to fault in and clear)
    if (!read_exact(ssl, bytes.data(), len, inbox_.get())) {
      why = "the data connection ended inside a piece";
      break;
    }
    received_ += len;
    if (!inbox_->put(seq, std::move(bytes))) {
      why = "the inbox was closed";
      break;
    }
  }
  ERR_clear_error();
  inbox_->close(stopping_ ? std::string("the data connection was closed") : why);
}

}  // namespace mpakt::datalink
