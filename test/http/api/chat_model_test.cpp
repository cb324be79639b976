#include "http/api/chat_model.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace mpakt::http {
namespace {

const std::string head = R"({"model": "m_x", "messages": [{"role": "user", "content": "hi"}])";

result<chat_request> parse_with(const std::string& fields) { return parse_chat_request(head + fields + "}"); }

TEST(chat_request, integers_may_be_written_as_doubles) {
  auto r = parse_with(R"(, "maxTokens": 8.0, "topK": 4e1, "seed": 7.0)");
  ASSERT_TRUE(r) << r.err().message;
  EXPECT_EQ(r->max_tokens, 8u);
  EXPECT_EQ(*r->top_k, 40.0);
  EXPECT_EQ(*r->seed, 7);
}

TEST(chat_request, fractions_and_out_of_range_integers_are_refused_naming_the_field) {
  EXPECT_EQ(parse_with(R"(, "maxTokens": 8.5)").err().message, "chat request maxTokens must be an integer, not 8.5");
  EXPECT_EQ(parse_with(R"(, "maxTokens": 5000)").err().message,
            "chat request maxTokens must be an integer from 1 to 4096, not 5000");
  EXPECT_EQ(parse_with(R"(, "topK": -1)").err().message,
            "chat request topK must be an integer from 0 to 1073741824, not -1");
  EXPECT_EQ(parse_with(R"(, "seed": "7")").err().message, "chat request seed must be an integer, not a string");
}

TEST(chat_request, hostile_depth_is_refused_before_parsing) {
  auto r = parse_chat_request(std::string(1'000'000, '[') + std::string(1'000'000, ']'));
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().message.find("deeper than 256"), std::string::npos) << r.err().message;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(chat_model, a_requests_tools_reach_the_chat_template) {
  // stories260K's config and tokenizer, with a template that shows what it was given
  const std::string dir = std::string(MPAKT_SHARED_DIR) + "/models/stories260K/";
  const std::string tmpl =
      R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template": "{% if tools %}tools: {% for t in tools %}{{ t.function.name }} {% endfor %}{% else %}no tools {% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"})";
  auto m = make_chat_model(read(dir + "config.json"), read(dir + "tokenizer.json"), tmpl);
  ASSERT_TRUE(m) << m.err().message;
  const std::vector<models::chat_message> msgs = {{"user", "hello"}};
  auto r = parse_with(R"(, "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}])");
  ASSERT_TRUE(r) << r.err().message;
  auto with = (*m)->prompt(msgs, r->tools_json);
  auto without = (*m)->prompt(msgs);
  ASSERT_TRUE(with && without);
  const auto text = [&](const std::vector<std::int32_t>& ids) { return (*m)->tokenizer.decode(ids, true); };
  EXPECT_EQ(text(*with), "tools: lookup hello");
  EXPECT_EQ(text(*without), "no tools hello");
  EXPECT_NE(parse_with(R"(, "tools": {"a": 1})").err().message.find("chat request tools must be an array"), std::string::npos);
  EXPECT_TRUE(parse_with(R"(, "tools": [])")->tools_json.empty());  // none, as tools=[] renders falsy
}

}  // namespace
}  // namespace mpakt::http
