#include "actors/ids.hpp"

#include <sys/random.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace mpakt {

void os_random(void* out, std::size_t n) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    const ssize_t got = getrandom(p, n, 0);
    if (got <= 0) continue;  // EINTR; getrandom blocks only before the pool is initialised
    p += got;
    n -= std::size_t(got);
  }
}

std::string new_id(std::string_view prefix) {
  unsigned char bytes[12];
  os_random(bytes, sizeof bytes);
  std::string id(prefix);
  char hex[3];
  for (unsigned char b : bytes) {
    std::snprintf(hex, sizeof hex, "%02x", b);
    id += hex;
  }
  return id;
}

}  // namespace mpakt
