// The cluster port's front (actors/cluster_guard.hpp): BASP frames followed across any split
// of their bytes; a real TLS front on loopback in front of a plain TCP server standing in for
// CAF's middleman. Frames pass both ways unchanged; a header CAF should never read closes the
// connection before any of it reaches the server; a joiner's frames are small until it is
// admitted; clients without the link certificate, too many joiners and slow joiners are
// turned away; the server learns the client's own address through peer_of.

#include "actors/cluster_guard.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <caf/atom.hpp>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "actors/cluster_tls.hpp"
#include "http/sigpipe_guard.hpp"
#include "test/support/files.hpp"
#include "test/support/net.hpp"
#include "test/support/wait.hpp"

namespace mpakt {
namespace {

using test::temp_dir;
using test::connect_loopback;
using test::wait_until;
using namespace std::chrono_literals;

/// The gate's actor number in these tests.
constexpr std::uint64_t gate = 7;
const std::set<std::uint64_t> gates{gate};

/// A BASP header: operation, three zero bytes, the payload's length, operation data, source
/// and receiving actor (big-endian).
std::string header(unsigned char op, std::uint32_t len, std::uint64_t to = gate, std::uint64_t from = 0) {
  std::string h(basp_frames::header_size, '\0');
  h[0] = char(op);
  for (int i = 0; i < 4; ++i) h[4 + i] = char((len >> (24 - 8 * i)) & 0xff);
  for (int i = 8; i < 16; ++i) h[std::size_t(i)] = char(i);  // (operation data: passes as it is)
  for (int i = 0; i < 8; ++i) h[16 + std::size_t(i)] = char((from >> (56 - 8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) h[24 + std::size_t(i)] = char((to >> (56 - 8 * i)) & 0xff);
  return h;
}

TEST(basp_frames, FramesAreFollowedAcrossAnySplitOfTheirBytes) {
  const std::string stream = header(1, 5) + "hello" + header(6, 0) + header(2, 40) + std::string(40, 'x');
  for (std::size_t piece : {std::size_t(1), std::size_t(3), std::size_t(32), std::size_t(37), stream.size()}) {
    basp_frames f;
    for (std::size_t at = 0; at < stream.size(); at += piece) {
      auto st = f.feed(stream.data() + at, std::min(piece, stream.size() - at), 40);
      ASSERT_TRUE(st) << piece << ": " << st.err().message;
    }
    EXPECT_EQ(f.frames(), 3u) << piece;
  }
  // a payload's bytes are never read as a header, whatever they hold
  basp_frames f;
  const std::string tricky = header(2, 32) + header(9, 0xffffffffu) + header(0, 1) + "z";
  EXPECT_TRUE(f.feed(tricky.data(), tricky.size(), 32));
  EXPECT_EQ(f.frames(), 2u);
}

TEST(basp_frames, BeforeTheJoinMessagesGoToTheGateAlone) {
  const std::string ok = header(1, 2) + "hs" + header(6, 0) + header(2, 3, gate) + "abc" + header(4, 0, 99) + header(5, 0, 98);
  basp_frames a;
  EXPECT_TRUE(a.feed(ok.data(), ok.size(), 64, &gates));  // handshakes, heartbeats, monitor and down messages
  basp_frames b;
  const std::string pool = header(2, 3, 12) + "add";
  auto st = b.feed(pool.data(), pool.size(), 64, &gates);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.err().code, errc::unauthorized);
  EXPECT_NE(st.err().message.find("frame 1 is a message for actor 12, not the gate, before the join"), std::string::npos)
      << st.err().message;
  basp_frames c;
  const std::string routed = header(3, 0, gate);
  auto rt = c.feed(routed.data(), routed.size(), 64, &gates);
  ASSERT_FALSE(rt);
  EXPECT_NE(rt.err().message.find("frame 1 is a routed message (for another node)"), std::string::npos) << rt.err().message;
  basp_frames member;  // nor, from a volunteer, after the join
  EXPECT_FALSE(member.feed(routed.data(), routed.size(), 64, nullptr, nullptr, false));
  basp_frames d;  // admitted: any actor
  EXPECT_TRUE(d.feed(pool.data(), pool.size(), 64));
  // a name, not a number: CAF's own question to the spawn server passes, another name does not
  auto named = [](std::uint64_t atom) {
    std::string h = header(2, 0, atom);
    h[3] = char(basp_frames::named_receiver_flag);
    return h;
  };
  const std::string spawn = named(basp_frames::spawn_server), config = named(static_cast<std::uint64_t>(caf::atom("ConfigServ")));
  basp_frames e;
  EXPECT_TRUE(e.feed(spawn.data(), spawn.size(), 64, &gates));
  st = e.feed(config.data(), config.size(), 64, &gates);
  ASSERT_FALSE(st);
  EXPECT_NE(st.err().message.find("is a message for a named actor"), std::string::npos) << st.err().message;
  // the gate's number as a name is still not the gate
  basp_frames f;
  const std::string gate_named = named(gate);
  EXPECT_FALSE(f.feed(gate_named.data(), gate_named.size(), 64, &gates));
  // the other direction's senders are collected: whom a reply may go to
  std::set<std::uint64_t> reach{gate};
  basp_frames theirs;
  const std::string asks = header(2, 1, 8, 15) + "?" + header(6, 0, 0, 16) + header(2, 0, 8, 17);
  EXPECT_TRUE(theirs.feed(asks.data(), asks.size(), 64, nullptr, &reach));
  EXPECT_EQ(reach, (std::set<std::uint64_t>{gate, 15, 17}));  // (a heartbeat is no message)
  basp_frames g;
  const std::string reply = header(2, 2, 15) + "ok";
  EXPECT_TRUE(g.feed(reply.data(), reply.size(), 64, &reach));
}

TEST(basp_frames, AHeaderNotBASPsOrTooLargeIsRefusedNamingWhy) {
  basp_frames a;
  const std::string op = header(7, 0);
  auto st = a.feed(op.data(), op.size(), 1000);
  ASSERT_FALSE(st);
  EXPECT_NE(st.err().message.find("not a BASP message (operation 7)"), std::string::npos) << st.err().message;

  basp_frames b;
  const std::string big = header(1, 0xfffffff0u);
  // refused when its length arrives, not before: the first 7 bytes say nothing yet
  EXPECT_TRUE(b.feed(big.data(), 7, 1u << 20));
  st = b.feed(big.data() + 7, big.size() - 7, 1u << 20);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.err().code, errc::limit);
  EXPECT_NE(st.err().message.find("frame 1 announces 4294967280 bytes, more than the 1048576 allowed"), std::string::npos)
      << st.err().message;

  basp_frames c;  // exactly the limit passes
  const std::string edge = header(2, 64) + std::string(64, 'e');
  EXPECT_TRUE(c.feed(edge.data(), edge.size(), 64));
}

/// A plain TCP server on loopback standing in for CAF's middleman: keeps what each
/// connection sends, and the peer port of each (what the middleman would report).
struct backend {
  int listen_fd = -1;
  std::uint16_t port = 0;
  std::thread t;
  std::mutex m;
  std::vector<int> conns;
  std::vector<std::uint16_t> peer_ports;
  std::vector<std::string> received;
  std::vector<bool> closed;
  std::atomic<bool> stop{false};

  backend() {
    listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listen_fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listen_fd, 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    t = std::thread([this] { run(); });
  }
  ~backend() {
    stop = true;
    t.join();
    for (int fd : conns) ::close(fd);
    ::close(listen_fd);
  }
  void run() {
    char buf[65536];
    while (!stop) {
      std::vector<pollfd> fds{{listen_fd, POLLIN, 0}};
      {
        std::lock_guard<std::mutex> l(m);
        for (std::size_t i = 0; i < conns.size(); ++i) fds.push_back({closed[i] ? -1 : conns[i], POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        sockaddr_in from{};
        socklen_t len = sizeof from;
        const int fd = ::accept(listen_fd, reinterpret_cast<sockaddr*>(&from), &len);
        std::lock_guard<std::mutex> l(m);
        conns.push_back(fd);
        peer_ports.push_back(ntohs(from.sin_port));
        received.emplace_back();
        closed.push_back(false);
      }
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
        const ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, 0);
        std::lock_guard<std::mutex> l(m);
        if (n > 0) received[i - 1].append(buf, std::size_t(n));
        else closed[i - 1] = true;
      }
    }
  }
  std::size_t count() {
    std::lock_guard<std::mutex> l(m);
    return conns.size();
  }
  std::string got(std::size_t i) {
    std::lock_guard<std::mutex> l(m);
    return received[i];
  }
  std::size_t size(std::size_t i) {
    std::lock_guard<std::mutex> l(m);
    return received[i].size();
  }
  bool is_closed(std::size_t i) {
    std::lock_guard<std::mutex> l(m);
    return closed[i];
  }
  std::uint16_t peer_port(std::size_t i) {
    std::lock_guard<std::mutex> l(m);
    return peer_ports[i];
  }
  void send(std::size_t i, const std::string& s) {
    int fd;
    {
      std::lock_guard<std::mutex> l(m);
      fd = conns[i];
    }
    EXPECT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), ssize_t(s.size()));
  }
};

/// A volunteer's side: TLS presenting `files`' certificate and trusting the coordinator's.
struct client {
  http::sigpipe_guard no_sigpipe;  // (writing to a connection the front closed is the point)
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  int fd = -1;
  bool up = false;
  client(const tls::link_files& mine, std::uint16_t port, const char* source = "127.0.0.1") {
    ctx = SSL_CTX_new(TLS_client_method());
    if (!mine.certificate.empty()) {
      EXPECT_EQ(SSL_CTX_use_certificate_file(ctx, mine.certificate.c_str(), SSL_FILETYPE_PEM), 1);
      EXPECT_EQ(SSL_CTX_use_PrivateKey_file(ctx, mine.key.c_str(), SSL_FILETYPE_PEM), 1);
    }
    EXPECT_EQ(SSL_CTX_load_verify_locations(ctx, mine.trusted.c_str(), nullptr), 1);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    fd = connect_loopback(port, source);
    tls::set_socket_timeouts(fd, 10s, 10s);
    ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    up = SSL_connect(ssl) == 1;
  }
  ~client() {
    if (ssl) SSL_free(ssl);
    if (ctx) SSL_CTX_free(ctx);
    if (fd >= 0) ::close(fd);
  }
  bool write(const std::string& s) {
    std::size_t put = 0;
    return SSL_write_ex(ssl, s.data(), s.size(), &put) == 1 && put == s.size();
  }
  /// Reads `n` bytes; what came before the end of the stream if fewer did.
  std::string read(std::size_t n) {
    std::string out;
    char buf[4096];
    while (out.size() < n) {
      std::size_t got = 0;
      if (SSL_read_ex(ssl, buf, std::min(sizeof buf, n - out.size()), &got) != 1) break;
      out.append(buf, got);
    }
    return out;
  }
  /// Whether the other side closed the connection (a read that ends, not one that times out).
  bool ended() {
    char c;
    std::size_t got = 0;
    return SSL_read_ex(ssl, &c, 1, &got) != 1;
  }
};

struct guarded {
  temp_dir coordinator_dir, volunteer_dir;
  tls::link_files coordinator, volunteer;
  backend caf;
  std::unique_ptr<cluster_guard> guard;
  std::uint16_t port = 0;
  explicit guarded(cluster_guard::limits l = {}) {
    std::string fp;
    auto c = tls::coordinator_files(coordinator_dir.path + "/cluster", "", "", &fp);
    EXPECT_TRUE(c) << c.err().message;
    coordinator = *c;
    // the volunteer presents the link certificate and trusts the coordinator's
    auto v = tls::volunteer_files(volunteer_dir.path, "");
    EXPECT_TRUE(v) << v.err().message;
    volunteer = *v;
    volunteer.trusted = coordinator.certificate;
    guard = std::make_unique<cluster_guard>(l);
    auto p = guard->start("127.0.0.1", 0, coordinator, caf.port, gate);
    EXPECT_TRUE(p) << p.err().message;
    port = p ? *p : 0;
  }
};

TEST(cluster_guard, FramesPassBothWaysAndTheServerLearnsTheClientsAddress) {
  guarded g;
  client v(g.volunteer, g.port, "127.0.0.2");
  ASSERT_TRUE(v.up);
  const std::string hello = header(1, 5) + "hello" + header(6, 0);
  ASSERT_TRUE(v.write(hello));
  wait_until([&] { return g.caf.count() == 1 && g.caf.got(0).size() == hello.size(); });
  ASSERT_EQ(g.caf.count(), 1u);
  EXPECT_EQ(g.caf.got(0), hello);
  // the middleman reports the front's port; the front maps it to the volunteer's address
  EXPECT_EQ(g.guard->peer_of(g.caf.peer_port(0)).value_or("none"), "127.0.0.2");
  EXPECT_FALSE(g.guard->peer_of(1));
  // the coordinator's bytes go back unchanged and unchecked (here: not even frames)
  const std::string back(200000, 'b');
  g.caf.send(0, back);
  EXPECT_EQ(v.read(back.size()), back);
  EXPECT_EQ(g.guard->refused(), 0u);
}

TEST(cluster_guard, AHugeFrameFromAJoinerClosesItBeforeTheServerSeesTheHeader) {
  guarded g;
  client v(g.volunteer, g.port);
  ASSERT_TRUE(v.up);
  const std::string ok = header(1, 3) + "abc";
  ASSERT_TRUE(v.write(ok));
  wait_until([&] { return g.caf.count() == 1 && g.caf.got(0).size() == ok.size(); });
  // 72 bytes that asked CAF for 4 GiB
  ASSERT_TRUE(v.write(header(1, 0xfffffff0u) + std::string(40, '\0')));
  EXPECT_TRUE(v.ended());
  wait_until([&] { return g.caf.is_closed(0); });
  EXPECT_TRUE(g.caf.is_closed(0));
  EXPECT_EQ(g.caf.got(0), ok);  // nothing of the refused header
  EXPECT_EQ(g.guard->refused(), 1u);
  wait_until([&] { return g.guard->open_connections() == 0; });
  EXPECT_EQ(g.guard->open_connections(), 0);
  // the port still takes the next volunteer
  client w(g.volunteer, g.port);
  ASSERT_TRUE(w.up);
  ASSERT_TRUE(w.write(ok));
  wait_until([&] { return g.caf.count() == 2 && g.caf.got(1) == ok; });
  EXPECT_EQ(g.caf.got(1), ok);
}

TEST(cluster_guard, AnAdmittedVolunteerMaySendLargerFrames) {
  cluster_guard::limits l;
  l.joining_frame = 100;
  guarded g(l);
  client v(g.volunteer, g.port);
  ASSERT_TRUE(v.up);
  ASSERT_TRUE(v.write(header(2, 100) + std::string(100, 'j')));  // a joiner's largest
  wait_until([&] { return g.caf.count() == 1 && g.caf.got(0).size() == 132; });
  ASSERT_EQ(g.caf.got(0).size(), 132u);
  g.guard->admit(g.caf.peer_port(0));
  const std::string reply = header(2, 300000) + std::string(300000, 'r');
  ASSERT_TRUE(v.write(reply));
  wait_until([&] { return g.caf.got(0).size() == 132 + reply.size(); });
  EXPECT_EQ(g.caf.got(0).size(), 132 + reply.size());
  EXPECT_FALSE(g.caf.is_closed(0));
  // while a joiner that sends as much is closed
  client j(g.volunteer, g.port);
  ASSERT_TRUE(j.up);
  ASSERT_TRUE(j.write(header(2, 101)));
  EXPECT_TRUE(j.ended());
  EXPECT_EQ(g.guard->refused(), 1u);
}

TEST(cluster_guard, AJoinerMessagingAnotherActorThanTheGateIsCutOff) {
  guarded g;
  client v(g.volunteer, g.port);
  ASSERT_TRUE(v.up);
  const std::string join = header(1, 2) + "hs" + header(2, 4) + "join";
  ASSERT_TRUE(v.write(join));
  wait_until([&] { return g.caf.count() == 1 && g.caf.size(0) == join.size(); });
  // an actor that asks the joiner something may be answered
  g.caf.send(0, header(2, 1, 8, 15) + "?");
  EXPECT_EQ(v.read(33), header(2, 1, 8, 15) + "?");
  const std::string answer = header(2, 1, 15) + "!";
  ASSERT_TRUE(v.write(answer));
  wait_until([&] { return g.caf.size(0) == join.size() + answer.size(); });
  ASSERT_TRUE(v.write(header(2, 3, 3) + "add"));  // (actor 3: say, the pool)
  EXPECT_TRUE(v.ended());
  wait_until([&] { return g.caf.is_closed(0); });
  EXPECT_EQ(g.caf.got(0), join + answer);
  // admitted, a volunteer answers whoever asked it
  client w(g.volunteer, g.port);
  ASSERT_TRUE(w.up);
  ASSERT_TRUE(w.write(join));
  wait_until([&] { return g.caf.count() == 2 && g.caf.size(1) == join.size(); });
  g.guard->admit(g.caf.peer_port(1));
  const std::string reply = header(2, 2, 3) + "ok";
  ASSERT_TRUE(w.write(reply));
  wait_until([&] { return g.caf.size(1) == join.size() + reply.size(); });
  EXPECT_EQ(g.caf.got(1), join + reply);
  // but nothing for the coordinator to pass on to another node (another volunteer's actors)
  ASSERT_TRUE(w.write(header(3, 2, 3) + "hi"));
  EXPECT_TRUE(w.ended());
  wait_until([&] { return g.caf.is_closed(1); });
  EXPECT_EQ(g.caf.got(1), join + reply);
  EXPECT_EQ(g.guard->refused(), 2u);
}

TEST(cluster_guard, ManyMegabytesPassIntactEachWay) {
  guarded g;
  client v(g.volunteer, g.port);
  ASSERT_TRUE(v.up);
  ASSERT_TRUE(v.write(header(1, 4) + "join"));
  wait_until([&] { return g.caf.count() == 1 && g.caf.size(0) == 36; });
  ASSERT_EQ(g.caf.count(), 1u);
  g.guard->admit(g.caf.peer_port(0));
  // 16 MB of frames from the volunteer (its checkpoint, say), many times the front's backlog
  std::string up = header(1, 4) + "join";
  for (int f = 0; f < 8; ++f) {
    std::string payload(2u << 20, '\0');
    for (std::size_t i = 0; i < payload.size(); i += 97) payload[i] = char(f * 31 + int(i % 251));
    const std::string frame = header(2, std::uint32_t(payload.size())) + payload;
    ASSERT_TRUE(v.write(frame));
    up += frame;
  }
  wait_until([&] { return g.caf.size(0) == up.size(); }, 20s);
  EXPECT_TRUE(g.caf.got(0) == up) << g.caf.size(0) << " of " << up.size() << " bytes";
  // 8 MB from the coordinator, sent while the volunteer reads
  std::string down(8u << 20, '\0');
  for (std::size_t i = 0; i < down.size(); ++i) down[i] = char((i * 7 + i / 4099) & 0xff);
  std::thread sender([&] { g.caf.send(0, down); });
  EXPECT_EQ(v.read(down.size()), down);
  sender.join();
  EXPECT_EQ(g.guard->refused(), 0u);
}

TEST(cluster_guard, WhatAVolunteerSentJustBeforeLeavingStillReachesTheServer) {
  guarded g;
  std::string sent = header(1, 4) + "join";
  client v(g.volunteer, g.port);
  ASSERT_TRUE(v.up);
  ASSERT_TRUE(v.write(sent));
  wait_until([&] { return g.caf.count() == 1 && g.caf.size(0) == sent.size(); });
  ASSERT_EQ(g.caf.count(), 1u);
  g.guard->admit(g.caf.peer_port(0));
  // its last answers, three times the front's backlog, then its end of the connection closes
  for (int f = 0; f < 3; ++f) {
    const std::string frame = header(2, 1u << 20) + std::string(1u << 20, char('a' + f));
    ASSERT_TRUE(v.write(frame));
    sent += frame;
  }
  ::shutdown(v.fd, SHUT_WR);
  wait_until([&] { return g.caf.is_closed(0); }, 10s);
  EXPECT_TRUE(g.caf.is_closed(0));
  EXPECT_EQ(g.caf.size(0), sent.size());
  EXPECT_TRUE(g.caf.got(0) == sent);
}

TEST(cluster_guard, ClientsWithoutTheLinkCertificateNeverReachTheServer) {
  guarded g;
  tls::link_files none = g.volunteer;
  none.certificate.clear();
  none.key.clear();
  client anonymous(none, g.port);
  EXPECT_TRUE(!anonymous.up || anonymous.ended());
  // a certificate of its own (the coordinator's, as a stranger might try) is not the link's
  tls::link_files other = g.volunteer;
  other.certificate = g.coordinator.certificate;
  other.key = g.coordinator.key;
  client stranger(other, g.port);
  EXPECT_TRUE(!stranger.up || stranger.ended());
  wait_until([&] { return g.guard->refused() >= 2; });
  EXPECT_EQ(g.guard->refused(), 2u);
  EXPECT_EQ(g.caf.count(), 0u);
}

TEST(cluster_guard, JoinersAreBoundedInNumberAndTime) {
  cluster_guard::limits l;
  l.max_joining_per_address = 2;
  l.join_patience = 3s;  // (room for three TLS handshakes on a busy machine before the admission)
  guarded g(l);
  client a(g.volunteer, g.port), b(g.volunteer, g.port);
  ASSERT_TRUE(a.up && b.up);
  ASSERT_TRUE(a.write(header(1, 1) + "A") && b.write(header(1, 1) + "B"));
  wait_until([&] { return g.caf.count() == 2 && g.caf.size(0) == 33 && g.caf.size(1) == 33; });
  ASSERT_EQ(g.caf.count(), 2u);
  const std::size_t ia = g.caf.got(0).back() == 'A' ? 0 : 1;  // (the front connects them in either order)
  client c(g.volunteer, g.port);  // a third from the same address while two join
  EXPECT_TRUE(!c.up || c.ended());
  EXPECT_GE(g.guard->refused(), 1u);
  // another address is not held to this one's count
  client d(g.volunteer, g.port, "127.0.0.3");
  EXPECT_TRUE(d.up);
  // admitted, a connection stays past the patience; the others are closed by it
  wait_until([&] { return g.caf.count() == 3; });
  g.guard->admit(g.caf.peer_port(ia));
  EXPECT_TRUE(b.ended());
  EXPECT_TRUE(d.ended());
  ASSERT_TRUE(a.write(header(6, 0)));
  wait_until([&] { return g.caf.size(ia) == 65; });
  EXPECT_EQ(g.caf.size(ia), 65u);
  EXPECT_FALSE(g.caf.is_closed(ia));
}

TEST(cluster_guard, StoppingClosesEveryConnectionPromptly) {
  auto g = std::make_unique<guarded>();
  client a(g->volunteer, g->port);
  ASSERT_TRUE(a.up);
  const int silent = connect_loopback(g->port);  // (still in its TLS handshake)
  wait_until([&] { return g->caf.count() == 1; });
  const auto t = std::chrono::steady_clock::now();
  g->guard.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t, 3s);
  EXPECT_TRUE(a.ended());
  ::close(silent);
}

}  // namespace
}  // namespace mpakt
