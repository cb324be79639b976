#include "actors/digest.hpp"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <vector>

#include "actors/ids.hpp"
#include "backends/cpu/ghash.hpp"
#include "backends/cpu/quantize.hpp"
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

namespace {

/// OpenSSL's GMAC, fetched once (an EVP_MAC may be shared by threads).
EVP_MAC* gmac() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "GMAC", nullptr);
  return mac;
}

/// One GMAC under way.
struct gmac_ctx {
  EVP_MAC_CTX* ctx = nullptr;
  gmac_ctx() = default;
  gmac_ctx(const gmac_ctx&) = delete;
  gmac_ctx& operator=(const gmac_ctx&) = delete;
  ~gmac_ctx() { EVP_MAC_CTX_free(ctx); }
  void init(std::string_view key, std::string_view iv) {
    EVP_MAC* mac = gmac();
    if (!mac || !(ctx = EVP_MAC_CTX_new(mac))) throw std::runtime_error("OpenSSL has no GMAC");
    char cipher[] = "AES-128-GCM";
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_CIPHER, cipher, 0),
        OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_IV, const_cast<char*>(iv.data()), iv.size()),
        OSSL_PARAM_construct_end(),
    };
    if (key.size() != 16 || EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size(), params) != 1)
      throw std::runtime_error("GMAC refused its key or IV");
  }
  void add(std::string_view bytes) { EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()); }
  std::string tag() {
    unsigned char out[16];
    std::size_t n = 0;
    if (EVP_MAC_final(ctx, out, &n, sizeof out) != 1 || n != sizeof out) throw std::runtime_error("GMAC gave no tag");
    return std::string(reinterpret_cast<const char*>(out), n);
  }
};

/// GMAC with GHASH on this CPU's carry-less multiplies in 512-bit registers (cpu_fast::ghash,
/// where available): the same tag as OpenSSL's, whose GHASH takes 512-bit registers only from
/// later releases than many volunteers have. The cipher's two blocks come from OpenSSL: the
/// hash key AES_K(0^128) and the mask AES_K(IV ‖ 0^31 ‖ 1).
struct fast_gmac {
  std::optional<cpu_fast::ghash> hash;
  unsigned char mask[16] = {}, pending[16] = {};
  std::size_t pending_n = 0;
  std::uint64_t total = 0;

  void init(std::string_view key, std::string_view iv) {
    if (key.size() != 16 || iv.size() != 12) throw std::runtime_error("GMAC refused its key or IV");
    unsigned char in[32] = {}, out[32 + 16];
    std::memcpy(in + 16, iv.data(), 12);
    in[31] = 1;
    EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
    int n = 0;
    const bool ok = c && EVP_EncryptInit_ex(c, EVP_aes_128_ecb(), nullptr, reinterpret_cast<const unsigned char*>(key.data()),
                                            nullptr) == 1 &&
                    EVP_CIPHER_CTX_set_padding(c, 0) == 1 && EVP_EncryptUpdate(c, out, &n, in, sizeof in) == 1 && n == 32;
    EVP_CIPHER_CTX_free(c);
    if (!ok) throw std::runtime_error("AES refused the GMAC key");
    hash.emplace(out);
    std::memcpy(mask, out + 16, 16);
  }
  void add(std::string_view bytes) {
    total += bytes.size();
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    std::size_t n = bytes.size();
    if (pending_n > 0) {
      const std::size_t take = std::min(n, 16 - pending_n);
      std::memcpy(pending + pending_n, p, take);
      pending_n += take;
      p += take;
      n -= take;
      if (pending_n < 16) return;
      hash->blocks(pending, 1);
      pending_n = 0;
    }
    hash->blocks(p, n / 16);
    pending_n = n % 16;
    std::memcpy(pending, p + n - pending_n, pending_n);
  }
  std::string tag() {
    if (pending_n > 0) {
      std::memset(pending + pending_n, 0, 16 - pending_n);
      hash->blocks(pending, 1);
      pending_n = 0;
    }
    unsigned char lengths[16] = {};  // the bytes' length in bits, big-endian, then 0 (nothing encrypted)
    for (int i = 0; i < 8; ++i) lengths[i] = static_cast<unsigned char>((total * 8) >> (56 - 8 * i));
    hash->blocks(lengths, 1);
    unsigned char t[16];
    hash->value(t);
    for (int i = 0; i < 16; ++i) t[i] ^= mask[i];
    return std::string(reinterpret_cast<const char*>(t), 16);
  }
};

}  // namespace

/// GMAC on this CPU's own GHASH where it runs, else OpenSSL's.
struct weight_mac::impl {
  std::optional<fast_gmac> fast;
  gmac_ctx openssl;
  void init(std::string_view key, std::string_view iv) {
    if (cpu_fast::ghash::available()) fast.emplace().init(key, iv);
    else openssl.init(key, iv);
  }
  void add(std::string_view bytes) {
    if (fast) fast->add(bytes);
    else openssl.add(bytes);
  }
  std::string tag() { return fast ? fast->tag() : openssl.tag(); }
};

std::string gmac_tag(std::string_view key, std::string_view iv, std::string_view bytes) {
  gmac_ctx m;
  m.init(key, iv);
  m.add(bytes);
  return m.tag();
}

weight_mac::weight_mac(std::string_view nonce) : p_(std::make_unique<impl>()) {
  unsigned char seed[32];
  unsigned int n = 0;
  EVP_Digest(nonce.data(), nonce.size(), seed, &n, EVP_sha256(), nullptr);
  const std::string_view s(reinterpret_cast<const char*>(seed), sizeof seed);
  p_->init(s.substr(0, 16), s.substr(16, 12));
}
weight_mac::~weight_mac() = default;

void weight_mac::add(std::string_view bytes) { p_->add(bytes); }

std::string weight_mac::hex() {
  const std::string t = p_->tag();
  return to_hex(reinterpret_cast<const unsigned char*>(t.data()), t.size());
}

std::string weight_digest(std::string_view nonce, std::string_view bytes) {
  weight_mac m(nonce);
  m.add(bytes);
  return m.hex();
}

std::string tensor_digest(std::string_view nonce, const tensor& t) {
  if (!t.lanes16()) return weight_digest(nonce, std::string_view(reinterpret_cast<const char*>(t.data()), t.nbytes()));
  // (in lanes: the row-major bytes a group at a time — lanes tensors hold whole groups of 16)
  weight_mac s(nonce);
  const std::size_t group_bytes = std::size_t(lane_rows) * t.row_bytes();
  std::vector<std::byte> rows(group_bytes);
  for (std::int64_t g = 0; g < t.rows() / lane_rows; ++g) {
    cpu_fast::lanes_to_group(t.type(), t.data() + std::size_t(g) * group_bytes, rows.data(), t.cols());
    s.add(std::string_view(reinterpret_cast<const char*>(rows.data()), rows.size()));
  }
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
