// GHASH's kernels for AVX-512 with VPCLMULQDQ (backends/cpu/ghash.hpp; compiled with -mpclmul
// -mvpclmulqdq beside the AVX-512 flags, CMakeLists.txt): POLYVAL's products
// (RFC 8452) on carry-less multiplies, sixteen blocks at a time in four 512-bit registers
// against the key's powers 16 … 1, their 256-bit products summed and reduced once.
//
// POLYVAL's product of a and b is a · b · x^−128 modulo x^128 + x^127 + x^126 + x^121 + 1. The
// 256-bit carry-less product hi · x^128 + lo is brought down by x^−64 twice: lo = l1 · x^64 + l0
// gives lo · x^−64 = l1 + l0 · (x^64 + x^63 + x^62 + x^57), the last three terms being the
// constant 0xc2 << 56 — one multiply and a swap of lo's halves each time; hi is added last.

// GCC 12's AVX-512 headers start many intrinsics from a self-initialised "undefined" vector,
// which -Wuninitialized reports wherever they are inlined here (a false alarm).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/fast/ghash_kernels.hpp"

namespace mpakt::cpu_fast {

namespace {

inline __m128i reduce(__m128i lo, __m128i hi) {
  const __m128i poly = _mm_set_epi64x(std::int64_t(0xc200000000000000ull), 1);
  lo = _mm_xor_si128(_mm_shuffle_epi32(lo, 0x4e), _mm_clmulepi64_si128(lo, poly, 0x10));
  lo = _mm_xor_si128(_mm_shuffle_epi32(lo, 0x4e), _mm_clmulepi64_si128(lo, poly, 0x10));
  return _mm_xor_si128(lo, hi);
}

/// POLYVAL's product a · b · x^−128.
inline __m128i dot(__m128i a, __m128i b) {
  const __m128i mid = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x01), _mm_clmulepi64_si128(a, b, 0x10));
  const __m128i lo = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x00), _mm_slli_si128(mid, 8));
  const __m128i hi = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x11), _mm_srli_si128(mid, 8));
  return reduce(lo, hi);
}

/// A block's bytes in the other order: GHASH's block as POLYVAL's.
inline __m128i reversed(__m128i v) {
  return _mm_shuffle_epi8(v, _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

/// The four 128-bit lanes of v added.
inline __m128i lanes_sum(__m512i v) {
  const __m256i h = _mm256_xor_si256(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  return _mm_xor_si128(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/// (acc added to the first block) · x^−128 · Σ block k's product with its power, for 4·count
/// blocks in `d` against the powers in `p`: their 256-bit products summed, reduced once.
template <int count>
inline __m128i fold(__m128i acc, const __m512i* d, const __m512i* p) {
  __m512i lo = _mm512_setzero_si512(), hi = lo, mid = lo;
  for (int i = 0; i < count; ++i) {
    const __m512i x = i == 0 ? _mm512_xor_si512(d[0], _mm512_zextsi128_si512(acc)) : d[i];
    lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128(x, p[i], 0x00));
    hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128(x, p[i], 0x11));
    mid = _mm512_xor_si512(mid, _mm512_xor_si512(_mm512_clmulepi64_epi128(x, p[i], 0x01), _mm512_clmulepi64_epi128(x, p[i], 0x10)));
  }
  const __m128i m = lanes_sum(mid);
  return reduce(_mm_xor_si128(lanes_sum(lo), _mm_slli_si128(m, 8)), _mm_xor_si128(lanes_sum(hi), _mm_srli_si128(m, 8)));
}

}  // namespace

void polyval_powers_avx512(const unsigned char* h, unsigned char* powers) {
  // POLYVAL's key: the GHASH key reversed, times x (a shift; the polynomial's low terms added
  // when x^127 carries out)
  const __m128i r = reversed(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  std::uint64_t lo = std::uint64_t(_mm_cvtsi128_si64(r)), hi = std::uint64_t(_mm_extract_epi64(r, 1));
  const bool carry = hi >> 63;
  hi = hi << 1 | lo >> 63;
  lo <<= 1;
  if (carry) {
    hi ^= 0xc200000000000000ull;
    lo ^= 1;
  }
  const __m128i key = _mm_set_epi64x(std::int64_t(hi), std::int64_t(lo));
  __m128i power = key;
  for (int i = 1; i <= 16; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(powers + 16 * (16 - i)), power);
    power = dot(power, key);
  }
}

void polyval_blocks_avx512(const unsigned char* powers, unsigned char* acc, const unsigned char* data, std::size_t n) {
  const __m512i rev = _mm512_broadcast_i32x4(_mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m512i p[4] = {_mm512_loadu_si512(powers), _mm512_loadu_si512(powers + 64), _mm512_loadu_si512(powers + 128),
                        _mm512_loadu_si512(powers + 192)};
  __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(acc));
  for (; n >= 16; n -= 16, data += 256) {
    __m512i d[4];
    for (int i = 0; i < 4; ++i) {
      // (2 KB ahead: a weight's bytes come from memory, and the folds' chain leaves the
      // loads too few in flight — 6.7 GB/s from memory without, 10.7 with, 27 in cache)
      _mm_prefetch(reinterpret_cast<const char*>(data + 2048 + 64 * i), _MM_HINT_T0);
      d[i] = _mm512_shuffle_epi8(_mm512_loadu_si512(data + 64 * i), rev);
    }
    s = fold<4>(s, d, p);
  }
  for (; n >= 4; n -= 4, data += 64) {  // (against the powers 4 … 1)
    const __m512i d = _mm512_shuffle_epi8(_mm512_loadu_si512(data), rev);
    s = fold<1>(s, &d, p + 3);
  }
  const __m128i key = _mm_loadu_si128(reinterpret_cast<const __m128i*>(powers + 240));
  for (; n > 0; --n, data += 16) s = dot(_mm_xor_si128(s, reversed(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data)))), key);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(acc), s);
}

}  // namespace mpakt::cpu_fast
