#include "runtime/json.hpp"

#include <gtest/gtest.h>

#include <string>

#include "runtime/utf8.hpp"

namespace mpakt {
namespace {

std::string refusal(std::string_view text, std::size_t max_depth = json_max_depth) {
  auto d = parse_json(text, "request body", max_depth);
  if (d) return "";
  EXPECT_EQ(d.err().code, errc::invalid);
  return d.err().message;
}

std::string nested(std::size_t depth, char open = '[', char close = ']') {
  return std::string(depth, open) + std::string(depth, close);
}

TEST(json_parse, reads_ordinary_documents) {
  auto d = parse_json(R"({"a": [1, 2.5, "x\u00e9\ud83d\ude00", {"b": null}], "c": true})", "request body");
  ASSERT_TRUE(d) << d.err().message;
  EXPECT_TRUE((*d)["a"].IsArray());
  EXPECT_EQ(std::string((*d)["a"][2].GetString()), "x\xC3\xA9\xF0\x9F\x98\x80");
}

TEST(json_parse, depth_up_to_the_limit_is_read) {
  EXPECT_EQ(refusal(nested(json_max_depth)), "");
  EXPECT_EQ(refusal("{\"a\":" + nested(json_max_depth - 1) + "}"), "");
}

TEST(json_parse, deeper_than_the_limit_is_refused_naming_it) {
  const std::string msg = refusal(nested(json_max_depth + 1));
  EXPECT_NE(msg.find("request body"), std::string::npos) << msg;
  EXPECT_NE(msg.find("256"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte 256"), std::string::npos) << msg;
  EXPECT_NE(refusal(nested(4, '{', '}'), 3).find("deeper than 3"), std::string::npos);
}

// A million levels would overflow the stack in RapidJSON's recursive parser, Document
// destructor and Writer; the scan refuses it without recursing (the process survives).
TEST(json_parse, a_million_levels_are_refused_without_recursion) {
  EXPECT_NE(refusal(nested(1'000'000)).find("deeper than 256"), std::string::npos);
  EXPECT_NE(refusal(std::string(1'000'000, '[')).find("deeper than 256"), std::string::npos);
  EXPECT_NE(refusal("{\"a\":" + std::string(2'000'000, '{')).find("deeper than 256"), std::string::npos);
}

TEST(json_parse, brackets_inside_strings_do_not_count) {
  const std::string deep_text = "\"" + std::string(10'000, '[') + "\\\"" + std::string(10'000, '{') + "\"";
  EXPECT_EQ(refusal("[" + deep_text + "]"), "");
}

TEST(json_parse, syntax_errors_name_the_byte) {
  const std::string msg = refusal("{\"a\": [1, 2,}");
  EXPECT_NE(msg.find("request body is not valid JSON (error at byte"), std::string::npos) << msg;
  EXPECT_NE(refusal("").find("not valid JSON"), std::string::npos);
  EXPECT_NE(refusal("{} {}").find("not valid JSON"), std::string::npos);
}

TEST(json_parse, invalid_utf8_is_refused_naming_the_string_and_byte) {
  // a stray continuation byte, an overlong '/', an overlong NUL, a surrogate, above U+10FFFF, a cut sequence
  for (const char* bad : {"\x80", "\xC0\xAF", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80", "\xE2\x82"}) {
    const std::string msg = refusal(std::string("{\"name\": \"ab") + bad + "\"}");
    EXPECT_NE(msg.find("the string starting at byte 9 is not valid UTF-8 (byte 12)"), std::string::npos) << msg;
  }
  const std::string name = refusal("{\"x\xFF\": 1}");
  EXPECT_NE(name.find("the name starting at byte 1 is not valid UTF-8 (byte 3)"), std::string::npos) << name;
}

TEST(json_parse, lone_low_surrogate_escapes_are_refused) {
  EXPECT_NE(refusal(R"(["a\udc00"])").find("lone low surrogate"), std::string::npos);
  EXPECT_NE(refusal(R"(["\ud800"])").find("not valid JSON"), std::string::npos);  // the parser's own check
  EXPECT_EQ(refusal(R"(["\ud800\udc00", "\\udc00"])"), "");  // a pair; an escaped backslash
}

TEST(json_parse, object_form_says_what_it_wanted) {
  auto d = parse_json_object("[1]", "graph request");
  ASSERT_FALSE(d);
  EXPECT_EQ(d.err().message, "graph request must be a JSON object");
}

result<std::int64_t> integer_in(const std::string& text, std::int64_t lo = INT64_MIN, std::int64_t hi = INT64_MAX) {
  auto d = parse_json("{\"v\": " + text + "}", "test");
  EXPECT_TRUE(d);
  return json_integer((*d)["v"], "maxNewTokens", lo, hi);
}

TEST(json_integer, integral_doubles_are_integers) {
  for (const char* t : {"41", "41.0", "4.1e1", "410e-1", "41.000"}) {
    auto v = integer_in(t);
    ASSERT_TRUE(v) << t << ": " << v.err().message;
    EXPECT_EQ(*v, 41) << t;
  }
  EXPECT_EQ(*integer_in("-0.0"), 0);
  EXPECT_EQ(*integer_in("-9223372036854775808"), INT64_MIN);
  EXPECT_EQ(*integer_in("9007199254740992.0"), 9007199254740992);
}

TEST(json_integer, fractions_are_refused_naming_the_field) {
  auto v = integer_in("41.5");
  ASSERT_FALSE(v);
  EXPECT_EQ(v.err().message, "maxNewTokens must be an integer, not 41.5");
  EXPECT_EQ(integer_in("\"41\"").err().message, "maxNewTokens must be an integer, not a string");
  EXPECT_EQ(integer_in("true").err().message, "maxNewTokens must be an integer, not true or false");
}

TEST(json_integer, out_of_range_is_refused_naming_the_bounds) {
  EXPECT_EQ(integer_in("5000", 1, 4096).err().message, "maxNewTokens must be an integer from 1 to 4096, not 5000");
  EXPECT_EQ(integer_in("5000.0", 1, 4096).err().message, "maxNewTokens must be an integer from 1 to 4096, not 5000");
  EXPECT_EQ(integer_in("-1", 0).err().message, "maxNewTokens must be a non-negative integer, not -1");
  EXPECT_EQ(integer_in("0", 1).err().message, "maxNewTokens must be an integer of at least 1, not 0");
  EXPECT_FALSE(integer_in("9223372036854775808"));       // a uint64 above int64
  EXPECT_FALSE(integer_in("9223372036854775808.0"));     // 2^63 as a double
  EXPECT_FALSE(integer_in("1e300"));
  EXPECT_EQ(*integer_in("4096.0", 1, 4096), 4096);
}

TEST(utf8, sequences_follow_unicode_table_3_7) {
  EXPECT_EQ(utf8_invalid_at("plain caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"), std::string_view::npos);
  EXPECT_EQ(utf8_invalid_at("ab\xC1\xBF"), 2u);          // overlong
  EXPECT_EQ(utf8_invalid_at("ab\xED\xBF\xBF"), 2u);      // surrogate
  EXPECT_EQ(utf8_invalid_at("ab\xF0\x8F\xBF\xBF"), 2u);  // overlong 4-byte
  EXPECT_EQ(utf8_repaired("a\xFF" "b\xC0\x80"), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD");
}

}  // namespace
}  // namespace mpakt
