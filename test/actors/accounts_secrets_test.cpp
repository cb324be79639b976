#include "actors/accounts/secrets.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace mpakt::accounts {
namespace {

std::string hex(const digest& d) {
  std::string out;
  char b[3];
  for (unsigned char c : d) {
    std::snprintf(b, sizeof b, "%02x", c);
    out += b;
  }
  return out;
}

TEST(AccountsSecrets, Pbkdf2MatchesRfc7914Vector) {
  // RFC 7914 section 11: PBKDF2-HMAC-SHA256, P="passwd", S="salt", c=1 (first 32 bytes of 64).
  EXPECT_EQ(hex(pbkdf2_sha256("passwd", "salt", 1)),
            "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc");
  EXPECT_NE(hex(pbkdf2_sha256("passwd", "salt", 2)), hex(pbkdf2_sha256("passwd", "salt", 1)));
}

TEST(AccountsSecrets, Sha256MatchesFips180Vector) {
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(AccountsSecrets, Base64UrlIsUnpaddedAndUrlSafe) {
  EXPECT_EQ(base64url(""), "");
  EXPECT_EQ(base64url("f"), "Zg");
  EXPECT_EQ(base64url("fo"), "Zm8");
  EXPECT_EQ(base64url("foo"), "Zm9v");
  EXPECT_EQ(base64url("foob"), "Zm9vYg");
  EXPECT_EQ(base64url("\xfb\xff\xbf"), "-_-_");
  EXPECT_EQ(base64url(random_bytes(32)).size(), 43u);
}

TEST(AccountsSecrets, ConstantTimeEqualComparesWholeStrings) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_TRUE(constant_time_equal("", ""));
}

TEST(AccountsSecrets, RandomBytesDiffer) {
  EXPECT_EQ(random_bytes(16).size(), 16u);
  EXPECT_NE(random_bytes(32), random_bytes(32));
}

}  // namespace
}  // namespace mpakt::accounts
