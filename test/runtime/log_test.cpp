#include "runtime/log.hpp"

#include <gtest/gtest.h>

namespace mpakt::log {
namespace {

TEST(Log, JsonLineIsOneEscapedObject) {
  const std::string l = json_line("info", "http", "GET \"/x\"\n", {{"request_id", "r_1"}, {"bad", std::string("\xff")}});
  EXPECT_EQ(l.find('\n'), std::string::npos);
  EXPECT_EQ(l.rfind("{\"ts\":\"", 0), 0u);
  EXPECT_NE(l.find("\"level\":\"info\",\"component\":\"http\",\"msg\":\"GET \\\"/x\\\"\\n\",\"request_id\":\"r_1\","
                   "\"bad\":\"\xEF\xBF\xBD\"}"),
            std::string::npos)
      << l;
}

}  // namespace
}  // namespace mpakt::log
