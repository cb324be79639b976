#pragma once
/// Range requests on the serving side (RFC 9110 14): what to answer to a Range header.

#include <cstdint>
#include <string>
#include <string_view>

namespace mpakt::http {

/// The answer to a Range header for a body of `size` bytes.
struct range_answer {
  enum class kind {
    whole,          ///< 200 with the whole body (no Range, or one we ignore)
    partial,        ///< 206 with bytes [first, first + length)
    unsatisfiable,  ///< 416 with "Content-Range: bytes */size"
  };
  kind k = kind::whole;
  std::uint64_t first = 0;
  std::uint64_t length = 0;

  /// "bytes first-last/size" for a partial answer, "bytes */size" for an unsatisfiable one.
  std::string content_range(std::uint64_t size) const;
};

/// Single ranges only: "bytes=a-b", "bytes=a-" and "bytes=-n"; `last` past the end is
/// clamped. Anything else (other units, several ranges, bad syntax, a > b) is ignored and
/// the whole body is sent, as the RFC allows. A first byte at or past the end, or a suffix of
/// 0 bytes, is unsatisfiable.
range_answer evaluate_range(std::string_view header, std::uint64_t size);

}  // namespace mpakt::http
