/// Integer products against q8/q4 weights stored [N, K] for CPUs with AVX512-VNNI
/// (int16_avx512_impl.inc). The same instructions as the AVX-512 level today: each block's
/// int16 dot product starts from zero, where vpdpwssd gains nothing over vpmaddwd.
/// Compiled for that level only: see isa_kernels.hpp for what this file may include.

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

#include "backends/cpu/fast/isa_kernels.hpp"

#define MPAKT_DOT16(w, x) _mm512_madd_epi16((w), (x))

namespace mpakt::cpu_fast::avx512_vnni {
#include "backends/cpu/fast/int16_avx512_impl.inc"
}  // namespace mpakt::cpu_fast::avx512_vnni
