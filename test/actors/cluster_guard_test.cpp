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
/// A message id's parts (caf::message_id): a normal-priority request numbered n, its reply.
constexpr std::uint64_t normal = 0x1000000000000000ull;
constexpr std::uint64_t request(std::uint64_t n) { return normal | n; }
constexpr std::uint64_t reply_to(std::uint64_t n) { return basp_header::response_flag | normal | n; }

/// A BASP header: operation, two zero bytes, flags, the payload's length, operation data (a
/// message's id; 0: an urgent message that is no request), source and receiving actor
/// (big-endian).
std::string header(unsigned char op, std::uint32_t len, std::uint64_t to = gate, std::uint64_t from = 0,
                   std::uint64_t data = 0, unsigned char flags = 0) {
  std::string h(basp_frames::header_size, '\0');
  h[0] = char(op);
  h[3] = char(flags);
  for (int i = 0; i < 4; ++i) h[4 + i] = char((len >> (24 - 8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) h[8 + std::size_t(i)] = char((data >> (56 - 8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) h[16 + std::size_t(i)] = char((from >> (56 - 8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) h[24 + std::size_t(i)] = char((to >> (56 - 8 * i)) & 0xff);
  return h;
}

const basp_frames::judge pass_all = [](const basp_header&) -> result<basp_frames::verdict> { return basp_frames::verdict::pass; };

TEST(basp_frames, FramesAreFollowedAcrossAnySplitOfTheirBytes) {
  const std::string hello = header(1, 5) + "hello", beat = header(6, 0), msg = header(2, 40, 9, 3, 77) + std::string(40, 'x');
  const std::string stream = hello + beat + msg;
  std::vector<basp_header> seen;
  const basp_frames::judge drop_messages = [&](const basp_header& h) -> result<basp_frames::verdict> {
    seen.push_back(h);
    return h.operation == basp_header::direct_message ? basp_frames::verdict::drop : basp_frames::verdict::pass;
  };
  for (std::size_t piece : {std::size_t(1), std::size_t(3), std::size_t(32), std::size_t(37), stream.size()}) {
    basp_frames f, d;
    std::vector<char> out, kept;
    seen.clear();
    for (std::size_t at = 0; at < stream.size(); at += piece) {
      const std::size_t n = std::min(piece, stream.size() - at);
      auto st = f.feed(stream.data() + at, n, out, pass_all);
      ASSERT_TRUE(st) << piece << ": " << st.err().message;
      ASSERT_TRUE(d.feed(stream.data() + at, n, kept, drop_messages));
    }
    EXPECT_EQ(f.frames(), 3u) << piece;
    EXPECT_EQ(std::string(out.begin(), out.end()), stream) << piece;
    EXPECT_EQ(std::string(kept.begin(), kept.end()), hello + beat) << piece;  // (the message, header and payload, left out)
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[2].payload, 40u);
    EXPECT_EQ(seen[2].data, 77u);
    EXPECT_EQ(seen[2].from, 3u);
    EXPECT_EQ(seen[2].to, 9u);
  }
  // a payload's bytes are never read as a header, whatever they hold
  basp_frames f;
  std::vector<char> out;
  const std::string tricky = header(2, 32) + header(9, 0xffffffffu) + header(0, 1) + "z";
  EXPECT_TRUE(f.feed(tricky.data(), tricky.size(), out, pass_all));
  EXPECT_EQ(f.frames(), 2u);
}

TEST(basp_frames, AHeldFrameIsPassedOnOnlyWholeAcrossAnySplit) {
  const std::string before = header(1, 5) + "hello", held = header(2, 300, 9, 3, 77) + std::string(300, 'r'),
                    after = header(6, 0) + header(2, 2, 9, 3) + "ok";
  const std::string stream = before + held + after;
  const basp_frames::judge hold_large = [](const basp_header& h) -> result<basp_frames::verdict> {
    return h.payload > 100 ? basp_frames::verdict::hold : basp_frames::verdict::pass;
  };
  for (std::size_t piece : {std::size_t(1), std::size_t(7), std::size_t(33), std::size_t(100), stream.size()}) {
    basp_frames f;
    std::vector<char> out;
    for (std::size_t at = 0; at < stream.size(); at += piece) {
      const std::size_t n = std::min(piece, stream.size() - at);
      ASSERT_TRUE(f.feed(stream.data() + at, n, out, hold_large));
      const std::size_t through = at + n;  // (bytes fed so far)
      if (through >= before.size() + basp_header::size && through < before.size() + held.size()) {
        // nothing of the held frame yet, however much of it came
        EXPECT_EQ(std::string(out.begin(), out.end()), before) << piece << " at " << through;
        EXPECT_EQ(f.holding(), 2u);
        EXPECT_EQ(f.held(), through - before.size());
      }
    }
    EXPECT_EQ(std::string(out.begin(), out.end()), stream) << piece;
    EXPECT_EQ(f.holding(), 0u);
    EXPECT_EQ(f.held(), 0u);
    EXPECT_EQ(f.frames(), 4u);
  }
}

TEST(basp_frames, AHeaderNotBASPsIsRefusedNamingWhy) {
  std::vector<char> out;
  basp_frames a;
  const std::string op = header(7, 0);
  auto st = a.feed(op.data(), op.size(), out, pass_all);
  ASSERT_FALSE(st);
  EXPECT_NE(st.err().message.find("not a BASP message (operation 7)"), std::string::npos) << st.err().message;
  EXPECT_TRUE(out.empty());
}

TEST(volunteer_rules, BeforeTheJoinAFrameLargerThanAJoinersIsRefusedWhenItsHeaderIsWhole) {
  std::vector<char> out;
  volunteer_rules r(gate, std::make_shared<volunteer_rules::listeners>(), std::make_shared<std::atomic<int>>(0), 1u << 20);
  basp_frames b;
  const basp_frames::judge before_the_join = [&](const basp_header& h) { return r.judge(h, b.frames(), false); };
  const std::string big = header(1, 0xfffffff0u);
  // refused when its length arrives, not before: the first 7 bytes say nothing yet
  EXPECT_TRUE(b.feed(big.data(), 7, out, before_the_join));
  auto st = b.feed(big.data() + 7, big.size() - 7, out, before_the_join);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.err().code, errc::limit);
  EXPECT_NE(st.err().message.find("frame 1 announces 4294967280 bytes, more than the 1048576 allowed"), std::string::npos)
      << st.err().message;
  EXPECT_TRUE(out.empty());  // (nothing of the header passed on)

  volunteer_rules small(gate, std::make_shared<volunteer_rules::listeners>(), std::make_shared<std::atomic<int>>(0), 64);
  basp_frames c;  // exactly the limit passes
  const std::string edge = header(2, 64) + std::string(64, 'e');
  EXPECT_TRUE(c.feed(edge.data(), edge.size(), out, [&](const basp_header& h) { return small.judge(h, c.frames(), false); }));
  EXPECT_EQ(out.size(), edge.size());
}

/// Judges frames of the volunteer's (and hears the coordinator's) through `rules`.
struct rules_run {
  std::shared_ptr<volunteer_rules::listeners> listeners = std::make_shared<volunteer_rules::listeners>();
  volunteer_rules rules{gate, listeners};
  bool admitted = false;
  std::uint64_t frame = 0;
  static basp_header parse(const std::string& h) {
    basp_header out;
    basp_frames f;
    std::vector<char> ignored;
    (void)f.feed(h.data(), h.size(), ignored, [&](const basp_header& x) -> result<basp_frames::verdict> {
      out = x;
      return basp_frames::verdict::pass;
    });
    return out;
  }
  void hear(const std::string& h) { rules.heard(parse(h), admitted); }
  /// "pass", "drop", or the refusal's message.
  std::string judge(const std::string& h) {
    auto v = rules.judge(parse(h), ++frame, admitted);
    if (!v) return v.err().message;
    return *v == basp_frames::verdict::pass ? "pass" : *v == basp_frames::verdict::hold ? "hold" : "drop";
  }
};

std::string named(std::uint64_t atom) { return header(2, 0, atom, 0, 0, basp_header::named_receiver_flag); }

TEST(volunteer_rules, BeforeTheJoinMessagesGoToTheGateAlone) {
  rules_run r;
  EXPECT_EQ(r.judge(header(1, 2)), "pass");  // handshake
  EXPECT_EQ(r.judge(header(6, 0)), "pass");  // heartbeat
  EXPECT_EQ(r.judge(header(5, 0, 0, 98)), "pass");  // one of its own actors ended
  EXPECT_EQ(r.judge(header(2, 4, gate, 50, request(1))), "pass");  // the join
  EXPECT_EQ(r.judge(header(2, 3, 12)), "frame 5 is a message for actor 12, not the gate, before the join");
  EXPECT_EQ(r.judge(header(2, 3, 12, 50, request(2))), "frame 6 is a message for actor 12, not the gate, before the join");
  EXPECT_EQ(r.judge(header(3, 0, gate)), "frame 7 is a routed message (for another node)");
  // a name, not a number: CAF's own question to the spawn server passes, another name does not
  EXPECT_EQ(r.judge(named(basp_frames::spawn_server)), "pass");
  EXPECT_NE(r.judge(named(static_cast<std::uint64_t>(caf::atom("ConfigServ")))).find("is a message for a named actor"),
            std::string::npos);
  EXPECT_NE(r.judge(named(gate)).find("is a message for a named actor"), std::string::npos);  // (the gate's number as a name)
  // an actor of the coordinator's middleman asks it something without a request number: its
  // answer may go there, before and after the join
  r.hear(header(2, 10, 8, 20));
  EXPECT_EQ(r.judge(header(2, 10, 20)), "pass");
  r.admitted = true;
  EXPECT_EQ(r.judge(header(2, 10, 20)), "pass");
  r.hear(header(2, 10, 8, 21));  // (after the join, such a sender gains nothing)
  EXPECT_NE(r.judge(header(2, 10, 21)).find("is a message for actor 21"), std::string::npos);
  // but the middleman's question to the volunteer's spawn server may cross after the
  // admission on a busy machine: its asker hears the answer
  r.hear(header(2, 10, basp_frames::spawn_server, 22, 0, basp_header::named_receiver_flag));
  EXPECT_EQ(r.judge(header(2, 10, 22)), "pass");
  r.hear(header(2, 10, static_cast<std::uint64_t>(caf::atom("ConfigServ")), 23, 0, basp_header::named_receiver_flag));
  EXPECT_NE(r.judge(header(2, 10, 23)).find("is a message for actor 23"), std::string::npos);  // (another name: no)
}

TEST(volunteer_rules, AReplyGoesOnlyToTheActorThatAskedItOnce) {
  rules_run r;
  r.hear(header(2, 9, 8, 15, request(5)));
  EXPECT_EQ(r.judge(header(2, 2, 15, 8, reply_to(5))), "pass");
  EXPECT_EQ(r.judge(header(2, 2, 15, 8, reply_to(5))), "drop");  // (answered already)
  EXPECT_EQ(r.judge(header(2, 2, 15, 8, reply_to(6))), "drop");  // (not asked)
  r.hear(header(2, 9, 8, 15, request(7)));
  EXPECT_EQ(r.judge(header(2, 2, 16, 8, reply_to(7))), "drop");  // (asked by another actor)
  EXPECT_EQ(r.rules.stray_replies(), 3u);
  // an urgent request (no category bits) and its reply
  r.hear(header(2, 9, 8, 30, 9));
  EXPECT_EQ(r.judge(header(2, 2, 30, 8, basp_header::response_flag | 9)), "pass");
  // admitted, the same: a reply to the pool's question passes, a made-up one to the pool not
  r.admitted = true;
  r.hear(header(2, 9, 8, 3, request(40)));
  EXPECT_EQ(r.judge(header(2, 2, 3, 8, reply_to(41))), "drop");
  EXPECT_EQ(r.judge(header(2, 2, 3, 8, reply_to(40))), "pass");
  EXPECT_EQ(r.rules.stray_replies(), 4u);
  // the oldest unanswered question is forgotten past the bound
  for (std::uint64_t n = 1; n <= volunteer_rules::max_outstanding + 1; ++n) r.hear(header(2, 0, 8, 60, request(n)));
  EXPECT_EQ(r.judge(header(2, 0, 60, 8, reply_to(1))), "drop");
  EXPECT_EQ(r.judge(header(2, 0, 60, 8, reply_to(2))), "pass");
  EXPECT_EQ(r.judge(header(2, 0, 60, 8, reply_to(volunteer_rules::max_outstanding + 1))), "pass");
}

TEST(volunteer_rules, AnAdmittedVolunteersMessagesGoToTheGateAndItsListenersAlone) {
  rules_run r;
  r.admitted = true;
  // the pool asked it something: that makes the pool no receiver of its own messages
  r.hear(header(2, 9, 8, 3, request(1)));
  EXPECT_EQ(r.judge(header(2, 30, 3, 8)),
            "frame 1 is a message for actor 3, which is neither the gate nor a listener of this volunteer's generations "
            "(from its actor 8, 30 bytes)");
  EXPECT_NE(r.judge(header(2, 30, 3, 8, request(9))).find("is a message for actor 3"), std::string::npos);
  EXPECT_EQ(r.judge(header(2, 30, gate, 8, request(2))), "pass");  // (say, a join with another token)
  // a listener granted by the coordinator hears its tokens, until it is forgotten
  r.listeners->grant(44);
  EXPECT_EQ(r.judge(header(2, 30, 44, 8)), "pass");
  EXPECT_NE(r.judge(header(2, 30, 45, 8)).find("is a message for actor 45"), std::string::npos);
  // (its last tokens may cross its end: CAF drops them)
  r.listeners->end(44);
  EXPECT_EQ(r.judge(header(2, 30, 44, 8)), "pass");
  // a listener is nobody's before the admission
  rules_run j;
  j.listeners->grant(44);
  EXPECT_NE(j.judge(header(2, 30, 44, 8)).find("not the gate, before the join"), std::string::npos);
  EXPECT_NE(r.judge(header(3, 0, gate)).find("routed message"), std::string::npos);
}

TEST(volunteer_rules, ItsJoinAwaitsTheGatesAnswerUntilItCrossesBack) {
  auto asking = std::make_shared<std::atomic<int>>(0);
  volunteer_rules r(gate, std::make_shared<volunteer_rules::listeners>(), asking);
  auto parse = rules_run::parse;
  EXPECT_TRUE(r.judge(parse(header(2, 4, gate, 50, request(1))), 1, false));  // the join
  EXPECT_EQ(asking->load(), 1);
  r.heard(parse(header(2, 4, 50, 8, reply_to(1))), false);  // (another actor's reply: not the gate's)
  EXPECT_EQ(asking->load(), 1);
  r.heard(parse(header(2, 4, 50, gate, reply_to(2))), false);  // (the gate, answering another number)
  EXPECT_EQ(asking->load(), 1);
  r.heard(parse(header(2, 4, 50, gate, reply_to(1))), false);
  EXPECT_EQ(asking->load(), 0);
  EXPECT_TRUE(r.judge(parse(header(2, 4, gate, 50)), 2, true));  // (no request: nothing awaited)
  EXPECT_EQ(asking->load(), 0);
}

TEST(volunteer_rules, OnlyARepliesMayBeLargerThanAJoinersFrame) {
  auto asking = std::make_shared<std::atomic<int>>(0);
  auto l = std::make_shared<volunteer_rules::listeners>();
  l->grant(44);
  volunteer_rules r(gate, l, asking, 1000);
  auto parse = rules_run::parse;
  r.heard(parse(header(2, 9, 8, 15, request(5))), true);
  auto big_reply = r.judge(parse(header(2, 5000000, 15, 8, reply_to(5))), 1, true);
  ASSERT_TRUE(big_reply);
  EXPECT_EQ(*big_reply, basp_frames::verdict::hold);  // (held until whole)
  r.heard(parse(header(2, 9, 8, 15, request(6))), true);
  auto small_reply = r.judge(parse(header(2, 1000, 15, 8, reply_to(6))), 1, true);
  ASSERT_TRUE(small_reply);
  EXPECT_EQ(*small_reply, basp_frames::verdict::pass);
  EXPECT_TRUE(r.judge(parse(header(2, 1000, 44, 8)), 2, true));  // a token, at the bound
  for (const auto& h : {header(2, 1001, 44, 8), header(2, 1001, gate, 8, request(3)), header(5, 5000), header(4, 2000, gate)}) {
    auto v = r.judge(parse(h), 3, true);
    ASSERT_FALSE(v);
    EXPECT_NE(v.err().message.find("frame 3 announces"), std::string::npos) << v.err().message;
    EXPECT_NE(v.err().message.find("more than the 1000 a message that answers no request may carry"), std::string::npos);
  }
}

TEST(volunteer_rules, ARepliesSizeIsBoundedByTheBudgetForReplies) {
  auto l = std::make_shared<volunteer_rules::listeners>();
  volunteer_rules r(gate, l, std::make_shared<std::atomic<int>>(0), 1000, 5000);
  auto parse = rules_run::parse;
  r.heard(parse(header(2, 9, 8, 15, request(5))), true);
  auto at_bound = r.judge(parse(header(2, 5000, 15, 8, reply_to(5))), 1, true);
  ASSERT_TRUE(at_bound);
  EXPECT_EQ(*at_bound, basp_frames::verdict::hold);
  r.heard(parse(header(2, 9, 8, 15, request(6))), true);
  auto v = r.judge(parse(header(2, 5001, 15, 8, reply_to(6))), 2, true);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.err().code, errc::limit);
  EXPECT_NE(v.err().message.find("frame 2 is a reply of 5001 bytes, more than the 5000 the coordinator holds for volunteers' replies"),
            std::string::npos)
      << v.err().message;
}

TEST(volunteer_rules, MonitorsOfActorsNotTheVolunteersAreLeftOut) {
  rules_run r;
  EXPECT_EQ(r.judge(header(4, 0, gate)), "pass");
  EXPECT_EQ(r.judge(header(4, 0, gate)), "drop");  // (once each)
  r.hear(header(2, 9, 8, 15, request(1)));  // a sender: the volunteer makes a proxy for it
  EXPECT_EQ(r.judge(header(4, 0, 15)), "pass");
  EXPECT_EQ(r.judge(header(4, 0, 3)), "drop");
  r.admitted = true;
  r.listeners->grant(44);
  EXPECT_EQ(r.judge(header(4, 0, 44)), "pass");
  EXPECT_EQ(r.rules.stray_monitors(), 2u);
  EXPECT_EQ(r.rules.stray_replies(), 0u);
  // at least the last max_remembered senders are known; older ones may be forgotten
  rules_run m;
  const std::uint64_t n = 2 * volunteer_rules::max_remembered + 1;
  for (std::uint64_t a = 1000; a < 1000 + n; ++a) m.hear(header(2, 0, 8, a));
  EXPECT_EQ(m.judge(header(4, 0, 1000 + n - volunteer_rules::max_remembered)), "pass");
  EXPECT_EQ(m.judge(header(4, 0, 1000 + n - 1)), "pass");
  EXPECT_EQ(m.judge(header(4, 0, 1000)), "drop");
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

/// A volunteer's handshake and join (a request to the gate), as the server receives them.
const std::string join_frames = header(1, 2) + "hs" + header(2, 4, gate, 50, request(1)) + "join";

/// The server's actor `asker` sends connection `i` request number `n`; the volunteer reads it.
void ask(guarded& g, client& v, std::size_t i, std::uint64_t asker, std::uint64_t n) {
  const std::string asks = header(2, 1, 8, asker, request(n)) + "?";
  g.caf.send(i, asks);
  EXPECT_EQ(v.read(asks.size()), asks);
}

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
  // the coordinator's frames go back unchanged
  const std::string back = header(2, 200000, 12, 5) + std::string(200000, 'b') + header(6, 0);
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
  // (a reply: only a reply may be larger than a joiner's frame once admitted too)
  ask(g, v, 0, 15, 7);
  const std::string reply = header(2, 300000, 15, 50, reply_to(7)) + std::string(300000, 'r');
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
  const std::string& join = join_frames;
  ASSERT_TRUE(v.write(join));
  wait_until([&] { return g.caf.count() == 1 && g.caf.size(0) == join.size(); });
  // an actor that asks the joiner something may be answered
  ask(g, v, 0, 15, 3);
  const std::string answer = header(2, 1, 15, 50, reply_to(3)) + "!";
  ASSERT_TRUE(v.write(answer));
  wait_until([&] { return g.caf.size(0) == join.size() + answer.size(); });
  ASSERT_TRUE(v.write(header(2, 3, 3) + "add"));  // (actor 3: say, the pool)
  EXPECT_TRUE(v.ended());
  wait_until([&] { return g.caf.is_closed(0); });
  EXPECT_EQ(g.caf.got(0), join + answer);
  EXPECT_EQ(g.guard->refused(), 1u);
}

TEST(cluster_guard, AnAdmittedVolunteerAnswersWhoAskedItAndTellsItsListenersAlone) {
  guarded g;
  client w(g.volunteer, g.port);
  ASSERT_TRUE(w.up);
  const std::string& join = join_frames;
  ASSERT_TRUE(w.write(join));
  wait_until([&] { return g.caf.count() == 1 && g.caf.size(0) == join.size(); });
  const std::uint64_t link = g.guard->admit(g.caf.peer_port(0));
  ASSERT_NE(link, 0u);
  // the pool (actor 3) asks; its answer passes, an answer nobody awaited is left out
  ask(g, w, 0, 3, 9);
  const std::string stray = header(2, 2, 3, 50, reply_to(8)) + "no", reply = header(2, 2, 3, 50, reply_to(9)) + "ok";
  ASSERT_TRUE(w.write(stray + reply));
  wait_until([&] { return g.caf.size(0) == join.size() + reply.size(); });
  EXPECT_EQ(g.caf.got(0), join + reply);
  // a generation's listener, once granted, hears its tokens
  g.guard->allow(link, 44);
  const std::string token = header(2, 5, 44, 50) + "token";
  ASSERT_TRUE(w.write(token));
  wait_until([&] { return g.caf.size(0) == join.size() + reply.size() + token.size(); });
  EXPECT_EQ(g.caf.got(0), join + reply + token);
  g.guard->forget(link, 44);
  ASSERT_TRUE(w.write(token));  // (a last token crossing the listener's end)
  wait_until([&] { return g.caf.size(0) == join.size() + reply.size() + 2 * token.size(); });
  // a message of its own to the pool, by its number, closes the connection before CAF sees it
  ASSERT_TRUE(w.write(header(2, 3, 3, 50) + "add"));
  EXPECT_TRUE(w.ended());
  wait_until([&] { return g.caf.is_closed(0); });
  EXPECT_EQ(g.caf.got(0), join + reply + token + token);
  EXPECT_EQ(g.guard->refused(), 1u);
  // and nothing for the coordinator to pass on to another node (another volunteer's actors)
  client x(g.volunteer, g.port);
  ASSERT_TRUE(x.up);
  ASSERT_TRUE(x.write(join));
  wait_until([&] { return g.caf.count() == 2 && g.caf.size(1) == join.size(); });
  g.guard->admit(g.caf.peer_port(1));
  g.guard->allow(link, 45);  // (another connection's grant is not this one's)
  ASSERT_TRUE(x.write(header(2, 2, 45, 50) + "hi"));
  EXPECT_TRUE(x.ended());
  client y(g.volunteer, g.port);
  ASSERT_TRUE(y.up);
  ASSERT_TRUE(y.write(join));
  wait_until([&] { return g.caf.count() == 3 && g.caf.size(2) == join.size(); });
  g.guard->admit(g.caf.peer_port(2));
  ASSERT_TRUE(y.write(header(3, 2, 3) + "hi"));
  EXPECT_TRUE(y.ended());
  wait_until([&] { return g.caf.is_closed(2); });
  EXPECT_EQ(g.caf.got(2), join);
  EXPECT_EQ(g.guard->refused(), 3u);
}

TEST(cluster_guard, ManyMegabytesPassIntactEachWay) {
  guarded g;
  client v(g.volunteer, g.port);
  ASSERT_TRUE(v.up);
  ASSERT_TRUE(v.write(header(1, 4) + "join"));
  wait_until([&] { return g.caf.count() == 1 && g.caf.size(0) == 36; });
  ASSERT_EQ(g.caf.count(), 1u);
  g.guard->admit(g.caf.peer_port(0));
  // 16 MB of replies from the volunteer (its checkpoints, say), many times the front's backlog
  std::string up = header(1, 4) + "join", asks;
  for (int f = 0; f < 8; ++f) asks += header(2, 1, 8, 15, request(std::uint64_t(f) + 100)) + "?";
  g.caf.send(0, asks);
  EXPECT_EQ(v.read(asks.size()), asks);
  for (int f = 0; f < 8; ++f) {
    std::string payload(2u << 20, '\0');
    for (std::size_t i = 0; i < payload.size(); i += 97) payload[i] = char(f * 31 + int(i % 251));
    const std::string frame = header(2, std::uint32_t(payload.size()), 15, 50, reply_to(std::uint64_t(f) + 100)) + payload;
    ASSERT_TRUE(v.write(frame));
    up += frame;
  }
  wait_until([&] { return g.caf.size(0) == up.size(); }, 20s);
  EXPECT_TRUE(g.caf.got(0) == up) << g.caf.size(0) << " of " << up.size() << " bytes";
  // 8 MB of frames from the coordinator, sent while the volunteer reads
  std::string down;
  for (int f = 0; f < 4; ++f) {
    std::string payload(2u << 20, '\0');
    for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = char((i * 7 + i / 4099 + std::size_t(f)) & 0xff);
    down += header(2, std::uint32_t(payload.size()), 12, 5, request(std::uint64_t(f) + 1)) + payload;
  }
  std::thread sender([&] { g.caf.send(0, down); });
  EXPECT_EQ(v.read(down.size()), down);
  sender.join();
  EXPECT_EQ(g.guard->refused(), 0u);
}

/// Connection `i`: a volunteer that joined and was admitted.
void admitted(guarded& g, client& v, std::size_t i) {
  ASSERT_TRUE(v.up);
  ASSERT_TRUE(v.write(join_frames));
  wait_until([&] { return g.caf.count() == i + 1 && g.caf.size(i) == join_frames.size(); });
  ASSERT_EQ(g.caf.size(i), join_frames.size());
  ASSERT_NE(g.guard->admit(g.caf.peer_port(i)), 0u);
}

TEST(cluster_guard, ALargeReplyReachesTheServerOnlyWhole) {
  // (CAF would make room for all it announces at its header: the room is claimed by bytes sent)
  cluster_guard::limits l;
  l.joining_frame = 1000;
  guarded g(l);
  client v(g.volunteer, g.port);
  admitted(g, v, 0);
  ask(g, v, 0, 15, 7);
  const std::string reply = header(2, 3000000, 15, 50, reply_to(7)) + std::string(3000000, 'r');
  ASSERT_TRUE(v.write(reply.substr(0, 2000000)));
  wait_until([&] { return g.guard->held_bytes() == 2000000; });
  EXPECT_EQ(g.guard->held_bytes(), 2000000u);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(g.caf.size(0), join_frames.size());  // not even its header
  ASSERT_TRUE(v.write(reply.substr(2000000)));
  wait_until([&] { return g.caf.size(0) == join_frames.size() + reply.size(); });
  EXPECT_TRUE(g.caf.got(0) == join_frames + reply);
  wait_until([&] { return g.guard->held_bytes() == 0; });
  EXPECT_EQ(g.guard->held_bytes(), 0u);
  // a small reply still passes as it comes
  ask(g, v, 0, 15, 8);
  const std::string small = header(2, 900, 15, 50, reply_to(8));
  ASSERT_TRUE(v.write(small));
  wait_until([&] { return g.caf.size(0) == join_frames.size() + reply.size() + small.size(); });
  EXPECT_EQ(g.caf.size(0), join_frames.size() + reply.size() + small.size());
  EXPECT_EQ(g.guard->refused(), 0u);
}

TEST(cluster_guard, HeldRepliesShareABudgetAndTheEarliestAlwaysGoesOn) {
  cluster_guard::limits l;
  l.joining_frame = 1000;
  l.reply_budget = 1u << 20;
  guarded g(l);
  client a(g.volunteer, g.port), b(g.volunteer, g.port);
  admitted(g, a, 0);
  admitted(g, b, 1);
  ask(g, a, 0, 15, 7);
  ask(g, b, 1, 16, 7);
  const std::string ra = header(2, 900000, 15, 50, reply_to(7)) + std::string(900000, 'a');
  const std::string rb = header(2, 900000, 16, 51, reply_to(7)) + std::string(900000, 'b');
  // a's reply began first: 700 kB of it held; b's fills the budget's rest and waits
  ASSERT_TRUE(a.write(ra.substr(0, 700000)));
  wait_until([&] { return g.guard->held_bytes() == 700000; });
  ASSERT_TRUE(b.write(rb));  // (all of it: the sockets' buffers hold what the front does not read)
  wait_until([&] { return g.guard->held_bytes() >= l.reply_budget; });
  std::this_thread::sleep_for(200ms);
  EXPECT_GE(g.guard->held_bytes(), l.reply_budget);
  EXPECT_LT(g.guard->held_bytes(), 700000u + rb.size());  // b waits
  EXPECT_EQ(g.caf.size(1), join_frames.size());
  // the earliest goes on past the budget; once it is through, b's follows
  ASSERT_TRUE(a.write(ra.substr(700000)));
  wait_until([&] { return g.caf.size(0) == join_frames.size() + ra.size() && g.caf.size(1) == join_frames.size() + rb.size(); });
  EXPECT_TRUE(g.caf.got(0) == join_frames + ra);
  EXPECT_TRUE(g.caf.got(1) == join_frames + rb);
  wait_until([&] { return g.guard->held_bytes() == 0; });
  EXPECT_EQ(g.guard->held_bytes(), 0u);
  // a reply larger than the whole budget is refused at its header
  ask(g, a, 0, 15, 8);
  ASSERT_TRUE(a.write(header(2, (1u << 20) + 1, 15, 50, reply_to(8))));
  EXPECT_TRUE(a.ended());
  EXPECT_EQ(g.caf.size(0), join_frames.size() + ra.size());
  EXPECT_EQ(g.guard->refused(), 1u);
}

TEST(cluster_guard, AHeldReplyThatStallsClosesItsLink) {
  cluster_guard::limits l;
  l.joining_frame = 1000;
  l.reply_grace = 200ms;
  l.reply_min_rate = 1u << 20;
  guarded g(l);
  client v(g.volunteer, g.port);
  admitted(g, v, 0);
  ask(g, v, 0, 15, 7);
  ASSERT_TRUE(v.write(header(2, 4000000, 15, 50, reply_to(7)) + std::string(5000, 's')));
  const auto began = std::chrono::steady_clock::now();
  EXPECT_TRUE(v.ended());
  EXPECT_LT(std::chrono::steady_clock::now() - began, 5s);
  wait_until([&] { return g.caf.is_closed(0); });
  EXPECT_EQ(g.caf.got(0), join_frames);  // nothing of the reply
  EXPECT_EQ(g.guard->refused(), 1u);
  wait_until([&] { return g.guard->held_bytes() == 0; });
  EXPECT_EQ(g.guard->held_bytes(), 0u);
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

TEST(cluster_guard, PastTheBoundANewJoinerClosesTheOldest) {
  cluster_guard::limits l;
  l.max_joining = 2;
  guarded g(l);
  // two idle joiners hold every slot, from two addresses
  client a(g.volunteer, g.port, "127.0.0.2");
  ASSERT_TRUE(a.up);
  wait_until([&] { return g.caf.count() == 1; });
  client b(g.volunteer, g.port, "127.0.0.3");
  ASSERT_TRUE(b.up);
  wait_until([&] { return g.caf.count() == 2; });
  // a volunteer arriving now gets in: the oldest joiner is closed for it
  client c(g.volunteer, g.port, "127.0.0.4");
  ASSERT_TRUE(c.up);
  EXPECT_TRUE(a.ended());
  wait_until([&] { return g.caf.count() == 3; });
  ASSERT_EQ(g.caf.count(), 3u);
  ASSERT_TRUE(c.write(header(1, 1) + "C"));
  wait_until([&] { return g.caf.size(2) == 33; });
  g.guard->admit(g.caf.peer_port(2));
  // admitted, it is no joiner: it left a slot, which d takes; then e closes b, not c
  client d(g.volunteer, g.port, "127.0.0.5");
  ASSERT_TRUE(d.up);
  wait_until([&] { return g.caf.count() == 4; });
  client e(g.volunteer, g.port, "127.0.0.6");
  ASSERT_TRUE(e.up);
  EXPECT_TRUE(b.ended());
  ASSERT_TRUE(c.write(header(6, 0)));
  wait_until([&] { return g.caf.size(2) == 65; });
  EXPECT_EQ(g.caf.size(2), 65u);
  EXPECT_FALSE(g.caf.is_closed(2));
  EXPECT_EQ(g.guard->refused(), 2u);  // (a and b, each counted once)
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
