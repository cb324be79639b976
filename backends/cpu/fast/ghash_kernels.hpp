#pragma once
/// The GHASH kernels (backends/cpu/ghash.hpp) for AVX-512 with VPCLMULQDQ. As isa_kernels.hpp
/// asks of per-level files, plain pointers and sizes only. Values are 16-byte strings in
/// POLYVAL's order (RFC 8452: little-endian polynomials).

#include <cstddef>

namespace mpakt::cpu_fast {

/// POLYVAL's key from GHASH's `h`, then its powers: `powers` gets 16 values, the key to the
/// powers 16, 15, … 1 (POLYVAL's products: H_(i+1) = H_i · H · x^−128).
void polyval_powers_avx512(const unsigned char* h, unsigned char* powers);
/// `n` GHASH blocks (each byte-reversed into POLYVAL's order) folded into `acc`.
void polyval_blocks_avx512(const unsigned char* powers, unsigned char* acc, const unsigned char* data, std::size_t n);

}  // namespace mpakt::cpu_fast
