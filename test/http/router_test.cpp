#include "http/router.hpp"

#include <gtest/gtest.h>

#include "http/api/route_table.hpp"

namespace mpakt::http {
namespace {

const router& api() { return api_router(); }

TEST(router, FindsTheRouteAndItsParameters) {
  auto m = api().match("POST", "/api/v3/sessions/s_1/restore");
  ASSERT_EQ(m.k, route_match::kind::found);
  EXPECT_EQ(m.args, std::vector<std::string>{"s_1"});
  auto k = api().match("POST", "/api/admin/accounts/alice/approve");
  ASSERT_EQ(k.k, route_match::kind::found);
  EXPECT_EQ(k.args, std::vector<std::string>{"alice"});
}

TEST(router, ALiteralSegmentBeatsAParameter) {
  // GET /api/v3/models/inspect is its own resource, not DELETE /api/v3/models/:modelId.
  auto m = api().match("GET", "/api/v3/models/inspect");
  ASSERT_EQ(m.k, route_match::kind::found);
  EXPECT_TRUE(m.args.empty());
  auto d = api().match("DELETE", "/api/v3/models/inspect");
  ASSERT_EQ(d.k, route_match::kind::wrong_method);
  EXPECT_EQ(d.allowed, "GET");
}

TEST(router, AnotherMethodNamesTheMethodsThePathTakes) {
  auto m = api().match("PUT", "/api/v3/models");
  ASSERT_EQ(m.k, route_match::kind::wrong_method);
  EXPECT_EQ(m.allowed, "POST, GET");
  EXPECT_TRUE(m.args.empty());
}

TEST(router, EmptySegmentsDoNotCountAndV1IsV2) {
  EXPECT_EQ(api().match("GET", "//api//versions/").k, route_match::kind::found);
  auto m = api().match("DELETE", "/api/v1/tensors/t_9");
  ASSERT_EQ(m.k, route_match::kind::found);
  EXPECT_EQ(m.args, std::vector<std::string>{"t_9"});
}

TEST(router, PathsNoPatternFitsAreNoPath) {
  for (const char* p : {"", "/", "/api", "/api/", "//api//", "/api/v3", "/api/v3/models/m/graph/more", "/x/y/z/w/v/u/t"})
    EXPECT_EQ(api().match("GET", p).k, route_match::kind::no_path) << p;
}

TEST(router, SegmentsAreTheNonEmptyParts) {
  EXPECT_EQ(path_segments("/a//b/"), (std::vector<std::string_view>{"a", "b"}));
  EXPECT_TRUE(path_segments("///").empty());
}

}  // namespace
}  // namespace mpakt::http
