#pragma once
/// SHA-256 digests of weights for the volunteers' weight checks: a nonce (chosen by the
/// coordinator, fresh for each challenge) followed by a tensor's bytes, so only a holder of the
/// bytes can answer (actors/coordinator/checked_worker.hpp).

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

class tensor;
/// nonce_digest of a held weight's row-major bytes, whatever form the worker holds it in (a q8/q4
/// matrix in lanes is digested row by row), so every holder of a weight gives the same answer.
std::string tensor_digest(std::string_view nonce, const tensor& t);

/// A fresh nonce: 16 random bytes as 32 hex digits.
std::string new_nonce();

/// `n` bytes as 2n lowercase hex digits.
std::string to_hex(const unsigned char* bytes, std::size_t n);

}  // namespace mpakt
