#pragma once
/// The cryptography behind accounts, in one place: password hashing (PBKDF2-HMAC-SHA256),
/// digests of bearer secrets (SHA-256), constant-time comparison and the text forms of
/// secrets (base64url, no padding). All functions are pure and thread-safe; none logs.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mpakt::accounts {

/// Bytes of a PBKDF2 salt and of a derived password hash.
inline constexpr std::size_t salt_bytes = 16;
inline constexpr std::size_t hash_bytes = 32;

using digest = std::array<unsigned char, hash_bytes>;

/// PBKDF2-HMAC-SHA256 of `password` with `salt` and `iterations` rounds (OpenSSL).
digest pbkdf2_sha256(std::string_view password, std::string_view salt, int iterations);

/// SHA-256 of `data`. Used for API keys and session tokens, which are 256-bit random and so
/// need no salt or stretching: the digest only keeps a stolen database from holding usable keys.
digest sha256(std::string_view data);

/// Equality in time independent of where the inputs differ (CRYPTO_memcmp); false when the
/// sizes differ.
bool constant_time_equal(std::string_view a, std::string_view b);

/// `n` bytes from the OS's random source, as a string of raw bytes.
std::string random_bytes(std::size_t n);

/// URL-safe base64 without padding (RFC 4648 section 5).
std::string base64url(std::string_view bytes);

/// A digest as a string of raw bytes (for binding as a SQLite blob).
inline std::string as_bytes(const digest& d) {
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

/// Overwrites a string's bytes (OPENSSL_cleanse) before it is freed.
void wipe(std::string& s);

}  // namespace mpakt::accounts
