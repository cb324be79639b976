#include "actors/digest.hpp"

#include <openssl/evp.h>

#include <vector>

#include "actors/ids.hpp"
#include "runtime/tensor.hpp"

namespace mpakt {

struct sha256_stream::impl {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~impl() { EVP_MD_CTX_free(ctx); }
};

sha256_stream::sha256_stream() : p_(std::make_unique<impl>()) { EVP_DigestInit_ex(p_->ctx, EVP_sha256(), nullptr); }
sha256_stream::~sha256_stream() = default;

void sha256_stream::add(std::string_view bytes) { EVP_DigestUpdate(p_->ctx, bytes.data(), bytes.size()); }

std::string sha256_stream::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(p_->ctx, md, &n);
  return to_hex(md, n);
}

std::string nonce_digest(std::string_view nonce, std::string_view bytes) {
  sha256_stream s;
  s.add(nonce);
  s.add(bytes);
  return s.hex();
}

std::string tensor_digest(std::string_view nonce, const tensor& t) {
  if (!t.lanes16()) return nonce_digest(nonce, std::string_view(reinterpret_cast<const char*>(t.data()), t.nbytes()));
  sha256_stream s;
  s.add(nonce);
  std::vector<std::byte> row(t.row_bytes());
  for (std::int64_t r = 0; r < t.rows(); ++r)
    s.add(std::string_view(reinterpret_cast<const char*>(t.packed_row(r, row.data())), row.size()));
  return s.hex();
}

std::string new_nonce() {
  unsigned char raw[16];
  os_random(raw, sizeof raw);
  return to_hex(raw, sizeof raw);
}

std::string to_hex(const unsigned char* bytes, std::size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

}  // namespace mpakt
