/// Row-wise and elementwise kernels (simple_impl.inc) for avx512: 16 floats per vector.

#include <cstdint>

#include "backends/cpu/fast/isa_kernels.hpp"

#define MPAKT_VW 16

namespace mpakt::cpu_fast::avx512 {
#include "backends/cpu/fast/simple_impl.inc"
}  // namespace mpakt::cpu_fast::avx512
