/// The attention kernel (attention_impl.inc) for avx2: 8 floats per vector.

#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/fast/isa_kernels.hpp"

#define MPAKT_VW 8

namespace mpakt::cpu_fast::avx2 {
#include "backends/cpu/fast/attention_impl.inc"
}  // namespace mpakt::cpu_fast::avx2
