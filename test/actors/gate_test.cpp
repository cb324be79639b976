// The cluster port's gate (actors/coordinator/gate_actor.hpp), in one process: a join presenting
// an actor of the coordinator's own process is refused when the gate sits behind the cluster
// port's front (such a handle can only be a volunteer's forgery: revoking or quarantining that
// "volunteer" would end the actor), and admitted without the front (joins within one process).

#include "actors/coordinator/gate_actor.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "actors/errors.hpp"
#include "test/support/actors.hpp"
#include "test/support/files.hpp"

namespace mpakt {
namespace {

using namespace std::chrono_literals;

/// A stand-in for the pool that counts the workers handed to it.
struct pool_record {
  std::shared_ptr<std::atomic<int>> added = std::make_shared<std::atomic<int>>(0);
};

pool_actor recording_pool(caf::actor_system& sys, pool_record r) {
  auto p = sys.spawn([r](caf::event_based_actor*, int) -> caf::behavior {
    return {[r](add_atom, const worker_actor&) { ++*r.added; },
            [r](add_atom, const worker_actor&, std::uint64_t) { ++*r.added; }};
  }, 0);
  return caf::actor_cast<pool_actor>(p);
}

/// A worker-shaped actor of this process (a stand-in for the pool or an embedded worker).
worker_actor local_actor(caf::actor_system& sys) {
  return caf::actor_cast<worker_actor>(sys.spawn([](caf::event_based_actor*, int) -> caf::behavior {
    return {[](status_atom) { return worker_status{}; }};
  }, 0));
}

struct gate_run {
  test::temp_dir dir;
  std::string token;
  std::unique_ptr<accounts::accounts_store> store() {
    auto s = accounts::accounts_store::open(dir.path + "/accounts.db", accounts::accounts_options{.pbkdf2_iterations = 10});
    EXPECT_TRUE(s.ok()) << s.err().message;
    if (token.empty()) {
      auto t = (*s)->create_volunteer_token("box", 0, 0);
      EXPECT_TRUE(t.ok()) << t.err().message;
      token = t->token;
    }
    return std::move(*s);
  }
};

TEST(gate, BehindTheFrontAJoinPresentingAnActorOfThisProcessIsRefused) {
  MPAKT_SKIP_ACTOR_TEST_UNDER_SANITIZERS();
  test::protocol_system actors;
  caf::actor_system& sys = actors.sys;
  caf::scoped_actor me{sys};
  for (bool front : {true, false}) {
    gate_run run;
    pool_record rec;
    gate_config gc;
    gc.verify = false;
    if (front) gc.guard = std::make_shared<cluster_guard>();
    auto store = run.store();
    auto gate = spawn_gate(sys, recording_pool(sys, rec), std::move(store), gc);
    std::string answer;
    me->request(gate, 10s, join_atom::value, run.token, local_actor(sys))
        .receive([&](std::string& name) { answer = "admitted as " + name; },
                 [&](caf::error& e) { answer = from_caf(e).message; });
    if (front) {
      EXPECT_EQ(answer, "join refused: the worker presented is an actor of the coordinator's own process");
      std::this_thread::sleep_for(100ms);
      EXPECT_EQ(rec.added->load(), 0);
    } else {
      EXPECT_EQ(answer, "admitted as box");  // (one process, no front: the embedded tests' joins)
      for (int i = 0; i < 100 && rec.added->load() == 0; ++i) std::this_thread::sleep_for(10ms);
      EXPECT_EQ(rec.added->load(), 1);
    }
    caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
  }
}

}  // namespace
}  // namespace mpakt
