#pragma once
/// Strict UTF-8: what the API accepts in JSON strings and what it writes in every JSON body.
///
/// Header-only so that the HTTP layer (which links no runtime library) writes error bodies
/// with the same rule the JSON reader (runtime/json.hpp) applies to requests.

#include <cstddef>
#include <string>
#include <string_view>

namespace mpakt {

/// Length (1–4) of the well-formed UTF-8 sequence that starts at s[i], or 0 when the bytes
/// there are not one: a stray continuation byte, an overlong form (C0, C1, E0 80…, F0 80…),
/// a surrogate (ED A0…), a code point above U+10FFFF (F4 90…, F5…FF), or a sequence cut
/// short. The ranges are Unicode's table 3-7 ("well-formed UTF-8 byte sequences").
inline std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c == 0xE0) n = 3, lo = 0xA0;
  else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) n = 3;
  else if (c == 0xED) n = 3, hi = 0x9F;
  else if (c == 0xF0) n = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) n = 4;
  else if (c == 0xF4) n = 4, hi = 0x8F;
  else return 0;
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  return n;
}

/// The offset of the first byte of `s` that does not start a well-formed sequence, or npos.
inline std::size_t utf8_invalid_at(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

/// `s` with every byte that does not start a well-formed sequence replaced by U+FFFD, so
/// that text quoted from a request (a path, a name) never makes a JSON body invalid.
inline std::string utf8_repaired(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace mpakt
