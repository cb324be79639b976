#pragma once
/// GHASH, the hash of GCM (NIST SP 800-38D), on carry-less multiplies in 512-bit registers: what
/// the weight checks' GMAC (actors/digest.hpp) spends its time in, over every byte of every
/// weight a spot-checked volunteer takes — on both the volunteer and the coordinator. Where it
/// runs (AVX-512 with VPCLMULQDQ, at a kernel level from avx512 up) it gives GHASH's exact
/// value, so a tag made here equals OpenSSL's GMAC for the same key, IV and bytes; elsewhere
/// the digest keeps OpenSSL's.
///
/// It works as RFC 8452 (appendix A) relates GHASH to POLYVAL: GHASH(H, X1 … Xn) =
/// ByteReverse(POLYVAL(mulX(ByteReverse(H)), ByteReverse(X1) … ByteReverse(Xn))), POLYVAL's
/// product a · b · x^−128 having a two-multiply reduction. Sixteen blocks are taken at a time
/// against the key's first sixteen powers, their products summed unreduced and reduced once.
///
/// Thread-safety: an object is one hash under way (one thread at a time); available() is safe.

#include <cstddef>
#include <cstdint>

namespace mpakt::cpu_fast {

class ghash {
 public:
  /// Whether this CPU and the current kernel level run it.
  static bool available();
  /// The hash under key `h` (AES_K(0^128), 16 bytes); nothing hashed yet. Only where available().
  explicit ghash(const unsigned char* h);
  /// Hashes `n` whole 16-byte blocks.
  void blocks(const unsigned char* data, std::size_t n);
  /// GHASH of the blocks so far (16 bytes at `out`).
  void value(unsigned char* out) const;

 private:
  alignas(64) unsigned char powers_[16][16];  ///< POLYVAL's key to the powers 16, 15, … 1, in that order
  alignas(16) unsigned char acc_[16] = {};    ///< POLYVAL's running value
};

}  // namespace mpakt::cpu_fast
