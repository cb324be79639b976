#include "runtime/safetensors.hpp"

#include <gtest/gtest.h>

#include <string>

namespace mpakt {
namespace {

TEST(safetensors_header, reads_names_shapes_and_offsets) {
  const std::string json = R"({"caf\u00e9.w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}, "__metadata__": {"format": "pt"}})";
  auto h = parse_safetensors_header(json, json.size(), 16);
  ASSERT_TRUE(h) << h.err().message;
  ASSERT_EQ(h->tensors.size(), 1u);
  EXPECT_EQ(h->tensors[0].name, "caf\xC3\xA9.w");
}

// A tensor name reaches inspect's JSON and error messages: one that is not UTF-8 is refused
// naming where it is in the header.
TEST(safetensors_header, a_name_that_is_not_utf8_is_refused_naming_its_position) {
  const std::string json = "{\"ok\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
                           "\"bad\xC0\xAFname\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}";
  auto h = parse_safetensors_header(json, json.size(), 8);
  ASSERT_FALSE(h);
  EXPECT_EQ(h.err().code, errc::invalid);
  EXPECT_EQ(h.err().message, "safetensors header: the name starting at byte 63 is not valid UTF-8 (byte 67)");
}

TEST(safetensors_header, a_deeply_nested_header_is_refused_before_parsing) {
  const std::string json = "{\"__metadata__\": " + std::string(100000, '[') + "}";
  auto h = parse_safetensors_header(json, json.size(), 0);
  ASSERT_FALSE(h);
  EXPECT_NE(h.err().message.find("deeper than 256"), std::string::npos) << h.err().message;
}

}  // namespace
}  // namespace mpakt
