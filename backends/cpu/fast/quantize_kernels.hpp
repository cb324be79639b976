#pragma once
/// Per-level kernels that quantize weight rows as they arrive on a worker (quantize on load).
/// The rules of isa_kernels.hpp hold here too: files including this are compiled for one
/// instruction-set level, so it declares plain pointers and sizes only.
///
/// Formats are runtime/dtype.hpp's (see isa_kernels.hpp): q8 blocks {f16 d; int8 q[32]},
/// q4 blocks {f16 d; f16 m; uint8 q[16]}. A kernel writes exactly the bytes of the reference
/// (runtime/dtype.cpp, quantize_row: scales rounded to nearest even, values rounded half away
/// from zero) for the same values, or returns false — having written anything — for a row it
/// leaves to the reference: one holding NaN or ±∞, or under q4 a block whose minimum or
/// maximum is zero (the reference keeps whichever zero, +0 or −0, it met first).

#include <cstdint>

namespace mpakt::cpu_fast {

/// Where a row's values come from: f32, or bf16 words (widened exactly).
enum class quant_source : int { f32 = 0, bf16 = 1 };

/// `n` (a multiple of 32) values at `src` (no alignment needed) → n/32 q8 blocks at `dst`.
bool quantize_q8_row_avx512(const void* src, quant_source from, std::uint8_t* dst, std::int64_t n);
/// The same for q4.
bool quantize_q4_row_avx512(const void* src, quant_source from, std::uint8_t* dst, std::int64_t n);
/// The same two on AVX2 (+ F16C): the same bytes.
bool quantize_q8_row_avx2(const void* src, quant_source from, std::uint8_t* dst, std::int64_t n);
bool quantize_q4_row_avx2(const void* src, quant_source from, std::uint8_t* dst, std::int64_t n);

/// One group of 16 q8 (q4) rows, `blocks` blocks each, row-major at `rows` (row r at
/// r · row_bytes, 16 · row_bytes < 2^31) → the group in lanes at `out` (runtime/dtype.hpp's
/// group_to_lanes: the same bytes).
void group_to_lanes_q8_avx512(const std::uint8_t* rows, std::uint8_t* out, std::int64_t blocks, std::int64_t row_bytes);
void group_to_lanes_q4_avx512(const std::uint8_t* rows, std::uint8_t* out, std::int64_t blocks, std::int64_t row_bytes);
/// The same two on AVX2.
void group_to_lanes_q8_avx2(const std::uint8_t* rows, std::uint8_t* out, std::int64_t blocks, std::int64_t row_bytes);
void group_to_lanes_q4_avx2(const std::uint8_t* rows, std::uint8_t* out, std::int64_t blocks, std::int64_t row_bytes);

/// The other way: one group in lanes at `lanes` → its 16 q8 (q4) rows, row r at `rows` +
/// r · row_bytes (runtime/dtype.hpp's lanes_row for each: the same bytes); gathers of AVX2,
/// unpacks and permutes of AVX-512.
void lanes_to_group_q8_avx512(const std::uint8_t* lanes, std::uint8_t* rows, std::int64_t blocks, std::int64_t row_bytes);
void lanes_to_group_q4_avx512(const std::uint8_t* lanes, std::uint8_t* rows, std::int64_t blocks, std::int64_t row_bytes);
void lanes_to_group_q8_avx2(const std::uint8_t* lanes, std::uint8_t* rows, std::int64_t blocks, std::int64_t row_bytes);
void lanes_to_group_q4_avx2(const std::uint8_t* lanes, std::uint8_t* rows, std::int64_t blocks, std::int64_t row_bytes);

/// Sixteen rows of `blocks` · 32 bf16 words at `src` (row r at r · row_bytes, no alignment
/// needed) quantized to q8 straight into their group in lanes at `out`: the bytes of
/// quantize_q8_row_avx512 on each row, then group_to_lanes_q8_avx512, without the row-major
/// blocks between. False, having written anything, where a value is NaN or ±∞.
bool quantize_q8_lanes_bf16_avx512(const std::uint8_t* src, std::int64_t row_bytes, std::uint8_t* out, std::int64_t blocks);
/// The same for q4 (false also where a block's minimum or maximum is zero, as the row kernels').
bool quantize_q4_lanes_bf16_avx512(const std::uint8_t* src, std::int64_t row_bytes, std::uint8_t* out, std::int64_t blocks);
/// The same two on AVX2 (+ FMA, F16C).
bool quantize_q8_lanes_bf16_avx2(const std::uint8_t* src, std::int64_t row_bytes, std::uint8_t* out, std::int64_t blocks);
bool quantize_q4_lanes_bf16_avx2(const std::uint8_t* src, std::int64_t row_bytes, std::uint8_t* out, std::int64_t blocks);

}  // namespace mpakt::cpu_fast
