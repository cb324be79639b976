#pragma once
/// Reading JSON that comes from outside the process: request bodies, and the files a model
/// host serves (config.json, tokenizer files, safetensors headers, indexes).
///
/// One entry point, `parse_json`, so that every such text gets the same guards:
/// - Depth. RapidJSON's parser, its Document destructor and its Writer each recurse once per
///   level of nesting, so a 2 MB body of `[[[[…` would overflow the stack three ways. The
///   text is scanned first (a loop, no recursion, no allocation) and refused when it nests
///   deeper than `json_max_depth`, before any Value exists.
/// - Encoding. Strings must be well-formed UTF-8 (runtime/utf8.hpp) and `\u` escapes may
///   not leave a lone low surrogate, so nothing read from a request can later make a
///   response body invalid.
/// Refusals are errc::invalid and name what was read and the byte offset.
///
/// `json_integer` is the one reader of integers: a JSON integer is any number without a
/// fractional part, written `41`, `41.0` or `4.1e1`.
///
/// Thread-safety: plain functions, no shared state.

#include <rapidjson/document.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>
#include <initializer_list>

#include "runtime/status.hpp"

namespace mpakt {

/// The deepest nesting of arrays and objects a text from outside may have (decisions.md,
/// "Reading JSON"). Nothing the API takes needs more than a dozen levels.
inline constexpr std::size_t json_max_depth = 256;

/// Parses `text`. Refused (errc::invalid), with `what` ("request body", "config.json") at
/// the start of the message: nesting deeper than `max_depth` (checked before parsing), a
/// string that is not UTF-8, a lone surrogate escape, any syntax error.
result<rapidjson::Document> parse_json(std::string_view text, std::string_view what,
                                       std::size_t max_depth = json_max_depth);

/// parse_json, and the document must be an object ("<what> must be a JSON object").
result<rapidjson::Document> parse_json_object(std::string_view text, std::string_view what);

/// The integer `v` holds, for `field` (its full name, as messages show it): a number with
/// no fractional part in [lo, hi]. Refused naming the field: not a number, a fraction
/// ("must be an integer, not 41.5"), or out of range ("must be an integer from 1 to 4096,
/// not 5000").
result<std::int64_t> json_integer(const rapidjson::Value& v, std::string_view field,
                                  std::int64_t lo = std::numeric_limits<std::int64_t>::min(),
                                  std::int64_t hi = std::numeric_limits<std::int64_t>::max());

/// The number `v` holds as the shortest text that reads back the same (for messages).
std::string json_number_text(const rapidjson::Value& v);

// Readers of request bodies' fields. `what` names the object in messages ("graph request").

/// Refuses a member whose name is not in `allowed` ("<what> has unknown field \"x\"").
status check_fields(const rapidjson::Value& o, std::initializer_list<const char*> allowed, const std::string& what);
/// Member `k` as a string; "" when absent or null; refused when another type.
result<std::string> opt_string(const rapidjson::Value& o, const char* k, const std::string& what);
/// Member `k` as an array of strings; empty when absent or null.
result<std::vector<std::string>> opt_strings(const rapidjson::Value& o, const char* k, const std::string& what);
/// `v` written back as compact JSON text.
std::string text_of(const rapidjson::Value& v);

}  // namespace mpakt
