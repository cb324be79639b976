#pragma once
/// Element types a worker holds, and the conversions between them.
///
/// Activations are always f32. Weights stay as published (bf16, f16, f32) or as the
/// block-quantized q8/q4 forms below; the ops that read weights (matmul, linear,
/// embedding, moe, slice) read them in place, a row or a block at a time.
///
/// q8: blocks of 32 consecutive values along the last dimension; each block is
///     an f16 scale d followed by 32 int8 q, x = q * d (34 bytes, 8.5 bits/value).
/// q4: blocks of 32; f16 scale d, f16 minimum m, then 16 bytes holding 32 4-bit
///     q (value 2i in the low nibble of byte i, value 2i+1 in the high nibble),
///     x = q * d + m (20 bytes, 5 bits/value).
/// Quantization rounds to nearest, ties away from zero; see quantize_row_q8/q4.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

namespace mpakt {

enum class dtype : std::uint8_t { f32, bf16, f16, q8, q4 };

inline constexpr std::int64_t quant_block = 32;

struct block_q8 {
  std::uint16_t d;  ///< f16 scale
  std::int8_t q[32];
};
static_assert(sizeof(block_q8) == 34);

struct block_q4 {
  std::uint16_t d;  ///< f16 scale
  std::uint16_t m;  ///< f16 minimum
  std::uint8_t q[16];
};
static_assert(sizeof(block_q4) == 20);

/// Lower-case wire name: "f32", "bf16", "f16", "q8", "q4".
std::string_view dtype_name(dtype t);
std::optional<dtype> dtype_from_name(std::string_view name);

/// True for the block-quantized types, whose last dimension must be a multiple of 32.
constexpr bool is_quantized(dtype t) { return t == dtype::q8 || t == dtype::q4; }

/// Bytes needed for `count` elements laid out as rows of `row_len` (row_len must be a
/// multiple of 32 for q8/q4). Returns nullopt on overflow.
std::optional<std::size_t> storage_bytes(dtype t, std::int64_t count);

// ---- scalar conversions (header-inline: used in every inner loop) ----

inline float bf16_to_f32(std::uint16_t h) {
  std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Round to nearest even; NaN stays NaN.
inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}

float f16_to_f32(std::uint16_t h);
/// Round to nearest even, with overflow to inf and gradual underflow.
std::uint16_t f32_to_f16(float f);

// ---- row conversions ----

/// Widen `n` elements of packed row data of type `t` (n a multiple of 32 for q8/q4;
/// `src` points at the row's first byte; f32, bf16 and f16 rows need no alignment) into f32.
void dequantize_row(dtype t, const void* src, float* dst, std::int64_t n);

/// Widen elements [first, first+n) of a row (for q8/q4, first and n need not be block
/// aligned): used by slices along the last axis.
void dequantize_range(dtype t, const void* row, std::int64_t first, float* dst, std::int64_t n);

/// Convert `n` f32 values into type `t` (n a multiple of 32 for q8/q4).
void quantize_row(dtype t, const float* src, void* dst, std::int64_t n);

// ---- q8/q4 in lanes: the resident form of a CPU worker's quantized matrices (tensor::lanes16) ----
//
// The same information as the row-major blocks, reordered per 16 consecutive rows (a group) so
// a 64-byte register holds four values of a block for each of the sixteen rows (row 16g + l at
// byte 4l). Group g, block b sits at byte (g·blocks + b)·lane_block_bytes:
//  - q4 (320 bytes): the sixteen rows' scales d (16 f16), their minimums m (16 f16), then four
//    runs of 64 bytes, run j holding bytes 4j..4j+3 of each row's 16 bytes of nibbles (so its
//    low nibbles are values 8j, 8j+2, 8j+4, 8j+6 and its high ones the odd values between);
//  - q8 (544 bytes): the sixteen scales d (16 f16), then eight runs of 64 bytes, run j < 4
//    holding values 8j, 8j+2, 8j+4, 8j+6 of each row and run 4 + j values 8j+1, …, 8j+7, each
//    stored as q + 128 (q XOR 0x80, an unsigned byte).
// Either way a run meets the activations' even or odd values (the quads' layout, isa_kernels.hpp)
// and a block's integer dot lands in its output's lane (docs/runtime.md).

inline constexpr std::int64_t lane_rows = 16;
/// Bytes of one block of a group (16 rows): 16 × the dtype's block.
constexpr std::int64_t lane_block_bytes(dtype t) {
  return lane_rows * std::int64_t(t == dtype::q8 ? sizeof(block_q8) : sizeof(block_q4));
}

/// Whether a tensor of this dtype and shape may be held in lanes: q8 or q4, two dimensions,
/// rows a multiple of 16.
bool lanes_fit(dtype t, const std::vector<std::int64_t>& shape);
/// Writes one group in lanes at `out` (the group's place: 16 rows' bytes) from its 16 rows of
/// `cols` values, row-major at `rows` (elsewhere: not in place).
void group_to_lanes(dtype t, const std::byte* rows, std::byte* out, std::int64_t cols);
/// Writes one row (row-major, `cols` values) as row `l` of the group at `group`: only that
/// row's bytes of the group change, so the rows of a group may be written by different threads.
void row_to_lanes(dtype t, const std::byte* row, std::byte* group, std::int64_t cols, std::int64_t l);
/// Reorders `rows` q8/q4 rows of `cols` values (rows a multiple of 16) into lanes, in place.
void rows_to_lanes(dtype t, std::byte* data, std::int64_t rows, std::int64_t cols);
/// Row r of q8/q4 data held in lanes, as its row-major bytes (cols / 32 blocks).
void lanes_row(dtype t, const std::byte* data, std::int64_t cols, std::int64_t r, std::byte* out);

}  // namespace mpakt
