#pragma once
/// Memory sizes on the command line: "8G", "512M", "64K", "1000000" (G/M/K are powers of
/// 1024: these are memory sizes).

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

namespace mpakt::app {

inline std::optional<std::uint64_t> parse_size(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) return std::nullopt;
  const std::string unit(end);
  double mul = 1;
  if (unit == "K" || unit == "k") mul = 1024.0;
  else if (unit == "M" || unit == "m") mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") mul = 1024.0 * 1024 * 1024;
  else if (!unit.empty()) return std::nullopt;
  return std::uint64_t(v * mul);
}

}  // namespace mpakt::app
