#pragma once
/// Digests: SHA-256 (headers, tickets), and the keyed digests of weights for the volunteers'
/// weight checks — a tag over a tensor's bytes under a key drawn from a nonce that the
/// coordinator chooses fresh for each challenge, so only a holder of the bytes can answer
/// (actors/coordinator/checked_worker.hpp).

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace mpakt {

/// An incremental SHA-256 (OpenSSL's).
class sha256_stream {
 public:
  sha256_stream();
  ~sha256_stream();
  sha256_stream(const sha256_stream&) = delete;
  sha256_stream& operator=(const sha256_stream&) = delete;
  void add(std::string_view bytes);
  /// The digest as 64 lowercase hex digits (once).
  std::string hex();

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

/// SHA-256 of `nonce` then `bytes`, as 64 hex digits.
std::string nonce_digest(std::string_view nonce, std::string_view bytes);

/// GMAC (AES-GCM with the bytes as associated data and nothing encrypted) under a 16-byte key
/// and a 12-byte IV: 16 bytes.
std::string gmac_tag(std::string_view key, std::string_view iv, std::string_view bytes);

/// The digest a weight check asks for: GMAC of the weight's bytes under the key and IV that
/// SHA-256 of the challenge's nonce gives (its first 16 bytes, then the next 12), as 32 hex
/// digits. GHASH is a polynomial in a secret of the key with the bytes' 16-byte blocks as its
/// coefficients, so two different byte strings of up to n blocks get the same tag under a key
/// drawn after both were fixed with a chance of at most (n + 1) / 2^128: answering a fresh nonce
/// needs the bytes themselves, as SHA-256 would, at four to five times its speed (it runs on
/// the carry-less multiply every x86-64 volunteer has).
class weight_mac {
 public:
  explicit weight_mac(std::string_view nonce);
  ~weight_mac();
  weight_mac(const weight_mac&) = delete;
  weight_mac& operator=(const weight_mac&) = delete;
  void add(std::string_view bytes);
  /// The tag as 32 lowercase hex digits (once).
  std::string hex();

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

/// weight_mac of `bytes` under `nonce`, as 32 hex digits.
std::string weight_digest(std::string_view nonce, std::string_view bytes);

class tensor;
/// weight_digest of a held weight's row-major bytes, whatever form the worker holds it in (a
/// q8/q4 matrix in lanes is digested row by row), so every holder of a weight gives the same
/// answer.
std::string tensor_digest(std::string_view nonce, const tensor& t);

/// A fresh nonce: 16 random bytes as 32 hex digits.
std::string new_nonce();

/// `n` bytes as 2n lowercase hex digits.
std::string to_hex(const unsigned char* bytes, std::size_t n);

}  // namespace mpakt
