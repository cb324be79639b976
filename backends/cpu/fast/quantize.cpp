// Chooses the quantize-on-load kernel for the CPU (quantize.hpp): AVX-512 or AVX2 where the
// kernel level allows it, else the reference. Every one writes the reference's bytes.

#include "backends/cpu/quantize.hpp"

#include <cstdint>
#include <cstring>

#include "backends/cpu/fast/quantize_kernels.hpp"
#include "backends/cpu/isa.hpp"

namespace mpakt::cpu_fast {

void quantize_row_from(dtype from, dtype to, const void* src, void* dst, std::int64_t n, float* scratch) {
  const bool fast_source = from == dtype::f32 || from == dtype::bf16;
  const cpu_isa::level level = cpu_isa::current();
  if (is_quantized(to) && fast_source && n % quant_block == 0 && level >= cpu_isa::level::avx2) {
    const auto source = from == dtype::bf16 ? quant_source::bf16 : quant_source::f32;
    auto* out = static_cast<std::uint8_t*>(dst);
    const bool wide = level >= cpu_isa::level::avx512;
    const bool done = to == dtype::q8 ? (wide ? quantize_q8_row_avx512 : quantize_q8_row_avx2)(src, source, out, n)
                                      : (wide ? quantize_q4_row_avx512 : quantize_q4_row_avx2)(src, source, out, n);
    if (done) return;
  }
  // The reference, on the row widened to f32 (an f32 row only when it is not aligned).
  const float* x = static_cast<const float*>(src);
  if (from != dtype::f32 || reinterpret_cast<std::uintptr_t>(src) % alignof(float) != 0) {
    dequantize_row(from, src, scratch, n);
    x = scratch;
  }
  quantize_row(to, x, dst, n);
}

void group_to_lanes(dtype t, const std::byte* rows, std::byte* out, std::int64_t cols) {
  const std::int64_t blocks = cols / quant_block, row_bytes = storage_bytes(t, cols).value_or(0);
  const auto* in = reinterpret_cast<const std::uint8_t*>(rows);
  auto* at = reinterpret_cast<std::uint8_t*>(out);
  const cpu_isa::level level = cpu_isa::current();
  if (level >= cpu_isa::level::avx512 && row_bytes * lane_rows <= INT32_MAX) {  // (the gathers' offsets)
    if (t == dtype::q8) return group_to_lanes_q8_avx512(in, at, blocks, row_bytes);
    if (t == dtype::q4) return group_to_lanes_q4_avx512(in, at, blocks, row_bytes);
  }
  if (level >= cpu_isa::level::avx2) {
    if (t == dtype::q8) return group_to_lanes_q8_avx2(in, at, blocks, row_bytes);
    if (t == dtype::q4) return group_to_lanes_q4_avx2(in, at, blocks, row_bytes);
  }
  mpakt::group_to_lanes(t, rows, out, cols);
}

void lanes_to_group(dtype t, const std::byte* group, std::byte* rows, std::int64_t cols) {
  const std::int64_t blocks = cols / quant_block, row_bytes = storage_bytes(t, cols).value_or(0);
  const cpu_isa::level level = cpu_isa::current();
  const auto* in = reinterpret_cast<const std::uint8_t*>(group);
  auto* out = reinterpret_cast<std::uint8_t*>(rows);
  if (level >= cpu_isa::level::avx512) {
    if (t == dtype::q8) return lanes_to_group_q8_avx512(in, out, blocks, row_bytes);
    if (t == dtype::q4) return lanes_to_group_q4_avx512(in, out, blocks, row_bytes);
  }
  if (level >= cpu_isa::level::avx2) {
    if (t == dtype::q8) return lanes_to_group_q8_avx2(in, out, blocks, row_bytes);
    if (t == dtype::q4) return lanes_to_group_q4_avx2(in, out, blocks, row_bytes);
  }
  for (std::int64_t l = 0; l < lane_rows; ++l) lanes_row(t, group, cols, l, rows + l * row_bytes);
}

bool quantize_group_to_lanes(dtype from, dtype to, const void* src, std::int64_t src_row_bytes, std::byte* out,
                             std::int64_t cols) {
  const cpu_isa::level level = cpu_isa::current();
  if (from != dtype::bf16 || !is_quantized(to) || cols % quant_block != 0 || level < cpu_isa::level::avx2) return false;
  const auto* in = static_cast<const std::uint8_t*>(src);
  auto* at = reinterpret_cast<std::uint8_t*>(out);
  const bool wide = level >= cpu_isa::level::avx512;
  if (to == dtype::q4) return (wide ? quantize_q4_lanes_bf16_avx512 : quantize_q4_lanes_bf16_avx2)(in, src_row_bytes, at, cols / quant_block);
  return (wide ? quantize_q8_lanes_bf16_avx512 : quantize_q8_lanes_bf16_avx2)(in, src_row_bytes, at, cols / quant_block);
}

}  // namespace mpakt::cpu_fast
