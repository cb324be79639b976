#include "http/api/model_graph.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace mpakt::http {
namespace {

std::string stories_config() {
  std::ifstream f(MPAKT_SHARED_DIR "/models/stories260K/config.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

result<std::string> build(const std::string& body) {
  return build_model_graph(body, stories_config(), "m_000000000000000000000000");
}

TEST(model_graph, OutputPicksTheHead) {
  auto r = build(R"({"ids": [1, 2], "output": "argmax"})");
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_NE(r->find("argmax"), std::string::npos);
  EXPECT_EQ(build(R"({"ids": [1], "output": "best"})").err().message,
            "graph request output must be logits, argmax or sample, not \"best\"");
}

TEST(model_graph, OutputThatIsNotAStringIsRefusedNamingIt) {
  // Used to be read as logits, the default, without a word.
  for (const char* v : {"5", "null", "true", "{\"x\": []}", "[\"argmax\"]"}) {
    auto r = build(std::string(R"({"ids": [1], "output": )") + v + "}");
    ASSERT_FALSE(r) << v;
    EXPECT_EQ(r.err().message, "graph request output must be logits, argmax or sample (a string)") << v;
  }
}

}  // namespace
}  // namespace mpakt::http
