/// Row-wise and elementwise kernels (simple_impl.inc) for avx2: 8 floats per vector.

#include <cstdint>

#include "backends/cpu/fast/isa_kernels.hpp"

#define MPAKT_VW 8

namespace mpakt::cpu_fast::avx2 {
#include "backends/cpu/fast/simple_impl.inc"
}  // namespace mpakt::cpu_fast::avx2
