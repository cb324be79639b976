// A volunteer's removals (actors/coordinator/data_relay.hpp, removal_registry): each holds the
// token's joins back, a minute after the first and twice as long after each one more within a
// day, never more than an hour; other tokens are not held back.

#include <gtest/gtest.h>

#include "actors/coordinator/data_relay.hpp"

namespace mpakt {
namespace {

TEST(removal_registry, EachRemovalHoldsTheTokensJoinsBackLonger) {
  removal_registry r;
  EXPECT_FALSE(r.waiting("a"));
  r.removed("a", "it left a graph call unanswered");
  auto w = r.waiting("a");
  ASSERT_TRUE(w);
  EXPECT_GT(w->first.count(), 55);
  EXPECT_LE(w->first.count(), 60);
  EXPECT_EQ(w->second, "it left a graph call unanswered");
  EXPECT_FALSE(r.waiting("b"));  // (another token)
  r.removed("a", "it answered a status no worker sends");
  w = r.waiting("a");
  ASSERT_TRUE(w);
  EXPECT_GT(w->first.count(), 115);
  EXPECT_LE(w->first.count(), 120);
  EXPECT_EQ(w->second, "it answered a status no worker sends");  // (the last reason)
  for (int i = 0; i < 20; ++i) r.removed("a", "again");
  w = r.waiting("a");
  ASSERT_TRUE(w);
  EXPECT_LE(w->first, removal_registry::longest_wait);
  EXPECT_GT(w->first.count(), removal_registry::longest_wait.count() - 5);
}

}  // namespace
}  // namespace mpakt
