// The weight checks' digest (actors/digest.hpp): GMAC against tags computed by an
// implementation written elsewhere — PyPI's `cryptography` (AESGCM(key).encrypt(iv, b"", aad),
// whose tag is GMAC of aad) — and the GCM specification's first test case.

#include <gtest/gtest.h>

#include <string>

#include "actors/digest.hpp"

namespace mpakt {
namespace {

std::string hex(const std::string& raw) { return to_hex(reinterpret_cast<const unsigned char*>(raw.data()), raw.size()); }

std::string counting(int n, int mul, int add) {
  std::string s(std::size_t(n), '\0');
  for (int i = 0; i < n; ++i) s[std::size_t(i)] = char((i * mul + add) & 255);
  return s;
}

TEST(Digest, GmacMatchesAnOutsideImplementation) {
  // McGrew and Viega's GCM test case 1: zero key, zero IV, nothing at all.
  EXPECT_EQ(hex(gmac_tag(std::string(16, '\0'), std::string(12, '\0'), "")), "58e2fccefa7e3061367f1d57a4e7455a");
  // 1,000 bytes (a partial last block) under key 0..15 and IV 100..111.
  EXPECT_EQ(hex(gmac_tag(counting(16, 1, 0), counting(12, 1, 100), counting(1000, 37, 11))), "3f5d3b14a5611c4b3731b5b72343804a");
}

TEST(Digest, AWeightsDigestIsGmacUnderItsNoncesSha256) {
  // key = SHA-256("n0nce")[0, 16), IV = [16, 28)
  EXPECT_EQ(weight_digest("n0nce", "mpakt weights"), "02779ee88157676b06503b51cd122b31");
  // in pieces of any size, the same tag
  const std::string bytes = counting(100003, 13, 5);
  const std::string whole = weight_digest("n", bytes);
  for (std::size_t piece : {1u, 7u, 16u, 4095u, 65536u}) {
    weight_mac m("n");
    for (std::size_t at = 0; at < bytes.size(); at += piece) m.add(std::string_view(bytes).substr(at, piece));
    EXPECT_EQ(m.hex(), whole) << piece;
  }
  // another nonce, or one byte changed anywhere, another tag
  EXPECT_NE(weight_digest("m", bytes), whole);
  for (std::size_t at : {std::size_t(0), std::size_t(50000), bytes.size() - 1}) {
    std::string changed = bytes;
    changed[at] = char(changed[at] ^ 1);
    EXPECT_NE(weight_digest("n", changed), whole) << at;
  }
  EXPECT_NE(weight_digest("n", bytes + std::string(1, '\0')), whole);  // (the length counts)
}

}  // namespace
}  // namespace mpakt
