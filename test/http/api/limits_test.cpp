// Abuse limits of the API (http/api/limits.hpp): failed logins in a sliding window per
// username (ignoring case) and per address, and generations running at once per key.

#include "http/api/limits.hpp"

#include <gtest/gtest.h>

namespace mpakt::http {
namespace {

using namespace std::chrono_literals;

TEST(LoginLimiter, LocksAUsernameAfterItsFailuresUntilTheOldestLeavesTheWindow) {
  login_limiter l({.login_failures_per_user = 3, .login_failures_per_address = 100, .login_window = 60s});
  const auto t0 = login_limiter::clock::time_point{} + 1000s;
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(l.blocked("alice", "10.0.0.1", t0 + std::chrono::seconds(i)));
    l.failed("alice", "10.0.0.1", t0 + std::chrono::seconds(i));
  }
  auto wait = l.blocked("ALICE", "10.0.0.2", t0 + 10s);  // any case, any address
  ASSERT_TRUE(wait);
  EXPECT_EQ(*wait, 50s);  // the first failure (t0) leaves the window at t0 + 60 s
  EXPECT_FALSE(l.blocked("bob", "10.0.0.1", t0 + 10s));
  EXPECT_FALSE(l.blocked("alice", "10.0.0.1", t0 + 60s));
}

TEST(LoginLimiter, LocksAnAddressOverAllUsernames) {
  login_limiter l({.login_failures_per_user = 100, .login_failures_per_address = 2, .login_window = 60s});
  const auto t0 = login_limiter::clock::time_point{} + 1000s;
  l.failed("a", "10.0.0.1", t0);
  l.failed("b", "10.0.0.1", t0 + 1s);
  EXPECT_TRUE(l.blocked("c", "10.0.0.1", t0 + 2s));
  EXPECT_FALSE(l.blocked("c", "10.0.0.9", t0 + 2s));
}

TEST(LoginLimiter, ZeroMeansNoLimit) {
  login_limiter l({.login_failures_per_user = 0, .login_failures_per_address = 0, .login_window = 60s});
  for (int i = 0; i < 1000; ++i) l.failed("alice", "10.0.0.1");
  EXPECT_FALSE(l.blocked("alice", "10.0.0.1"));
}

TEST(GenerationSlots, AKeyHoldsAtMostItsSlotsAndGetsThemBack) {
  auto slots = std::make_shared<generation_slots>(2);
  auto a = slots->acquire("k1");
  auto b = slots->acquire("k1");
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(slots->acquire("k1"));
  EXPECT_TRUE(slots->acquire("k2"));  // another key's are its own (and freed at once here)
  b.reset();
  EXPECT_EQ(slots->running("k1"), 1);
  EXPECT_TRUE(slots->acquire("k1"));
  EXPECT_EQ(slots->running("k2"), 0);
}

}  // namespace
}  // namespace mpakt::http
