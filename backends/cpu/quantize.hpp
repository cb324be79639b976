#pragma once
/// Quantizing weight rows on load, fast: what a worker runs as q8/q4 tensors arrive
/// (runtime/tensor_builder). The result is exactly the reference's — runtime/dtype.cpp's
/// quantize_row on the same values widened to f32 — which stays the definition: it is used
/// below AVX2 and for the rows the fast kernels leave to it (quantize_kernels.hpp).
///
/// Thread-safety: none needed; pure functions of their arguments.

#include <cstdint>

#include "runtime/dtype.hpp"

namespace mpakt::cpu_fast {

/// Quantizes one row of `n` values (a multiple of 32) to `to` (q8 or q4). The values are
/// `n` f32 (from = f32) or bf16 words (from = bf16) at `src`, unaligned. `scratch` holds `n`
/// floats, for the reference path.
void quantize_row_from(dtype from, dtype to, const void* src, void* dst, std::int64_t n, float* scratch);

/// runtime/dtype.hpp's group_to_lanes (16 q8/q4 rows of `cols` values → their group in
/// lanes), with AVX-512 where the kernel level allows it: the same bytes.
void group_to_lanes(dtype t, const std::byte* rows, std::byte* out, std::int64_t cols);

/// runtime/dtype.hpp's lanes_row for all 16 rows of one group in lanes at `group` → `rows`
/// (row-major, 16 rows of `cols` values), with AVX2's gathers where the kernel level allows.
void lanes_to_group(dtype t, const std::byte* group, std::byte* rows, std::int64_t cols);

/// Sixteen rows of `cols` values (a multiple of 32), `from` values each at `src` (row r at
/// r · src_row_bytes, unaligned), quantized to `to` straight into their group in lanes at
/// `out`: the bytes quantize_row_from on each row and group_to_lanes would give. Done in one
/// pass where a kernel does it (bf16 → q8 or q4 on AVX2 and AVX-512); false — `out` then
/// holds anything — where the caller is to take those two steps (other dtypes or levels, a NaN
/// or ±∞, and under q4 a block whose minimum or maximum is zero).
bool quantize_group_to_lanes(dtype from, dtype to, const void* src, std::int64_t src_row_bytes, std::byte* out,
                             std::int64_t cols);

}  // namespace mpakt::cpu_fast
