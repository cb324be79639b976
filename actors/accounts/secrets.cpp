#include "actors/accounts/secrets.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cassert>

#include "actors/ids.hpp"

namespace mpakt::accounts {

digest pbkdf2_sha256(std::string_view password, std::string_view salt, int iterations) {
  digest out{};
  const int ok = PKCS5_PBKDF2_HMAC(password.data(), int(password.size()),
                                   reinterpret_cast<const unsigned char*>(salt.data()), int(salt.size()),
                                   iterations, EVP_sha256(), int(out.size()), out.data());
  // Fails only on allocation failure or a bad argument; both are bugs here.
  assert(ok == 1);
  (void)ok;
  return out;
}

digest sha256(std::string_view data) {
  digest out{};
  unsigned int len = 0;
  const int ok = EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr);
  assert(ok == 1 && len == out.size());
  (void)ok;
  return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string random_bytes(std::size_t n) {
  std::string out(n, '\0');
  os_random(out.data(), n);
  return out;
}

std::string base64url(std::string_view bytes) {
  static constexpr char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  out.reserve((bytes.size() * 4 + 2) / 3);
  std::size_t i = 0;
  auto byte = [&](std::size_t k) { return std::uint32_t(static_cast<unsigned char>(bytes[k])); };
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v = (byte(i) << 16) | (byte(i + 1) << 8) | byte(i + 2);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
    out += alphabet[v & 63];
  }
  const std::size_t rest = bytes.size() - i;
  if (rest == 1) {
    const std::uint32_t v = byte(i) << 16;
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
  } else if (rest == 2) {
    const std::uint32_t v = (byte(i) << 16) | (byte(i + 1) << 8);
    out += alphabet[(v >> 18) & 63];
    out += alphabet[(v >> 12) & 63];
    out += alphabet[(v >> 6) & 63];
  }
  return out;
}

void wipe(std::string& s) {
  if (!s.empty()) OPENSSL_cleanse(s.data(), s.size());
}

}  // namespace mpakt::accounts
