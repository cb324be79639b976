#include "http/range.hpp"

#include <algorithm>
#include <charconv>
#include <optional>

namespace mpakt::http {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// A run of digits and nothing else.
std::optional<std::uint64_t> parse_u64(std::string_view s) {
  if (s.empty()) return std::nullopt;
  std::uint64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::string range_answer::content_range(std::uint64_t size) const {
  if (k == kind::partial)
    return "bytes " + std::to_string(first) + "-" + std::to_string(first + length - 1) + "/" + std::to_string(size);
  return "bytes */" + std::to_string(size);
}

range_answer evaluate_range(std::string_view header, std::uint64_t size) {
  range_answer whole;
  header = trim(header);
  if (header.size() < 6 || header.substr(0, 6) != "bytes=") return whole;  // unknown unit
  const std::string_view spec = trim(header.substr(6));
  if (spec.find(',') != std::string_view::npos) return whole;  // several ranges: not supported, ignored
  const auto dash = spec.find('-');
  if (dash == std::string_view::npos) return whole;
  const std::string_view a = trim(spec.substr(0, dash)), b = trim(spec.substr(dash + 1));

  range_answer out;
  if (a.empty()) {  // "-n": the last n bytes
    const auto n = parse_u64(b);
    if (!n) return whole;
    if (*n == 0 || size == 0) return range_answer{range_answer::kind::unsatisfiable};
    out.k = range_answer::kind::partial;
    out.length = std::min(*n, size);
    out.first = size - out.length;
    return out;
  }
  const auto first = parse_u64(a);
  if (!first) return whole;
  std::uint64_t last = size == 0 ? 0 : size - 1;
  if (!b.empty()) {
    const auto l = parse_u64(b);
    if (!l || *l < *first) return whole;  // invalid syntax: ignored
    last = std::min(*l, last);
  }
  if (*first >= size) return range_answer{range_answer::kind::unsatisfiable};
  out.k = range_answer::kind::partial;
  out.first = *first;
  out.length = last - *first + 1;
  return out;
}

}  // namespace mpakt::http
