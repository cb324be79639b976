// The weight checks' digest (actors/digest.hpp): GMAC against tags computed by an
// implementation written elsewhere — PyPI's `cryptography` (AESGCM(key).encrypt(iv, b"", aad),
// whose tag is GMAC of aad) — and the GCM specification's first test case.

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "actors/digest.hpp"
#include "backends/cpu/ghash.hpp"
#include "backends/cpu/isa.hpp"

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

TEST(Digest, TheCarryLessGhashGivesOpenSslsTags) {
  // Where the CPU has VPCLMULQDQ, a weight's digest at a level from avx512 up takes our own
  // GHASH (backends/cpu/ghash.hpp); at avx2 OpenSSL's GMAC. Every length to 600 bytes (every
  // tail of the sixteen-, four- and one-block loops), then longer ones, in pieces of random size,
  // must give OpenSSL's tags.
  const cpu_isa::level saved = cpu_isa::current();
  const auto levels = cpu_isa::supported_levels();
  if (!cpu_isa::detected().vpclmulqdq || levels.back() < cpu_isa::level::avx512)
    GTEST_SKIP() << "no VPCLMULQDQ with AVX-512 here: the digest is OpenSSL's alone";
  std::mt19937 g(9);
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 600; ++n) lengths.push_back(n);
  for (std::size_t n : {4096u, 4096u + 1, 65536u + 15, 65536u + 255, (1u << 20) + 3}) lengths.push_back(n);
  for (const std::size_t n : lengths) {
    std::string bytes(n, '\0');
    for (auto& c : bytes) c = char(g());
    const std::string nonce = "nonce " + std::to_string(g());
    ASSERT_TRUE(cpu_isa::set_level(cpu_isa::level::avx2));
    ASSERT_FALSE(cpu_fast::ghash::available());
    const std::string want = weight_digest(nonce, bytes);
    for (const auto level : levels) {
      if (level < cpu_isa::level::avx512) continue;
      ASSERT_TRUE(cpu_isa::set_level(level));
      ASSERT_TRUE(cpu_fast::ghash::available());
      EXPECT_EQ(weight_digest(nonce, bytes), want) << n << " bytes at " << cpu_isa::level_name(level);
      weight_mac m(nonce);
      for (std::size_t at = 0; at < n;) {
        const std::size_t piece = std::min<std::size_t>(n - at, g() % 300);
        m.add(std::string_view(bytes).substr(at, piece));
        at += piece;
      }
      EXPECT_EQ(m.hex(), want) << n << " bytes in pieces at " << cpu_isa::level_name(level);
    }
  }
  cpu_isa::set_level(saved);
}

}  // namespace
}  // namespace mpakt
