// The console's pieces (actors/describe.hpp): the event ring's numbering and bounds, the
// tally's error ring, and a worker's front describing its worker while the compute side is
// held up in a call (the front answers; the compute side never does).

#include "actors/describe.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "actors/errors.hpp"
#include "actors/protocol.hpp"
#include "actors/worker/worker_actor.hpp"
#include "test/support/actors.hpp"

namespace mpakt {
namespace {

using namespace std::chrono_literals;

TEST(event_ring, NumbersEventsFromOneAndStampsThem) {
  event_ring r(4);
  const auto& a = r.push(grid_event{0, 0, "joined", "worker", "w_a", ""});
  EXPECT_EQ(a.seq, 1u);
  EXPECT_GT(a.at_ms, 1'700'000'000'000u);  // now, in milliseconds since the epoch
  const auto& b = r.push(grid_event{99, 1234, "lost", "worker", "w_a", ""});
  EXPECT_EQ(b.seq, 2u);      // the ring numbers, whatever the sender put there
  EXPECT_EQ(b.at_ms, 1234u);  // a time given is kept
  EXPECT_EQ(r.last_seq(), 2u);
  auto after1 = r.since(1);
  ASSERT_EQ(after1.size(), 1u);
  EXPECT_EQ(after1[0].what, "lost");
  EXPECT_TRUE(r.since(2).empty());
}

TEST(event_ring, KeepsOnlyTheLastCapacityEvents) {
  event_ring r(3);
  for (int i = 0; i < 10; ++i) r.push(grid_event{0, 1, "opened", "session", "s_" + std::to_string(i), ""});
  EXPECT_EQ(r.size(), 3u);
  EXPECT_EQ(r.last_seq(), 10u);
  auto all = r.since(0);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].seq, 8u);
  EXPECT_EQ(all[0].id, "s_7");
  EXPECT_EQ(all[2].seq, 10u);
}

TEST(describe_tally, CountsAndKeepsTheLastEightErrorsOldestFirst) {
  describe_tally t;
  for (int i = 0; i < 5; ++i) t.count();
  for (int i = 0; i < 11; ++i) t.failed("error " + std::to_string(i));
  actor_snapshot s;
  t.fill(s, 7);
  EXPECT_EQ(s.messages, 5u);
  EXPECT_EQ(s.mailbox, 7u);
  ASSERT_EQ(s.errors.size(), describe_tally::kept_errors);
  EXPECT_EQ(s.errors.front(), "error 3");
  EXPECT_EQ(s.errors.back(), "error 10");
}

double number_of(const actor_snapshot& s, const std::string& name) {
  for (const auto& [n, v] : s.numbers)
    if (n == name) return v;
  ADD_FAILURE() << "no number " << name << " in the snapshot of " << s.id;
  return -1;
}

TEST(describe, AWorkersFrontAnswersWhileItsComputeSideIsHeldUp) {
  MPAKT_SKIP_ACTOR_TEST_UNDER_SANITIZERS();
  test::protocol_system actors;
  caf::actor_system& sys = actors.sys;
  worker_config wc;
  wc.worker_id = "w_test";
  wc.memory_bytes = 123'000'000;
  wc.delay_ms = 2000;  // every graph call waits this long on the compute side before it runs
  auto w = spawn_worker(sys, wc);
  caf::scoped_actor me{sys};
  actor_snapshot idle;
  me->request(w, 5s, describe_atom::value).receive([&](actor_snapshot& s) { idle = std::move(s); },
                                                   [&](caf::error& e) { FAIL() << from_caf(e).message; });
  EXPECT_EQ(idle.kind, "worker");
  EXPECT_EQ(idle.id, "w_test");
  EXPECT_EQ(number_of(idle, "totalBytes"), 123'000'000.0);
  EXPECT_EQ(number_of(idle, "freeBytes"), 123'000'000.0);
  EXPECT_EQ(number_of(idle, "callsInFlight"), 0.0);
  EXPECT_EQ(number_of(idle, "busy"), 0.0);
  EXPECT_GE(idle.messages, 1u);

  run_request r;
  r.graph_json = R"({"inputs":[{"name":"a","shape":[2],"data":[1,2]}],"steps":[{"op":"add","in":["a","a"],"out":"b"}],"outputs":["b"]})";
  me->send(w, run_atom::value, r);  // (its answer goes to our mailbox; not waited for)
  std::this_thread::sleep_for(200ms);
  const auto t0 = std::chrono::steady_clock::now();
  actor_snapshot held;
  me->request(w, 1s, describe_atom::value).receive([&](actor_snapshot& s) { held = std::move(s); },
                                                   [&](caf::error& e) { FAIL() << from_caf(e).message; });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);  // not behind the held-up call
  EXPECT_EQ(number_of(held, "callsInFlight"), 1.0);
  EXPECT_GT(held.messages, idle.messages);
  EXPECT_TRUE(held.errors.empty());

  // a call its compute side refuses: the caller hears why, and so does describe
  run_request bad;
  bad.graph_id = "g_missing";
  me->request(w, 10s, run_atom::value, bad).receive([&](run_reply&) { FAIL() << "an unknown graph ran"; },
                                                    [&](caf::error& e) {
                                                      EXPECT_NE(from_caf(e).message.find("g_missing"), std::string::npos)
                                                          << from_caf(e).message;
                                                    });
  actor_snapshot after;
  me->request(w, 5s, describe_atom::value).receive([&](actor_snapshot& s) { after = std::move(s); },
                                                   [&](caf::error& e) { FAIL() << from_caf(e).message; });
  ASSERT_EQ(after.errors.size(), 1u);
  EXPECT_NE(after.errors.front().find("g_missing"), std::string::npos) << after.errors.front();
  caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace mpakt
