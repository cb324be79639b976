#include "runtime/json.hpp"

#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <charconv>
#include <cmath>

#include "runtime/utf8.hpp"

namespace mpakt {

namespace {

/// The value of the four hex digits at t[i], or -1.
int hex4(std::string_view t, std::size_t i) {
  if (i + 4 > t.size()) return -1;
  int v = 0;
  for (std::size_t k = i; k < i + 4; ++k) {
    const char c = t[k];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

/// Whether the string opened at t[open] is a member name (a ':' follows its closing quote).
bool is_member_name(std::string_view t, std::size_t open) {
  std::size_t j = open + 1;
  while (j < t.size() && t[j] != '"') j += t[j] == '\\' ? 2 : 1;
  for (++j; j < t.size(); ++j) {
    const char c = t[j];
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return c == ':';
  }
  return false;
}

error bad_string(std::string_view t, std::string_view what, std::size_t open, std::size_t at, const char* fault) {
  return invalid(std::string(what) + ": the " + (is_member_name(t, open) ? "name" : "string") + " starting at byte " +
                 std::to_string(open) + " " + fault + " (byte " + std::to_string(at) + ")");
}

/// The guards that must hold before RapidJSON builds anything: nesting depth, UTF-8, no lone
/// low surrogate escapes. One pass, no recursion. Everything else (syntax, a high surrogate
/// without its low half) is left to the parser, whose documents nest exactly as deep as the
/// brackets outside strings counted here.
status prescan(std::string_view t, std::string_view what, std::size_t max_depth) {
  std::size_t depth = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return invalid(std::string(what) + " nests arrays and objects deeper than " + std::to_string(max_depth) +
                       " levels, the limit (at byte " + std::to_string(i) + ")");
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    } else if (c == '"') {
      const std::size_t open = i++;
      while (i < t.size() && t[i] != '"') {
        const auto b = static_cast<unsigned char>(t[i]);
        if (b == '\\') {
          if (i + 1 < t.size() && t[i + 1] == 'u') {
            const int cp = hex4(t, i + 2);
            if (cp >= 0xD800 && cp <= 0xDBFF && i + 7 < t.size() && t[i + 6] == '\\' && t[i + 7] == 'u') {
              const int low = hex4(t, i + 8);
              if (low >= 0xDC00 && low <= 0xDFFF) {
                i += 12;  // a whole pair
                continue;
              }
            }
            if (cp >= 0xDC00 && cp <= 0xDFFF) return bad_string(t, what, open, i, "escapes a lone low surrogate");
          }
          i += 2;
        } else if (b >= 0x80) {
          const std::size_t n = utf8_sequence_length(t, i);
          if (n == 0) return bad_string(t, what, open, i, "is not valid UTF-8");
          i += n;
        } else {
          ++i;
        }
      }
    }
  }
  return {};
}

const char* kind_of(const rapidjson::Value& v) {
  switch (v.GetType()) {
    case rapidjson::kNullType: return "null";
    case rapidjson::kFalseType:
    case rapidjson::kTrueType: return "true or false";
    case rapidjson::kObjectType: return "an object";
    case rapidjson::kArrayType: return "an array";
    case rapidjson::kStringType: return "a string";
    case rapidjson::kNumberType: return "a number";
  }
  return "something else";
}

}  // namespace

result<rapidjson::Document> parse_json(std::string_view text, std::string_view what, std::size_t max_depth) {
  MPAKT_TRY(prescan(text, what, max_depth));
  rapidjson::Document d;
  d.Parse(text.data(), text.size());
  if (d.HasParseError())
    return invalid(std::string(what) + " is not valid JSON (error at byte " + std::to_string(d.GetErrorOffset()) + ": " +
                   rapidjson::GetParseError_En(d.GetParseError()) + ")");
  return d;
}

result<rapidjson::Document> parse_json_object(std::string_view text, std::string_view what) {
  auto d = parse_json(text, what);
  if (d && !d->IsObject()) return invalid(std::string(what) + " must be a JSON object");
  return d;
}

std::string json_number_text(const rapidjson::Value& v) {
  if (v.IsInt64()) return std::to_string(v.GetInt64());
  if (v.IsUint64()) return std::to_string(v.GetUint64());
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v.GetDouble());
  return std::string(buf, r.ptr);
}

result<std::int64_t> json_integer(const rapidjson::Value& v, std::string_view field, std::int64_t lo, std::int64_t hi) {
  const std::string name(field);
  if (!v.IsNumber()) return invalid(name + " must be an integer, not " + kind_of(v));
  auto out_of_range = [&] {
    std::string want;
    if (hi == std::numeric_limits<std::int64_t>::max())
      want = lo == std::numeric_limits<std::int64_t>::min() ? "an integer that fits in 64 bits"
             : lo == 0                                      ? "a non-negative integer"
                                                            : "an integer of at least " + std::to_string(lo);
    else
      want = "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
    return invalid(name + " must be " + want + ", not " + json_number_text(v));
  };
  std::int64_t x = 0;
  if (v.IsInt64()) {
    x = v.GetInt64();
  } else if (v.IsUint64()) {
    return out_of_range();  // above 2^63 - 1
  } else {
    // A double: 41.0 and 4.1e1 are 41; RapidJSON's GetInt64 would hand back its raw bits.
    const double d = v.GetDouble();
    if (!std::isfinite(d) || d != std::floor(d)) return invalid(name + " must be an integer, not " + json_number_text(v));
    if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) return out_of_range();
    x = static_cast<std::int64_t>(d);
  }
  if (x < lo || x > hi) return out_of_range();
  return x;
}

status check_fields(const rapidjson::Value& o, std::initializer_list<const char*> allowed, const std::string& what) {
  for (auto it = o.MemberBegin(); it != o.MemberEnd(); ++it) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || std::string_view(a) == it->name.GetString();
    if (!ok) return invalid(what + " has unknown field \"" + std::string(it->name.GetString()) + "\"");
  }
  return {};
}

result<std::string> opt_string(const rapidjson::Value& o, const char* k, const std::string& what) {
  auto it = o.FindMember(k);
  if (it == o.MemberEnd() || it->value.IsNull()) return std::string();
  if (!it->value.IsString()) return invalid(what + "." + k + " must be a string");
  return std::string(it->value.GetString(), it->value.GetStringLength());
}

result<std::vector<std::string>> opt_strings(const rapidjson::Value& o, const char* k, const std::string& what) {
  std::vector<std::string> out;
  auto it = o.FindMember(k);
  if (it == o.MemberEnd() || it->value.IsNull()) return out;
  if (!it->value.IsArray()) return invalid(what + "." + k + " must be an array of strings");
  for (rapidjson::SizeType i = 0; i < it->value.Size(); ++i) {
    if (!it->value[i].IsString()) return invalid(what + "." + k + "[" + std::to_string(i) + "] must be a string");
    out.emplace_back(it->value[i].GetString(), it->value[i].GetStringLength());
  }
  return out;
}

std::string text_of(const rapidjson::Value& v) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  v.Accept(w);
  return std::string(buf.GetString(), buf.GetSize());
}

}  // namespace mpakt
