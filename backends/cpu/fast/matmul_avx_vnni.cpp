/// The AVX2 level's q8/q4 lanes kernels (int_lanes_avx2.inc) with AVX-VNNI's 256-bit dot
/// products: `vpdpwssd` for the decode rows' int16 pairs (one instruction where vpmaddwd and
/// vpaddd took two) and `vpdpbusd` for the many-row kernel's bytes (one where q8 took
/// vpmaddubsw, vpmaddwd and vpaddd). For the Intel cores that have AVX-VNNI without AVX-512
/// (Alder Lake and later client parts, the E-core Xeons): cpu_isa::avx_vnni_dots says when.
/// Compiled for AVX2 + AVX-VNNI only: see isa_kernels.hpp for what this file may include.
/// Every integer sum is exact on both, so these give avx2's bits.

#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/fast/isa_kernels.hpp"

namespace mpakt::cpu_fast::avx_vnni {

namespace {

using i64 = std::int64_t;

inline i64 min_i64(i64 a, i64 b) { return a < b ? a : b; }

inline float half_to_float(std::uint16_t h) { return _cvtsh_ss(h); }

/// As matmul_avx2.cpp's: an empty assembly statement keeps an unrolled integer sum a chain.
inline void sum_in_order(__m256i& v) { asm("" : "+x"(v)); }

/// As matmul_avx2.cpp's (the decode rows' prefetch distance, and the q8/q4 block sizes).
constexpr i64 stream_ahead = 8192;
constexpr i64 q8_bytes = 34, q4_bytes = 20;

inline __m256i dot_pairs(__m256i acc, __m256i w, __m256i p) { return _mm256_dpwssd_avx_epi32(acc, w, p); }
inline __m256i dot_bytes(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
constexpr bool byte_dots = true;

}  // namespace

#include "backends/cpu/fast/int_lanes_avx2.inc"

}  // namespace mpakt::cpu_fast::avx_vnni
