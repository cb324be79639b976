// Chooses the quantize-on-load kernel for the CPU (quantize.hpp): AVX-512 where the kernel
// level allows it, else the reference.

#include "backends/cpu/quantize.hpp"

#include <cstring>

#include "backends/cpu/fast/quantize_kernels.hpp"
#include "backends/cpu/isa.hpp"

namespace mpakt::cpu_fast {

void quantize_row_from(dtype from, dtype to, const void* src, void* dst, std::int64_t n, float* scratch) {
  const bool fast_source = from == dtype::f32 || from == dtype::bf16;
  if (is_quantized(to) && fast_source && n % quant_block == 0 && cpu_isa::current() >= cpu_isa::level::avx512) {
    const auto source = from == dtype::bf16 ? quant_source::bf16 : quant_source::f32;
    auto* out = static_cast<std::uint8_t*>(dst);
    if (to == dtype::q8 ? quantize_q8_row_avx512(src, source, out, n) : quantize_q4_row_avx512(src, source, out, n))
      return;
  }
  // The reference, on the row widened to f32.
  const float* x = static_cast<const float*>(src);
  if (from == dtype::bf16) {
    const auto* p = static_cast<const unsigned char*>(src);
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      scratch[i] = bf16_to_f32(h);
    }
    x = scratch;
  } else if (from == dtype::f16) {
    const auto* p = static_cast<const unsigned char*>(src);
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      scratch[i] = f16_to_f32(h);
    }
    x = scratch;
  } else if (reinterpret_cast<std::uintptr_t>(src) % alignof(float) != 0) {
    std::memcpy(scratch, src, std::size_t(n) * 4);
    x = scratch;
  }
  quantize_row(to, x, dst, n);
}

}  // namespace mpakt::cpu_fast
