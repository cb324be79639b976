/// The attention kernel (attention_impl.inc) for avx512: 16 floats per vector.

#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/fast/isa_kernels.hpp"

#define MPAKT_VW 16

namespace mpakt::cpu_fast::avx512 {
#include "backends/cpu/fast/attention_impl.inc"
}  // namespace mpakt::cpu_fast::avx512
