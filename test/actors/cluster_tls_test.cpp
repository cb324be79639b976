// The cluster link's certificates (actors/cluster_tls.hpp): the coordinator's made once and
// kept, fingerprints as OpenSSL computes them, the public link certificate the same on every
// host, fingerprints as people write them.

#include "actors/cluster_tls.hpp"

#include <gtest/gtest.h>

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "test/support/files.hpp"

namespace mpakt::tls {
namespace {

using test::temp_dir;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}


TEST(cluster_tls, CoordinatorCertificateIsMadeOnceAndItsKeyIsPrivate) {
  temp_dir d;
  const std::string dir = d.path + "/cluster";
  std::string fp1, fp2;
  auto a = coordinator_files(dir, "", "", &fp1);
  ASSERT_TRUE(a) << a.err().message;
  EXPECT_EQ(fp1.size(), 64u);
  struct stat st {};
  ASSERT_EQ(::stat(a->key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 077, 0u);  // the key: its owner only
  const std::string pem = slurp(a->certificate);
  auto b = coordinator_files(dir, "", "", &fp2);  // a restart keeps it
  ASSERT_TRUE(b);
  EXPECT_EQ(fp1, fp2);
  EXPECT_EQ(slurp(b->certificate), pem);

  // The fingerprint is SHA-256 over the certificate's DER, as OpenSSL's X509_digest gives it
  // (what `openssl x509 -fingerprint -sha256` prints).
  BIO* bio = BIO_new_mem_buf(pem.data(), int(pem.size()));
  X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  ASSERT_NE(x, nullptr);
  unsigned char* der = nullptr;
  const int n = i2d_X509(x, &der);
  unsigned char md[32];
  unsigned int len = 0;
  EVP_Digest(der, std::size_t(n), md, &len, EVP_sha256(), nullptr);
  std::string hex;
  for (unsigned i = 0; i < len; ++i) {
    char buf[3];
    std::snprintf(buf, sizeof buf, "%02x", md[i]);
    hex += buf;
  }
  EXPECT_EQ(hex, fp1);
  OPENSSL_free(der);
  X509_free(x);
  BIO_free(bio);

  // Given files are used as they are; one without the other is refused.
  std::string fp3;
  auto given = coordinator_files(d.path + "/other", a->certificate, a->key, &fp3);
  ASSERT_TRUE(given);
  EXPECT_EQ(fp3, fp1);
  EXPECT_FALSE(coordinator_files(d.path + "/other", a->certificate, "", nullptr));
  EXPECT_FALSE(coordinator_files(d.path + "/other", d.path + "/missing.pem", a->key, nullptr));
}

TEST(cluster_tls, TheLinkCertificateIsTheSameBytesEverywhere) {
  temp_dir d1, d2;
  std::string fp;
  auto c = coordinator_files(d1.path, "", "", &fp);
  ASSERT_TRUE(c);
  auto v = volunteer_files(d2.path, "trusted");
  ASSERT_TRUE(v);
  // What every volunteer presents is what every coordinator trusts.
  EXPECT_EQ(slurp(v->certificate), slurp(c->trusted));
  EXPECT_EQ(slurp(v->trusted), "trusted");
  auto again = volunteer_files(d1.path, "x");
  ASSERT_TRUE(again);
  EXPECT_EQ(slurp(again->certificate), slurp(v->certificate));
  EXPECT_NE(*fingerprint_of(slurp(v->certificate)), fp);
}

TEST(cluster_tls, FingerprintsAreReadAsPeopleWriteThem) {
  const std::string hex(64, 'a');
  std::string colons;
  for (int i = 0; i < 32; ++i) colons += std::string(i ? ":" : "") + "AA";
  EXPECT_EQ(*normalize_fingerprint(hex), hex);
  EXPECT_EQ(*normalize_fingerprint(colons), hex);
  auto short_one = normalize_fingerprint("abcd");
  ASSERT_FALSE(short_one);
  EXPECT_NE(short_one.err().message.find("64 hex digits"), std::string::npos);
  auto bad = normalize_fingerprint(std::string(63, 'a') + "g");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().message.find("'g'"), std::string::npos);
  EXPECT_FALSE(fingerprint_of("not a certificate"));
}

}  // namespace
}  // namespace mpakt::tls
