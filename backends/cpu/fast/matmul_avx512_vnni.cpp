/// Integer products against q8/q4 weights stored [N, K], AVX-512 with VNNI: vpdpwssd
/// multiplies int16 pairs and accumulates in one instruction (int16_avx512_impl.inc).
/// Compiled for that level only: see isa_kernels.hpp for what this file may include.

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

#include "backends/cpu/fast/isa_kernels.hpp"

#define MPAKT_DOT16(w, x) _mm512_dpwssd_epi32(_mm512_setzero_si512(), (w), (x))

namespace mpakt::cpu_fast::avx512_vnni {
#include "backends/cpu/fast/int16_avx512_impl.inc"
}  // namespace mpakt::cpu_fast::avx512_vnni
