// The prefix cache's registry (http/api/chat.hpp, chat_registry): the longest shared beginning
// wins, a taken conversation is out until put back, and each key keeps a bounded number,
// least recently used evicted first.
#include <gtest/gtest.h>

#include "http/api/chat.hpp"

namespace mpakt::http {
namespace {

cached_conversation conv(std::string sid, std::string key, std::vector<std::int32_t> tokens, std::string model = "m_1") {
  return cached_conversation{std::move(sid), "acct", std::move(key), std::move(model), std::move(tokens), 0};
}

TEST(chat_cache, TheLongestSharedBeginningWinsAndIsTakenOut) {
  chat_registry r;
  EXPECT_TRUE(r.put_conversation(conv("s_a", "k", {1, 5, 6, 7})).empty());
  EXPECT_TRUE(r.put_conversation(conv("s_b", "k", {1, 5, 9})).empty());
  std::size_t common = 0;
  auto got = r.take_prefix("acct", "m_1", {1, 5, 9, 9, 2}, &common);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->session_id, "s_b");
  EXPECT_EQ(common, 3u);
  got = r.take_prefix("acct", "m_1", {1, 5, 9, 9, 2}, &common);  // s_b is out: s_a shares 2
  ASSERT_TRUE(got);
  EXPECT_EQ(got->session_id, "s_a");
  EXPECT_EQ(common, 2u);
  EXPECT_FALSE(r.take_prefix("acct", "m_1", {1}, &common));  // none left
}

TEST(chat_cache, OtherAccountsModelsAndNothingSharedFindNothing) {
  chat_registry r;
  r.put_conversation(conv("s_a", "k", {1, 2, 3}));
  std::size_t common = 0;
  EXPECT_FALSE(r.take_prefix("other", "m_1", {1, 2, 3}, &common));
  EXPECT_FALSE(r.take_prefix("acct", "m_2", {1, 2, 3}, &common));
  EXPECT_FALSE(r.take_prefix("acct", "m_1", {2, 2, 3}, &common));
  EXPECT_TRUE(r.take_prefix("acct", "m_1", {1, 9}, &common));
}

TEST(chat_cache, EachKeyKeepsABoundedNumberLeastRecentlyUsedFirstOut) {
  chat_registry r;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(r.put_conversation(conv("s_" + std::to_string(i), "k", {1, i}), 3).empty());
  EXPECT_TRUE(r.put_conversation(conv("s_x", "other", {1}), 3).empty());  // another key's count
  auto evicted = r.put_conversation(conv("s_3", "k", {1, 3}), 3);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].session_id, "s_0");
  // s_1 used again (taken and put back): s_2 is now the oldest
  std::size_t common = 0;
  auto s1 = r.take_prefix("acct", "m_1", {1, 1}, &common);
  ASSERT_TRUE(s1 && s1->session_id == "s_1");
  EXPECT_TRUE(r.put_conversation(std::move(*s1), 3).empty());
  evicted = r.put_conversation(conv("s_4", "k", {1, 4}), 3);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].session_id, "s_2");
  auto dropped = r.drop_key("k");
  EXPECT_EQ(dropped.size(), 3u);
  EXPECT_TRUE(r.take_prefix("acct", "m_1", {1}, &common));  // "other"'s is still there
}

}  // namespace
}  // namespace mpakt::http
