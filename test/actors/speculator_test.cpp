// Prompt-lookup drafting, the choice of verify pass and the acceptance rule (SPC-05…15).

#include "actors/generate/speculator.hpp"

#include <gtest/gtest.h>

namespace mpakt {
namespace {

TEST(Speculator, DraftsTheContinuationOfTheMostRecentOccurrence) {
  // ... 5 6 7 8 9 ... 5 6 7 | the last three tokens occurred before, followed by 8 9 1 2
  speculator s({1, 2, 5, 6, 7, 8, 9, 1, 2, 3, 5, 6, 7}, {2, 4}, true);
  auto p = s.next();
  ASSERT_GE(p.graph, 0);
  EXPECT_EQ(p.drafts, (std::vector<std::int64_t>{8, 9, 1, 2}));  // the 4-draft graph first (unmeasured)
}

TEST(Speculator, PrefersTheLongestMatchingSuffix) {
  // "4 7" occurred at the start (followed by 10), "7" alone more recently (followed by 11)
  speculator s({4, 7, 10, 3, 7, 11, 4, 7}, {1}, true);
  auto p = s.next();
  EXPECT_EQ(p.drafts, (std::vector<std::int64_t>{10}));
}

TEST(Speculator, NoOccurrenceMeansAPlainStep) {
  speculator s({1, 2, 3, 4}, {2}, true);
  EXPECT_EQ(s.next().graph, -1);
}

TEST(Speculator, ARunOfOneTokenStillFillsAPass) {
  speculator s({9, 9, 9, 9, 9, 9, 9}, {3}, true);
  auto p = s.next();
  ASSERT_EQ(p.graph, 0);
  EXPECT_EQ(p.drafts, (std::vector<std::int64_t>{9, 9, 9}));
}

TEST(Speculator, KeepsTheAgreeingPrefixPlusTheFirstDisagreement) {
  speculator s({1, 2, 3, 1, 2}, {3}, true);
  auto p = s.next();
  ASSERT_EQ(p.drafts, (std::vector<std::int64_t>{3, 1, 2}));
  // outputs: row 0 agrees with draft 1 (3), row 1 disagrees (5 instead of 1)
  auto out = s.verified(p, {3, 5, 8, 9}, 1.0);
  EXPECT_EQ(out, (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(s.verifies, 1u);
  EXPECT_EQ(s.drafted, 3u);
  EXPECT_EQ(s.accepted, 1u);
  EXPECT_EQ(s.produced, 2u);
  // all drafts right: k+1 tokens
  s.extend(out);
  auto all = s.verified(p, {3, 1, 2, 7}, 1.0);
  EXPECT_EQ(all.size(), 4u);
  EXPECT_EQ(s.produced, s.accepted + s.verifies);
}

TEST(Speculator, BacksOffWhenDraftsDoNotPay) {
  speculator s({1, 2, 1, 2, 1, 2, 1}, {2}, false);
  s.plain(1.0);
  auto p = s.next();
  ASSERT_EQ(p.graph, 0);  // tried once
  for (int i = 0; i < 20; ++i) {
    s.verified(p, {7, 7, 7}, 3.0);  // never right, three times a plain step's cost
    s.plain(1.0);
  }
  EXPECT_EQ(s.next().graph, -1);  // a plain step now pays better
}

}  // namespace
}  // namespace mpakt
