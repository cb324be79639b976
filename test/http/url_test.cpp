#include "http/url.hpp"

#include <gtest/gtest.h>

namespace mpakt::http {
namespace {

TEST(request_target, OriginFormIsSplitAndThePathDecoded) {
  std::string why;
  auto t = parse_request_target("/api/v3/models/m%5Fx?source=hf%3Aa&x", &why);
  ASSERT_TRUE(t) << why;
  EXPECT_EQ(t->path, "/api/v3/models/m_x");
  EXPECT_EQ(t->query, "source=hf%3Aa&x");  // the query stays raw: parse_query decodes it
}

TEST(request_target, AbsoluteFormKeepsOnlyItsTarget) {
  std::string why;
  auto t = parse_request_target("http://example.com:8080/api/versions?a=1", &why);
  ASSERT_TRUE(t) << why;
  EXPECT_EQ(t->path, "/api/versions");
  EXPECT_EQ(t->query, "a=1");
}

TEST(request_target, MalformedTargetsAreNamed) {
  std::string why;
  EXPECT_FALSE(parse_request_target("http://[::1", &why));
  EXPECT_NE(why.find("malformed request target"), std::string::npos) << why;
  EXPECT_FALSE(parse_request_target("/api/v3/%zz?x=%zz", &why));
  EXPECT_NE(why.find("percent-escape in \"/api/v3/%zz\""), std::string::npos) << why;
}

TEST(request_target, EmptyAndBareTargets) {
  std::string why;
  auto t = parse_request_target("/", &why);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->path, "/");
  EXPECT_TRUE(t->query.empty());
  auto q = parse_request_target("/?", &why);
  ASSERT_TRUE(q);
  EXPECT_TRUE(q->query.empty());
}

}  // namespace
}  // namespace mpakt::http
