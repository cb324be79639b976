#include "actors/loader/reader.hpp"

#include <algorithm>
#include <cstring>

namespace mpakt::loader {

result<std::uint64_t> byte_reader::read_range_into(const std::string& location, std::uint64_t first,
                                                   std::span<const std::span<char>> parts, const part_filled& filled) {
  std::uint64_t total = 0;
  for (const auto& p : parts) total += p.size();
  auto r = read_range(location, first, total);
  if (!r) return std::move(r).err();
  std::size_t at = 0;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto& p = parts[i];
    if (at >= r->bytes.size() && !p.empty()) break;
    const std::size_t n = std::min(p.size(), r->bytes.size() - at);
    std::memcpy(p.data(), r->bytes.data() + at, n);
    at += n;
    if (n == p.size() && filled) filled(i);
  }
  return std::min<std::uint64_t>(total, r->bytes.size());
}

}  // namespace mpakt::loader
