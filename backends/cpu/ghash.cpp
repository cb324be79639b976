// GHASH on carry-less multiplies (ghash.hpp): the AVX-512 kernels where the CPU has VPCLMULQDQ
// and the kernel level allows AVX-512.

#include "backends/cpu/ghash.hpp"

#include "backends/cpu/fast/ghash_kernels.hpp"
#include "backends/cpu/isa.hpp"

namespace mpakt::cpu_fast {

bool ghash::available() {
  const cpu_isa::features& f = cpu_isa::detected();
  return f.pclmul && f.vpclmulqdq && cpu_isa::current() >= cpu_isa::level::avx512;
}

ghash::ghash(const unsigned char* h) { polyval_powers_avx512(h, &powers_[0][0]); }

void ghash::blocks(const unsigned char* data, std::size_t n) {
  if (n > 0) polyval_blocks_avx512(&powers_[0][0], acc_, data, n);
}

void ghash::value(unsigned char* out) const {
  for (int i = 0; i < 16; ++i) out[i] = acc_[15 - i];  // POLYVAL's value reversed is GHASH's
}

}  // namespace mpakt::cpu_fast
