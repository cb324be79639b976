#include "actors/loader/reader.hpp"

#include <algorithm>
#include <cstring>

namespace mpakt::loader {

result<std::uint64_t> byte_reader::read_range_into(const std::string& location, std::uint64_t first,
                                                   std::span<const std::span<char>> parts) {
  std::uint64_t total = 0;
  for (const auto& p : parts) total += p.size();
  auto r = read_range(location, first, total);
  if (!r) return std::move(r).err();
  std::size_t at = 0;
  for (const auto& p : parts) {
    if (at >= r->bytes.size()) break;
    const std::size_t n = std::min(p.size(), r->bytes.size() - at);
    std::memcpy(p.data(), r->bytes.data() + at, n);
    at += n;
  }
  return std::min<std::uint64_t>(total, r->bytes.size());
}

}  // namespace mpakt::loader
