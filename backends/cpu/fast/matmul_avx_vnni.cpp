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

#include "backends/cpu/fast/avx2_basics.inc"

inline __m256i dot_pairs(__m256i acc, __m256i w, __m256i p) { return _mm256_dpwssd_avx_epi32(acc, w, p); }
inline __m256i dot_bytes(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
constexpr bool byte_dots = true;

}  // namespace

#include "backends/cpu/fast/int_lanes_avx2.inc"

}  // namespace mpakt::cpu_fast::avx_vnni
