// Volunteers' data connections (actors/data_link.hpp): a real TLS server and client on
// loopback with the coordinator's certificate. Pieces arrive whole and in order; a wrong or
// reused ticket, an untrusted certificate, garbage and silence on the port are refused without
// harm; a connection that ends fails the pieces waiting on it at once, with the reason; a
// volunteer that vanishes is a failed write, not the end of the process (SIGPIPE).

#include "actors/data_link.hpp"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <thread>

#include "actors/cluster_tls.hpp"
#include "test/support/files.hpp"
#include "test/support/net.hpp"
#include "test/support/wait.hpp"

namespace mpakt::datalink {
namespace {

using test::temp_dir;
using test::connect_loopback;
using test::wait_until;

using namespace std::chrono_literals;


/// A data port on loopback with a fresh coordinator certificate.
struct port_fixture {
  temp_dir dir;
  std::string fingerprint;
  std::unique_ptr<data_server> server;
  port_fixture() {
    auto files = tls::coordinator_files(dir.path + "/cluster", "", "", &fingerprint);
    EXPECT_TRUE(files) << files.err().message;
    auto s = data_server::start("127.0.0.1", 0, files->certificate, files->key);
    EXPECT_TRUE(s) << s.err().message;
    server = std::move(*s);
  }
  /// What a volunteer pinning this coordinator's fingerprint checks.
  std::function<status(const std::string&)> pinned() const {
    return [fp = fingerprint](const std::string& pem) -> status {
      auto got = tls::fingerprint_of(pem);
      if (!got || *got != fp) return make_error(errc::unauthorized, "not the pinned certificate");
      return ok_status();
    };
  }
  result<std::unique_ptr<data_client>> connect(const std::string& ticket, std::shared_ptr<piece_inbox> inbox) const {
    return data_client::connect("127.0.0.1", server->port(), ticket, pinned(), std::move(inbox));
  }
};

std::string pattern(std::size_t n, int seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = char((i * 131 + std::size_t(seed) * 7) & 0xff);
  return s;
}

TEST(data_link, PiecesArriveWholeInOrderAndAreCounted) {
  port_fixture p;
  auto sender = p.server->expect();
  ASSERT_TRUE(sender);
  EXPECT_EQ(sender->describe(), "waiting");
  std::string early = "x";
  EXPECT_FALSE(sender->send(early));  // not up yet: the caller sends over the cluster link
  EXPECT_EQ(early, "x");

  auto inbox = std::make_shared<piece_inbox>();
  auto client = p.connect(sender->ticket(), inbox);
  ASSERT_TRUE(client) << client.err().message;
  ASSERT_TRUE(sender->up());  // (up before the volunteer hears "OK")
  const std::vector<std::size_t> sizes = {1, 4096, 3u << 20, 16u << 20, 17};
  std::uint64_t total = 0;
  std::vector<std::uint64_t> seqs;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::string b = pattern(sizes[i], int(i));
    auto seq = sender->send(b);
    ASSERT_TRUE(seq);
    seqs.push_back(*seq);
    total += sizes[i];
  }
  for (std::size_t i = 1; i < seqs.size(); ++i) EXPECT_GT(seqs[i], seqs[i - 1]);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    auto got = inbox->take(seqs[i], 10s);
    ASSERT_TRUE(got) << got.err().message;
    EXPECT_EQ(*got, pattern(sizes[i], int(i))) << "piece " << i;
    inbox->recycle(std::move(*got));
  }
  wait_until([&] { return sender->bytes_sent() == total; });
  EXPECT_EQ(sender->bytes_sent(), total);
  EXPECT_EQ((*client)->bytes_received(), total);
  EXPECT_EQ(sender->describe(), "up");
  EXPECT_EQ(inbox->held_bytes(), 0u);
}

// The reader takes a kept piece's storage for the next piece: the smallest at least as long
// (a string grown is cleared where it grows, and fresh storage faults its pages in), else the
// longest; as many as a load has on its way (a coordinator's few pieces' worth of bytes may be
// a layer's tensors after another's, each a piece of its own).
TEST(data_link, AKeptPiecesStorageIsTheSmallestThatHoldsTheNext) {
  piece_inbox inbox;
  EXPECT_TRUE(inbox.spare(10).empty());
  for (std::size_t n : {std::size_t(100), std::size_t(4000), std::size_t(16) << 20, std::size_t(200)})
    inbox.recycle(std::string(n, 'x'));
  EXPECT_EQ(inbox.spare(150).size(), 200u);
  EXPECT_EQ(inbox.spare(150).size(), 4000u);
  EXPECT_EQ(inbox.spare(1).size(), 100u);
  EXPECT_EQ(inbox.spare(std::size_t(20) << 20).size(), std::size_t(16) << 20) << "none holds it: the longest";
  EXPECT_TRUE(inbox.spare(1).empty());
  // a hundred pieces of three sizes, as a layer's tensors come: each taker gets the storage of
  // one of its own size back, none grown (before: four kept, the rest freed and the next
  // hundred pieces read into fresh storage)
  std::map<const char*, std::size_t> given;
  for (int i = 0; i < 100; ++i) {
    std::string s(std::size_t(65536) * (1 + i % 3), 'y');
    given[s.data()] = s.size();
    inbox.recycle(std::move(s));
  }
  for (int i = 0; i < 100; ++i) {
    const std::size_t n = std::size_t(65536) * (1 + (99 - i) % 3);  // (in another order)
    std::string s = inbox.spare(n);
    ASSERT_EQ(s.size(), n) << "taker " << i;
    ASSERT_EQ(given.count(s.data()), 1u) << "taker " << i;
    EXPECT_EQ(given[s.data()], n);
    given.erase(s.data());
  }
  EXPECT_TRUE(inbox.spare(1).empty());
  for (int i = 0; i < 300; ++i) inbox.recycle(std::string(64, 'y'));
  int kept = 0;
  while (!inbox.spare(1).empty()) ++kept;
  EXPECT_EQ(kept, 256) << "bounded in number";
}

TEST(data_link, AWrongOrReusedTicketIsRefusedAndTheRightOneStillWorks) {
  port_fixture p;
  auto sender = p.server->expect();
  auto inbox = std::make_shared<piece_inbox>();
  std::string wrong = sender->ticket();
  wrong[10] = wrong[10] == 'a' ? 'b' : 'a';
  auto refused = p.connect(wrong, inbox);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.err().code, errc::unauthorized);
  EXPECT_NE(refused.err().message.find("refused this volunteer's ticket"), std::string::npos) << refused.err().message;
  EXPECT_FALSE(p.connect("short", inbox));  // (not even sent)
  EXPECT_FALSE(sender->up());

  auto first = p.connect(sender->ticket(), inbox);
  ASSERT_TRUE(first) << first.err().message;
  EXPECT_TRUE(sender->up());
  auto again = p.connect(sender->ticket(), std::make_shared<piece_inbox>());  // a ticket opens one connection
  ASSERT_FALSE(again);
  EXPECT_EQ(again.err().code, errc::unauthorized);
  EXPECT_GE(p.server->refused(), 2u);
  std::string b = pattern(1000, 3);
  auto seq = sender->send(b);
  ASSERT_TRUE(seq);
  auto got = inbox->take(*seq, 10s);
  ASSERT_TRUE(got) << got.err().message;
  EXPECT_EQ(*got, pattern(1000, 3));
}

TEST(data_link, ACertificateTheVolunteerDoesNotTrustGetsNoTicket) {
  port_fixture p;
  auto sender = p.server->expect();
  auto inbox = std::make_shared<piece_inbox>();
  auto untrusting = [](const std::string& pem) -> status {
    EXPECT_NE(pem.find("BEGIN CERTIFICATE"), std::string::npos);  // (it is shown what the port presents)
    return make_error(errc::unauthorized, "fingerprint differs");
  };
  auto c = data_client::connect("127.0.0.1", p.server->port(), sender->ticket(), untrusting, inbox);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.err().code, errc::unauthorized);
  EXPECT_NE(c.err().message.find("fingerprint differs"), std::string::npos) << c.err().message;
  // The ticket never travelled, so it is still good for the volunteer that trusts the port.
  auto ok = p.connect(sender->ticket(), inbox);
  ASSERT_TRUE(ok) << ok.err().message;
  EXPECT_TRUE(sender->up());
}

TEST(data_link, GarbageAndSilenceOnThePortHarmNothing) {
  port_fixture p;
  // a stranger sending bytes that are not TLS, and one that connects and says nothing
  const int garbage = connect_loopback(p.server->port());
  const std::string junk(5000, 'G');
  EXPECT_EQ(::write(garbage, junk.data(), junk.size()), ssize_t(junk.size()));
  const int silent = connect_loopback(p.server->port());
  auto sender = p.server->expect();
  auto inbox = std::make_shared<piece_inbox>();
  auto c = p.connect(sender->ticket(), inbox);
  ASSERT_TRUE(c) << c.err().message;
  std::string b = pattern(100, 1);
  auto seq = sender->send(b);
  ASSERT_TRUE(seq);
  auto got = inbox->take(*seq, 10s);
  ASSERT_TRUE(got) << got.err().message;
  wait_until([&] { return p.server->refused() >= 1; });
  EXPECT_GE(p.server->refused(), 1u);  // (the garbage)
  ::close(garbage);
  // The server ends promptly even with the silent connection still in its handshake.
  const auto t = std::chrono::steady_clock::now();
  p.server.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t, 5s);
  ::close(silent);
}

TEST(data_link, AConnectionThatEndsFailsWaitingPiecesAtOnceWithTheReason) {
  port_fixture p;
  auto sender = p.server->expect();
  auto inbox = std::make_shared<piece_inbox>();
  auto c = p.connect(sender->ticket(), inbox);
  ASSERT_TRUE(c) << c.err().message;
  std::thread closer([&] {
    std::this_thread::sleep_for(100ms);
    sender->close("the volunteer left the grid");
  });
  const auto t = std::chrono::steady_clock::now();
  auto got = inbox->take(1, 60s);  // (never sent)
  closer.join();
  ASSERT_FALSE(got);
  EXPECT_LT(std::chrono::steady_clock::now() - t, 10s);
  EXPECT_NE(got.err().message.find("closed the data connection"), std::string::npos) << got.err().message;
  EXPECT_EQ(sender->describe(), "closed: the volunteer left the grid");
  std::string b = "late";
  EXPECT_FALSE(sender->send(b));  // (later pieces go over the cluster link)
}

TEST(data_link, AVolunteerThatVanishesIsAFailedWriteNotTheProcessEnd) {
  port_fixture p;
  auto sender = p.server->expect();
  auto inbox = std::make_shared<piece_inbox>();
  auto c = p.connect(sender->ticket(), inbox);
  ASSERT_TRUE(c) << c.err().message;
  c->reset();  // the volunteer's end goes away
  // Writes to a closed socket raise SIGPIPE, which this test process does not ignore.
  for (int i = 0; i < 8 && sender->up(); ++i) {
    std::string b = pattern(4u << 20, i);
    sender->send(b);
    std::this_thread::sleep_for(50ms);
  }
  wait_until([&] { return !sender->up(); });
  EXPECT_FALSE(sender->up());
  EXPECT_NE(sender->describe().find("writing to the volunteer failed"), std::string::npos) << sender->describe();
}

TEST(data_link, AVolunteerThatDoesNotReadCannotFillTheCoordinatorsMemory) {
  port_fixture p;
  auto sender = p.server->expect(64u << 20);
  // A volunteer whose inbox is never emptied (as one that answers pieces without taking them):
  // its reader stops, the socket's buffers fill, the writer blocks and the queue grows.
  auto inbox = std::make_shared<piece_inbox>(1u << 20);
  auto c = p.connect(sender->ticket(), inbox);
  ASSERT_TRUE(c) << c.err().message;
  int sent = 0;
  for (; sent < 64; ++sent) {
    std::string b = pattern(8u << 20, sent);
    if (!sender->send(b)) {
      EXPECT_EQ(b.size(), 8u << 20);  // (untouched: the caller sends it over the cluster link)
      break;
    }
  }
  EXPECT_LT(sent, 64);  // refused long before 512 MB were queued
  EXPECT_FALSE(sender->up());
  EXPECT_NE(sender->describe().find("answered pieces it had not read"), std::string::npos) << sender->describe();
}

TEST(piece_inbox, ClaimsInOrderDropWhatWasGivenUp) {
  piece_inbox in;
  ASSERT_TRUE(in.put(1, "one"));
  ASSERT_TRUE(in.put(2, "two"));
  ASSERT_TRUE(in.put(3, "three"));
  auto three = in.take(3, 1s);  // 1 and 2 were given up (their claims came and went)
  ASSERT_TRUE(three);
  EXPECT_EQ(*three, "three");
  EXPECT_EQ(in.held_bytes(), 0u);
  ASSERT_TRUE(in.put(2, "late"));  // below what was claimed: dropped on arrival
  EXPECT_EQ(in.held_bytes(), 0u);
  auto missing = in.take(4, 50ms);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.err().message.find("nothing came over the data connection for 50 ms"), std::string::npos)
      << missing.err().message;
  // A piece still arriving (its bytes counted as they come) is waited for past the patience.
  std::thread slow([&] {
    for (int i = 0; i < 6; ++i) {
      std::this_thread::sleep_for(30ms);
      in.arrived(1000);
    }
    in.put(5, "five");
  });
  auto five = in.take(5, 50ms);  // (180 ms in all, never 50 ms without a byte)
  slow.join();
  ASSERT_TRUE(five) << five.err().message;
  EXPECT_EQ(*five, "five");
  in.close("gone");
  EXPECT_FALSE(in.put(6, "x"));
  auto after = in.take(6, 10s);
  ASSERT_FALSE(after);
  EXPECT_NE(after.err().message.find("gone"), std::string::npos);
}

TEST(piece_inbox, APutOverTheCapWaitsForATake) {
  piece_inbox in(100);
  ASSERT_TRUE(in.put(1, std::string(80, 'a')));
  std::atomic<bool> stored{false};
  std::thread writer([&] {
    in.put(2, std::string(80, 'b'));  // (over the cap with piece 1 held)
    stored = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(stored.load());
  auto one = in.take(1, 1s);
  ASSERT_TRUE(one);
  writer.join();
  EXPECT_TRUE(stored.load());
  auto two = in.take(2, 1s);
  ASSERT_TRUE(two);
  EXPECT_EQ(*two, std::string(80, 'b'));
}

}  // namespace
}  // namespace mpakt::datalink
