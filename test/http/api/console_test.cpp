// The console's JSON (http/api/console.hpp): a snapshot rendered with its state as one
// object (numbers as numbers, the actor's own value first when a name repeats), its links,
// counters and errors; an event; the time.

#include "http/api/console.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <cmath>

namespace mpakt::http {
namespace {

rapidjson::Document parse(const std::string& text) {
  rapidjson::Document d;
  d.Parse(text.c_str(), text.size());
  EXPECT_FALSE(d.HasParseError()) << text;
  return d;
}

TEST(console, RendersEverySnapshotField) {
  actor_snapshot w;
  w.kind = "worker";
  w.id = "w_a";
  w.link("session", "s_1");
  w.number("freeBytes", 1'000'000'000'000.0);
  w.number("busyMs", 3200);
  w.number("measured", 1.25);
  w.number("nothing", std::nan(""));
  w.text("backend", "cpu");
  w.number("residentBytes", 5);
  w.number("residentBytes", 6);  // a second value of a name: the first stays
  w.text("backend", "cuda");
  w.mailbox = 3;
  w.messages = 42;
  w.errors = {"model m needs 9 MB but worker w_a has 1 MB free"};
  actor_snapshot gone;
  gone.kind = "session";
  gone.id = "s_1";
  gone.answered = false;
  const auto d = parse(actors_json(1'796'221'800'123, {w, gone}));
  EXPECT_STREQ(d["at"].GetString(), "2026-12-02T14:30:00.123Z");
  EXPECT_EQ(d["atMs"].GetUint64(), 1'796'221'800'123u);
  const auto& a = d["actors"].GetArray();
  ASSERT_EQ(a.Size(), 2u);
  EXPECT_STREQ(a[0]["kind"].GetString(), "worker");
  EXPECT_STREQ(a[0]["id"].GetString(), "w_a");
  ASSERT_EQ(a[0]["links"].Size(), 1u);
  EXPECT_STREQ(a[0]["links"][0].GetString(), "session:s_1");
  const auto& st = a[0]["state"];
  ASSERT_TRUE(st["freeBytes"].IsInt64());
  EXPECT_EQ(st["freeBytes"].GetInt64(), 1'000'000'000'000);
  EXPECT_TRUE(st["busyMs"].IsInt64());
  EXPECT_DOUBLE_EQ(st["measured"].GetDouble(), 1.25);
  EXPECT_TRUE(st["nothing"].IsNull());
  EXPECT_EQ(st["residentBytes"].GetInt64(), 5);
  EXPECT_STREQ(st["backend"].GetString(), "cpu");
  EXPECT_EQ(st.MemberCount(), 6u);
  EXPECT_EQ(a[0]["mailbox"].GetUint64(), 3u);
  EXPECT_EQ(a[0]["messages"].GetUint64(), 42u);
  ASSERT_EQ(a[0]["errors"].Size(), 1u);
  EXPECT_TRUE(a[0]["answered"].GetBool());
  EXPECT_FALSE(a[1]["answered"].GetBool());
  EXPECT_EQ(a[1]["state"].MemberCount(), 0u);
  EXPECT_EQ(a[1]["links"].Size(), 0u);
}

TEST(console, RendersAnEvent) {
  const auto d = parse(event_json(grid_event{7, 86'400'000, "lost", "worker", "w_b", "a \"quoted\" detail"}));
  EXPECT_EQ(d["seq"].GetUint64(), 7u);
  EXPECT_STREQ(d["at"].GetString(), "1970-01-02T00:00:00.000Z");
  EXPECT_STREQ(d["what"].GetString(), "lost");
  EXPECT_STREQ(d["kind"].GetString(), "worker");
  EXPECT_STREQ(d["id"].GetString(), "w_b");
  EXPECT_STREQ(d["detail"].GetString(), "a \"quoted\" detail");
}

}  // namespace
}  // namespace mpakt::http
