#include "actors/cluster_guard.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include <caf/atom.hpp>

#include "http/sigpipe_guard.hpp"
#include "runtime/log.hpp"
#include "runtime/metrics.hpp"

namespace mpakt {

namespace {

using steady = std::chrono::steady_clock;

SSL* as_ssl(void* p) { return static_cast<SSL*>(p); }
SSL_CTX* as_ctx(void* p) { return static_cast<SSL_CTX*>(p); }

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

/// The bytes one side has to take, with how far it has taken them.
struct pending {
  std::vector<char> bytes;
  std::size_t at = 0;
  std::size_t size() const { return bytes.size() - at; }
  void taken(std::size_t n) {
    at += n;
    if (at == bytes.size()) {
      if (bytes.capacity() > keep) std::vector<char>().swap(bytes);  // (a large reply's room goes)
      else bytes.clear();
      at = 0;
    } else if (at >= compact_at && 2 * at >= bytes.size()) {  // (a side that never quite catches up: what it took goes)
      bytes.erase(bytes.begin(), bytes.begin() + std::ptrdiff_t(at));
      at = 0;
    }
  }
  static constexpr std::size_t compact_at = 256u << 10, keep = 4u << 20;
};

/// Bytes read from one side while the other has this many still to take: past it, that side
/// waits (each direction's backlog stays this small, whatever the peers do).
constexpr std::size_t backlog = 1u << 20;
constexpr std::size_t chunk = 64u << 10;

}  // namespace

// ---------------------------------------------------------------- basp_frames

const std::uint64_t basp_frames::spawn_server = static_cast<std::uint64_t>(caf::atom("SpawnServ"));

status basp_frames::feed(const char* p, std::size_t n, std::vector<char>& out, const judge& j) {
  while (n > 0) {
    if (payload_left_ > 0) {
      const std::size_t take = std::size_t(std::min<std::uint64_t>(payload_left_, n));
      if (holding_) held_.insert(held_.end(), p, p + take);
      else if (!dropping_) out.insert(out.end(), p, p + take);
      payload_left_ -= take;
      p += take;
      n -= take;
      if (payload_left_ == 0 && holding_) release(out);
      continue;
    }
    const std::size_t take = std::min(n, header_size - have_);
    std::memcpy(header_ + have_, p, take);
    have_ += take;
    p += take;
    n -= take;
    if (have_ < header_size) break;
    have_ = 0;
    ++frames_;
    basp_header h;
    h.operation = header_[0];
    h.flags = header_[3];
    if (h.operation > basp_header::last_operation)
      return make_error(errc::invalid, "frame " + std::to_string(frames_) + " is not a BASP message (operation " +
                                           std::to_string(h.operation) + ")");
    h.payload = std::uint32_t(header_[4]) << 24 | std::uint32_t(header_[5]) << 16 | std::uint32_t(header_[6]) << 8 |
                std::uint32_t(header_[7]);
    for (int i = 8; i < 16; ++i) h.data = h.data << 8 | header_[i];
    for (int i = 16; i < 24; ++i) h.from = h.from << 8 | header_[i];
    for (int i = 24; i < 32; ++i) h.to = h.to << 8 | header_[i];
    auto v = j(h);
    if (!v) return std::move(v).err();
    dropping_ = *v == verdict::drop;
    payload_left_ = h.payload;
    if (*v == verdict::hold && h.payload > 0) {
      holding_ = frames_;
      held_.assign(header_, header_ + header_size);
    } else if (!dropping_) {
      out.insert(out.end(), header_, header_ + header_size);
    }
  }
  return ok_status();
}

void basp_frames::release(std::vector<char>& out) {
  if (out.empty()) out.swap(held_);
  else out.insert(out.end(), held_.begin(), held_.end());
  std::vector<char>().swap(held_);
  holding_ = 0;
}

// ---------------------------------------------------------------- volunteer_rules

volunteer_rules::volunteer_rules(std::uint64_t gate, std::shared_ptr<const listeners> l, std::shared_ptr<std::atomic<int>> asking,
                                 std::uint32_t max_unasked, std::uint32_t max_reply)
    : gate_(gate), listeners_(std::move(l)), asking_(std::move(asking)), max_unasked_(max_unasked), max_reply_(max_reply) {}

void volunteer_rules::heard(const basp_header& h, bool admitted) {
  if (h.operation != basp_header::direct_message) return;
  if (h.from == gate_ && h.response() && gate_asks_.erase(h.data & basp_header::request_number)) --*asking_;
  recent_senders_.add(h.from);
  if (h.request()) {
    const ask a{h.from, h.data & basp_header::request_number};
    if (outstanding_.insert(a).second) asked_.push_back(a);
    while (outstanding_.size() > max_outstanding) {  // (the oldest unanswered goes)
      outstanding_.erase(asked_.front());
      asked_.pop_front();
    }
    if (asked_.size() > 2 * max_outstanding) {  // (answered ones leave the order now and then)
      std::deque<ask> kept;
      for (const auto& x : asked_)
        if (outstanding_.count(x)) kept.push_back(x);
      asked_.swap(kept);
    }
  } else if (!h.response() && early_senders_.size() < 64 && (!admitted || (h.named() && h.to == basp_frames::spawn_server))) {
    // (the middleman's question to a new peer's spawn server comes from an actor of its own,
    // which the peer answers with a message that is no reply; on a busy machine the question
    // may cross after the admission)
    early_senders_.insert(h.from);
  }
}

result<basp_frames::verdict> volunteer_rules::judge(const basp_header& h, std::uint64_t frame, bool admitted) {
  using verdict = basp_frames::verdict;
  const std::string which = "frame " + std::to_string(frame);
  // (CAF makes room for a payload when its header arrives: only an admitted volunteer's reply
  // may be large, and it is held until whole)
  const bool large = h.payload > max_unasked_;
  if (large && !(admitted && h.operation == basp_header::direct_message && h.response()))
    return make_error(errc::limit, which + " announces " + std::to_string(h.payload) + " bytes, more than the " +
                                       std::to_string(max_unasked_) +
                                       (admitted ? " a message that answers no request may carry" : " allowed"));
  if (h.payload > max_reply_)
    return make_error(errc::limit, which + " is a reply of " + std::to_string(h.payload) + " bytes, more than the " +
                                       std::to_string(max_reply_) + " the coordinator holds for volunteers' replies");
  switch (h.operation) {
    case basp_header::routed_message:
      return make_error(errc::unauthorized, which + " is a routed message (for another node)");
    case basp_header::monitor_message: {
      const bool known = h.to == gate_ || recent_senders_.has(h.to) || (admitted && listeners_ && listeners_->has(h.to));
      if (known && monitored_.add(h.to)) return verdict::pass;
      ++stray_monitors_;
      return verdict::drop;
    }
    case basp_header::direct_message:
      break;
    default:
      return verdict::pass;  // handshakes, down messages, heartbeats
  }
  if (h.named()) {
    if (h.to == basp_frames::spawn_server) return verdict::pass;
    return make_error(errc::unauthorized, which + " is a message for a named actor (" + std::to_string(h.to) + ")");
  }
  if (h.response()) {
    if (outstanding_.erase(ask{h.to, h.data & basp_header::request_number})) return large ? verdict::hold : verdict::pass;
    ++stray_replies_;
    return verdict::drop;
  }
  if (h.to == gate_ && h.request() && gate_asks_.size() < 64 && gate_asks_.insert(h.data & basp_header::request_number).second)
    ++*asking_;
  if (h.to == gate_ || early_senders_.count(h.to) || (admitted && listeners_ && listeners_->has(h.to))) return verdict::pass;
  if (!admitted)
    return make_error(errc::unauthorized, which + " is a message for actor " + std::to_string(h.to) + ", not the gate, before the join");
  return make_error(errc::unauthorized, which + " is a message for actor " + std::to_string(h.to) +
                                            ", which is neither the gate nor a listener of this volunteer's generations (from its actor " +
                                            std::to_string(h.from) + ", " + std::to_string(h.payload) + " bytes)");
}

// ---------------------------------------------------------------- cluster_guard

std::uint64_t cluster_guard::default_reply_budget() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const std::uint64_t memory = pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page) : 0;
  return std::max<std::uint64_t>(memory / 4, 256u << 20);
}

cluster_guard::cluster_guard(limits l) : limits_(l) {}

cluster_guard::~cluster_guard() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stopping_ = true;
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }
  listener_.stop();
  {
    std::unique_lock<std::mutex> lock(m_);
    ended_.wait(lock, [&] { return threads_ == 0; });
  }
  if (ctx_) SSL_CTX_free(as_ctx(ctx_));
}

result<std::uint16_t> cluster_guard::start(const std::string& address, std::uint16_t port, const tls::link_files& files,
                                           std::uint16_t caf_port, std::uint64_t gate_actor_id) {
  if (ctx_) return make_error(errc::internal, "the cluster port is already open");
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  ctx_ = ctx;
  if (!ctx || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
      SSL_CTX_use_certificate_chain_file(ctx, files.certificate.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, files.key.c_str(), SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1 ||
      SSL_CTX_load_verify_locations(ctx, files.trusted.c_str(), nullptr) != 1)
    return make_error(errc::internal, tls::ssl_error("the cluster port cannot use its certificate"));
  // (as CAF's module: the client presents a certificate the trusted file issued — volunteers
  // all present the link certificate; their token is checked by the gate)
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_read_ahead(ctx, 1);  // (whole socket buffers at once, not a record's header and then its body)
  caf_port_ = caf_port;
  gate_id_ = gate_actor_id;

  auto bound = listener_.start(address, port, [this](int fd, const std::string& peer) { accepted(fd, peer); });
  if (!bound)
    return make_error(bound.err().code,
                      "cannot accept volunteers on " + address + ":" + std::to_string(port) + ": " + bound.err().message);
  return *bound;
}

std::optional<std::string> cluster_guard::peer_of(std::uint16_t p) const {
  std::lock_guard<std::mutex> lock(m_);
  auto it = links_.find(p);
  if (it == links_.end()) return std::nullopt;
  return it->second.peer;
}

std::uint64_t cluster_guard::admit(std::uint16_t p) {
  std::lock_guard<std::mutex> lock(m_);
  auto it = links_.find(p);
  if (it == links_.end()) return 0;
  if (!it->second.admitted) {
    it->second.admitted = true;
    left_joining(it->second.peer);
    joiners_.erase(it->second.fd);
  }
  return it->second.number;
}

std::shared_ptr<volunteer_rules::listeners> cluster_guard::listeners_of(std::uint64_t link, bool admitted_only) const {
  std::lock_guard<std::mutex> lock(m_);
  for (const auto& [_, k] : links_)
    if (k.number == link && (k.admitted || !admitted_only)) return k.listeners;
  return nullptr;
}

void cluster_guard::allow(std::uint64_t link, std::uint64_t id) {
  if (auto l = listeners_of(link, true)) l->grant(id);
}

void cluster_guard::forget(std::uint64_t link, std::uint64_t id) {
  if (auto l = listeners_of(link, false)) l->end(id);
}

void cluster_guard::left_joining(const std::string& peer) {
  --joining_;
  if (--joining_from_[peer] <= 0) joining_from_.erase(peer);
}

bool cluster_guard::asking_gate(std::uint16_t p) const {
  std::lock_guard<std::mutex> lock(m_);
  auto it = links_.find(p);
  return it != links_.end() && it->second.asking_gate->load() > 0;
}

bool cluster_guard::admitted(std::uint16_t p) const {
  std::lock_guard<std::mutex> lock(m_);
  auto it = links_.find(p);
  return it != links_.end() && it->second.admitted;
}

int cluster_guard::open_connections() const {
  std::lock_guard<std::mutex> lock(m_);
  return int(fds_.size());
}

void cluster_guard::count_refused(const std::string& peer, const char* reason, const std::string& why) {
  ++refused_;
  metrics::m().links_closed.with({reason}).inc();
  log::line("info", "gate", "closed a cluster connection from " + peer + ": " + why, {{"reason", reason}});
}

void cluster_guard::accepted(int fd, const std::string& peer) {
  std::string refuse, evicted;
  {
    std::lock_guard<std::mutex> lock(m_);
    if (stopping_) refuse = "the coordinator is stopping";
    else if (joining_from_[peer] >= limits_.max_joining_per_address)
      refuse = std::to_string(joining_from_[peer]) + " connections from there are joining already";
    else if (joining_ >= limits_.max_joining) {
      // The oldest joiner makes room: holding every slot then takes a stream of new
      // connections faster than a volunteer joins, not a few idle ones.
      auto oldest = std::min_element(joiners_.begin(), joiners_.end(),
                                     [](const auto& a, const auto& b) { return a.second.since < b.second.since; });
      if (oldest == joiners_.end()) {
        refuse = std::to_string(joining_) + " connections are joining already";
      } else {
        evicted = oldest->second.peer;
        ::shutdown(oldest->first, SHUT_RDWR);  // (its thread ends and leaves the count)
        evicted_.insert(oldest->first);
        joiners_.erase(oldest);
      }
    }
    if (refuse.empty()) {
      ++joining_;
      ++joining_from_[peer];
      ++threads_;
      fds_.insert(fd);
      joiners_[fd] = joiner{peer, steady::now()};
    } else if (joining_from_[peer] == 0) {
      joining_from_.erase(peer);
    }
  }
  if (!evicted.empty())
    count_refused(evicted, "busy",
                  "closed to make room for a newer joiner (" + std::to_string(limits_.max_joining) + " joining at once)");
  if (!refuse.empty()) {
    ::close(fd);
    count_refused(peer, "busy", refuse);
    return;
  }
  std::thread([this, fd, peer] { serve(fd, peer); }).detach();
}

void cluster_guard::serve(int fd, std::string peer) {
  const http::sigpipe_guard no_sigpipe;  // (OpenSSL writes to a volunteer that may be gone)
  tls::set_socket_timeouts(fd, limits_.handshake_patience, limits_.handshake_patience);
  SSL* ssl = SSL_new(as_ctx(ctx_));
  int caf = -1;
  std::uint16_t local_port = 0;
  std::string why;
  if (!ssl || SSL_set_fd(ssl, fd) != 1 || SSL_accept(ssl) != 1) {
    why = tls::ssl_error("no TLS handshake with the cluster's certificates");
  } else {
    caf = tls::connect_tcp("127.0.0.1", caf_port_, limits_.handshake_patience, why);
    if (caf >= 0) {
      sockaddr_in local{};
      socklen_t len = sizeof local;
      ::getsockname(caf, reinterpret_cast<sockaddr*>(&local), &len);
      local_port = ntohs(local.sin_port);
      const int one = 1;
      ::setsockopt(caf, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
  }
  ERR_clear_error();
  bool was_admitted = false;
  if (caf >= 0) {
    std::shared_ptr<const volunteer_rules::listeners> listeners;
    std::shared_ptr<std::atomic<int>> asking;
    {
      std::lock_guard<std::mutex> lock(m_);
      link& k = links_[local_port] = link{};
      k.peer = peer;
      k.fd = fd;
      k.number = ++next_link_;
      listeners = k.listeners;
      asking = k.asking_gate;
    }
    tls::set_socket_timeouts(fd, std::chrono::milliseconds(0), std::chrono::milliseconds(0));
    set_nonblocking(fd);
    set_nonblocking(caf);
    pump(ssl, fd, caf, local_port, std::move(listeners), std::move(asking));
    ::close(caf);
  } else {
    bool was_evicted = false;
    {
      std::lock_guard<std::mutex> lock(m_);
      was_evicted = evicted_.count(fd) > 0;
    }
    if (!was_evicted) count_refused(peer, "tls", why);
  }
  if (ssl) SSL_free(ssl);
  std::lock_guard<std::mutex> lock(m_);
  joiners_.erase(fd);
  evicted_.erase(fd);
  if (auto it = links_.find(local_port); caf >= 0 && it != links_.end()) {
    was_admitted = it->second.admitted;
    links_.erase(it);
  }
  if (!was_admitted) left_joining(peer);
  fds_.erase(fd);
  ::close(fd);
  if (--threads_ == 0) ended_.notify_all();
}

/// Moves bytes both ways until either side closes: the volunteer's through `frames` (a
/// refused header closes the link before any of it reaches CAF), CAF's as they are. Each
/// direction holds at most `backlog` bytes its receiver has not taken; the other side is not
/// read meanwhile.
void cluster_guard::pump(void* ssl_p, int client, int caf, std::uint16_t local_port,
                         std::shared_ptr<const volunteer_rules::listeners> l, std::shared_ptr<std::atomic<int>> asking_gate) {
  SSL* ssl = as_ssl(ssl_p);
  basp_frames frames, theirs;  // (the volunteer's frames; the coordinator's)
  const auto max_reply = std::uint32_t(std::min<std::uint64_t>(limits_.reply_budget, 0xFFFFFFFFu));
  volunteer_rules rules(gate_id_, std::move(l), std::move(asking_gate), limits_.joining_frame, max_reply);
  pending to_caf, to_client;
  // A reply held until whole (basp_frames::holding): its bytes, and a whole one's still on its
  // way to CAF, count against the budget all links share; the earliest-begun held reply always
  // reads on. Its rate is judged over the time it was free to read.
  struct holding {
    cluster_guard& g;
    std::uint64_t frame = 0, order = 0, counted = 0;
    steady::duration reading{};  ///< time it was free to read (waiting for the budget not counted)
    steady::time_point looked{};  ///< when `reading` was last brought up to date
    void count(std::uint64_t bytes) {
      if (bytes >= counted) g.held_ += bytes - counted;
      else g.held_ -= counted - bytes;
      counted = bytes;
    }
    void begin(std::uint64_t f) {
      end();
      std::lock_guard<std::mutex> lock(g.m_);
      frame = f;
      order = ++g.next_hold_;
      g.holders_.insert(order);
      reading = {};
      looked = steady::now();
    }
    void end() {
      if (frame == 0) return;
      std::lock_guard<std::mutex> lock(g.m_);
      g.holders_.erase(order);
      frame = 0;
    }
    bool earliest() const {
      std::lock_guard<std::mutex> lock(g.m_);
      return !g.holders_.empty() && *g.holders_.begin() == order;
    }
    ~holding() {
      count(0);
      end();
    }
  } hold{*this};
  auto recount = [&] {
    if (frames.holding() != hold.frame) {
      if (frames.holding()) hold.begin(frames.holding());
      else hold.end();
    }
    hold.count(frames.held() + (to_caf.size() > backlog ? to_caf.size() : 0));
  };

  std::vector<char> buf(chunk);
  const auto deadline = steady::now() + limits_.join_patience;
  bool admitted_now = false;
  auto now_admitted = [&] { return admitted_now || (admitted_now = admitted(local_port)); };
  const basp_frames::judge judge = [&](const basp_header& h) { return rules.judge(h, frames.frames(), now_admitted()); };
  const basp_frames::judge hear = [&](const basp_header& h) -> result<basp_frames::verdict> {
    rules.heard(h, now_admitted());
    return basp_frames::verdict::pass;
  };
  std::uint64_t replies_counted = 0, monitors_counted = 0;
  auto count_left_out = [&] {
    if (rules.stray_replies() == replies_counted && rules.stray_monitors() == monitors_counted) return;
    if (replies_counted == 0 && rules.stray_replies() > 0)
      log::line("info", "gate", "left out a reply nobody on the coordinator awaited from " + peer_of(local_port).value_or("?"));
    if (rules.stray_replies() > replies_counted)
      metrics::m().frames_left_out.with({"reply"}).inc(double(rules.stray_replies() - replies_counted));
    if (rules.stray_monitors() > monitors_counted)
      metrics::m().frames_left_out.with({"monitor"}).inc(double(rules.stray_monitors() - monitors_counted));
    replies_counted = rules.stray_replies();
    monitors_counted = rules.stray_monitors();
  };
  // A side that closes may have sent its last messages (a volunteer's final answers) just
  // before: they are passed on before the link ends, for at most handshake_patience.
  bool client_closed = false, caf_closed = false;
  steady::time_point drain_until{};
  for (;;) {
    bool client_wants_read = false, client_wants_write = false;
    bool moved = false;  // (bytes moved this round: go round again before waiting)
    if (!now_admitted() && steady::now() >= deadline) {
      const auto ms = limits_.join_patience.count();
      count_refused(peer_of(local_port).value_or("?"), "slow",
                    "not admitted within " + (ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms"));
      return;
    }
    // the volunteer's frames, judged, towards CAF (a held reply's while the budget has room)
    bool waiting = false;
    auto may_read = [&] {
      if (client_closed) return false;
      if (hold.frame == 0) return to_caf.size() < backlog;
      waiting = held_.load() >= limits_.reply_budget && !hold.earliest();
      return !waiting;
    };
    while (may_read()) {
      std::size_t got = 0;
      const int r = SSL_read_ex(ssl, buf.data(), buf.size(), &got);
      if (r == 1) {
        if (auto st = frames.feed(buf.data(), got, to_caf.bytes, judge); !st) {
          count_refused(peer_of(local_port).value_or("?"), "frame", st.err().message);
          return;
        }
        recount();
        count_left_out();
        moved = true;
        continue;
      }
      const int e = SSL_get_error(ssl, r);
      if (e == SSL_ERROR_WANT_READ) client_wants_read = true;
      else if (e == SSL_ERROR_WANT_WRITE) client_wants_write = true;
      else client_closed = true;  // (closed, or broken: what came before still goes on)
      break;
    }
    if (hold.frame != 0) {
      const auto now = steady::now();
      if (!waiting) hold.reading += now - hold.looked;
      hold.looked = now;
      const double past_grace = std::chrono::duration<double>(hold.reading - limits_.reply_grace).count();
      if (past_grace > 0 && double(frames.held()) < double(limits_.reply_min_rate) * past_grace) {
        const double secs = std::chrono::duration<double>(hold.reading).count();
        count_refused(peer_of(local_port).value_or("?"), "slow",
                      "frame " + std::to_string(hold.frame) + ", a reply, came at less than " +
                          std::to_string(limits_.reply_min_rate) + " bytes a second: " + std::to_string(frames.held()) +
                          " bytes in " + std::to_string(std::lround(secs)) + " s");
        return;
      }
    }
    while (to_caf.size() > 0) {
      const ssize_t w = ::send(caf, to_caf.bytes.data() + to_caf.at, to_caf.size(), MSG_NOSIGNAL);
      if (w > 0) to_caf.taken(std::size_t(w)), moved = true;
      else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      else if (w < 0 && errno == EINTR) continue;
      else return;
    }
    recount();
    // CAF's bytes towards the volunteer
    while (!caf_closed && to_client.size() < backlog) {
      const ssize_t r = ::recv(caf, buf.data(), buf.size(), 0);
      if (r > 0) {
        if (auto st = theirs.feed(buf.data(), std::size_t(r), to_client.bytes, hear); !st) {
          log::line("error", "gate", "the coordinator's middleman sent " + peer_of(local_port).value_or("?") + " " + st.err().message);
          return;
        }
        moved = true;
      }
      else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      else if (r < 0 && errno == EINTR) continue;
      else {
        caf_closed = true;  // (CAF closed the link)
        break;
      }
    }
    while (to_client.size() > 0) {
      std::size_t put = 0;
      const int r = SSL_write_ex(ssl, to_client.bytes.data() + to_client.at, to_client.size(), &put);
      if (r == 1) {
        to_client.taken(put);
        moved = true;
        continue;
      }
      const int e = SSL_get_error(ssl, r);
      if (e == SSL_ERROR_WANT_WRITE) client_wants_write = true;
      else if (e == SSL_ERROR_WANT_READ) client_wants_read = true;
      else return;
      break;
    }
    if ((client_closed && to_caf.size() == 0) || (caf_closed && to_client.size() == 0)) return;
    if (client_closed || caf_closed) {
      if (drain_until == steady::time_point{}) drain_until = steady::now() + limits_.handshake_patience;
      else if (steady::now() >= drain_until) return;
    }
    if (moved) continue;
    pollfd fds[2] = {{client, 0, 0}, {caf, 0, 0}};
    if (client_wants_read && may_read()) fds[0].events |= POLLIN;
    if (client_wants_write) fds[0].events |= POLLOUT;
    if (to_client.size() > 0 && !client_wants_read && !client_wants_write) fds[0].events |= POLLOUT;
    if (!caf_closed && to_client.size() < backlog) fds[1].events |= POLLIN;
    if (to_caf.size() > 0) fds[1].events |= POLLOUT;
    // (a second at most: the join patience is looked at again; a held reply waiting for the
    // budget looks again sooner)
    if (::poll(fds, 2, waiting ? 20 : 1000) < 0 && errno != EINTR) return;
    if ((fds[0].revents & (POLLERR | POLLNVAL)) || (fds[1].revents & (POLLERR | POLLNVAL))) return;
  }
}

}  // namespace mpakt
