#include "runtime/dtype.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace mpakt {

std::string_view dtype_name(dtype t) {
  switch (t) {
    case dtype::f32: return "f32";
    case dtype::bf16: return "bf16";
    case dtype::f16: return "f16";
    case dtype::q8: return "q8";
    case dtype::q4: return "q4";
  }
  return "?";
}

std::optional<dtype> dtype_from_name(std::string_view name) {
  for (dtype t : {dtype::f32, dtype::bf16, dtype::f16, dtype::q8, dtype::q4})
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

std::optional<std::size_t> storage_bytes(dtype t, std::int64_t count) {
  if (count < 0) return std::nullopt;
  const auto n = static_cast<unsigned __int128>(count);
  unsigned __int128 bytes = 0;
  switch (t) {
    case dtype::f32: bytes = n * 4; break;
    case dtype::bf16:
    case dtype::f16: bytes = n * 2; break;
    case dtype::q8: bytes = (n + quant_block - 1) / quant_block * sizeof(block_q8); break;
    case dtype::q4: bytes = (n + quant_block - 1) / quant_block * sizeof(block_q4); break;
  }
  if (bytes > std::numeric_limits<std::int64_t>::max()) return std::nullopt;
  return static_cast<std::size_t>(bytes);
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t man = h & 0x3ffu;
  std::uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) { man <<= 1; --exp; }
      man &= 0x3ffu;
      u = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::uint16_t f32_to_f16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7e00u;     // NaN
  if (absu >= 0x477ff000u) return sign | 0x7c00u;    // rounds to >= 65520: inf
  if (absu < 0x38800000u) {                          // below the smallest normal f16
    // value * 2^24 rounded to nearest even gives the subnormal mantissa
    float a;
    std::memcpy(&a, &absu, 4);
    const float scaled = a * 16777216.0f;            // exact: power-of-two scaling
    const float r = std::nearbyint(scaled);          // default rounding: nearest even
    return sign | std::uint16_t(r);
  }
  std::uint32_t v = absu - ((127u - 15u) << 23);     // rebias exponent
  v += 0xfffu + ((v >> 13) & 1u);                    // round to nearest even
  return sign | std::uint16_t(v >> 13);
}

namespace {

inline float round_away(float x) { return std::round(x); }  // std::round: ties away from zero

void quantize_q8(const float* src, block_q8* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / quant_block; ++b) {
    const float* x = src + b * quant_block;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const std::uint16_t d16 = f32_to_f16(amax / 127.0f);
    const float d = f16_to_f32(d16);
    dst[b].d = d16;
    for (int i = 0; i < 32; ++i) {
      float q = d == 0 ? 0.0f : round_away(x[i] / d);
      q = std::clamp(q, -127.0f, 127.0f);
      dst[b].q[i] = static_cast<std::int8_t>(q);
    }
  }
}

void quantize_q4(const float* src, block_q4* dst, std::int64_t n) {
  for (std::int64_t b = 0; b < n / quant_block; ++b) {
    const float* x = src + b * quant_block;
    float lo = x[0], hi = x[0];
    for (int i = 1; i < 32; ++i) { lo = std::min(lo, x[i]); hi = std::max(hi, x[i]); }
    const std::uint16_t d16 = f32_to_f16((hi - lo) / 15.0f);
    const std::uint16_t m16 = f32_to_f16(lo);
    const float d = f16_to_f32(d16), m = f16_to_f32(m16);
    dst[b].d = d16;
    dst[b].m = m16;
    for (int i = 0; i < 16; ++i) {
      auto qv = [&](float v) {
        float q = d == 0 ? 0.0f : round_away((v - m) / d);
        return static_cast<std::uint8_t>(std::clamp(q, 0.0f, 15.0f));
      };
      dst[b].q[i] = std::uint8_t(qv(x[2 * i]) | (qv(x[2 * i + 1]) << 4));
    }
  }
}

}  // namespace

void dequantize_row(dtype t, const void* src, float* dst, std::int64_t n) {
  dequantize_range(t, src, 0, dst, n);
}

void dequantize_range(dtype t, const void* row, std::int64_t first, float* dst, std::int64_t n) {
  switch (t) {
    case dtype::f32:
      std::memcpy(dst, static_cast<const float*>(row) + first, std::size_t(n) * 4);
      return;
    case dtype::bf16:
    case dtype::f16: {
      // (byte copies: a row straight from a transfer piece carries no alignment)
      const auto* s = static_cast<const unsigned char*>(row) + 2 * first;
      const bool bf = t == dtype::bf16;
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = bf ? bf16_to_f32(h) : f16_to_f32(h);
      }
      return;
    }
    case dtype::q8: {
      const auto* blocks = static_cast<const block_q8*>(row);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t j = first + i;
        const block_q8& b = blocks[j / quant_block];
        dst[i] = float(b.q[j % quant_block]) * f16_to_f32(b.d);
      }
      return;
    }
    case dtype::q4: {
      const auto* blocks = static_cast<const block_q4*>(row);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t j = first + i;
        const block_q4& b = blocks[j / quant_block];
        const int k = int(j % quant_block);
        const int q = (k & 1) ? (b.q[k / 2] >> 4) : (b.q[k / 2] & 0x0f);
        dst[i] = float(q) * f16_to_f32(b.d) + f16_to_f32(b.m);
      }
      return;
    }
  }
}

void quantize_row(dtype t, const float* src, void* dst, std::int64_t n) {
  switch (t) {
    case dtype::f32: std::memcpy(dst, src, std::size_t(n) * 4); return;
    case dtype::bf16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (std::int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case dtype::f16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (std::int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case dtype::q8: quantize_q8(src, static_cast<block_q8*>(dst), n); return;
    case dtype::q4: quantize_q4(src, static_cast<block_q4*>(dst), n); return;
  }
}

bool lanes_fit(dtype t, const std::vector<std::int64_t>& shape) {
  return (t == dtype::q8 || t == dtype::q4) && shape.size() == 2 && shape[0] > 0 && shape[0] % lane_rows == 0 &&
         shape[1] > 0 && shape[1] % quant_block == 0;
}

namespace {

/// Block b of one row (row-major bytes `blk`) into its place `l` of a lane block, or back.
void q4_to_lane(const std::byte* blk, std::byte* out, std::int64_t l) {
  std::memcpy(out + 2 * l, blk, 2);
  std::memcpy(out + 32 + 2 * l, blk + 2, 2);
  for (int j = 0; j < 4; ++j) std::memcpy(out + 64 + 64 * j + 4 * l, blk + 4 + 4 * j, 4);
}
void q4_from_lane(const std::byte* in, std::byte* blk, std::int64_t l) {
  std::memcpy(blk, in + 2 * l, 2);
  std::memcpy(blk + 2, in + 32 + 2 * l, 2);
  for (int j = 0; j < 4; ++j) std::memcpy(blk + 4 + 4 * j, in + 64 + 64 * j + 4 * l, 4);
}
/// q8: value v of a block sits in run (v % 2)·4 + v / 8, byte v / 2 % 4 of the row's four: the
/// eight values 8j … 8j+7 give run j their even bytes and run 4 + j their odd ones, each XOR
/// 0x80. Eight bytes at a time in a 64-bit word (a byte at a time ran at about 1 GB/s, longer
/// than quantizing the same rows on load).
static_assert(std::endian::native == std::endian::little, "the words below hold bytes in little-endian order");
inline std::uint64_t load8(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline std::uint32_t load4(const std::byte* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
/// Bytes 0, 2, 4, 6 of x (little-endian) as four bytes in order.
inline std::uint32_t even_bytes(std::uint64_t x) {
  x &= 0x00ff00ff00ff00ffull;
  x = (x | (x >> 8)) & 0x0000ffff0000ffffull;
  return std::uint32_t(x | (x >> 16));
}
/// The four bytes of u at bytes 0, 2, 4, 6 of a word, zeros between.
inline std::uint64_t spread_bytes(std::uint32_t u) {
  std::uint64_t x = u;
  x = (x | (x << 16)) & 0x0000ffff0000ffffull;
  return (x | (x << 8)) & 0x00ff00ff00ff00ffull;
}
constexpr std::uint32_t q8_offset = 0x80808080u;
void q8_to_lane(const std::byte* blk, std::byte* out, std::int64_t l) {
  std::memcpy(out + 2 * l, blk, 2);
  for (int j = 0; j < 4; ++j) {
    const std::uint64_t x = load8(blk + 2 + 8 * j);
    const std::uint32_t even = even_bytes(x) ^ q8_offset, odd = even_bytes(x >> 8) ^ q8_offset;
    std::memcpy(out + 32 + 64 * j + 4 * l, &even, 4);
    std::memcpy(out + 32 + 64 * (4 + j) + 4 * l, &odd, 4);
  }
}
void q8_from_lane(const std::byte* in, std::byte* blk, std::int64_t l) {
  std::memcpy(blk, in + 2 * l, 2);
  for (int j = 0; j < 4; ++j) {
    const std::uint64_t x = spread_bytes(load4(in + 32 + 64 * j + 4 * l) ^ q8_offset) |
                            spread_bytes(load4(in + 32 + 64 * (4 + j) + 4 * l) ^ q8_offset) << 8;
    std::memcpy(blk + 2 + 8 * j, &x, 8);
  }
}

}  // namespace

void row_to_lanes(dtype t, const std::byte* row, std::byte* group, std::int64_t cols, std::int64_t l) {
  const std::int64_t bb = lane_block_bytes(t) / lane_rows;
  for (std::int64_t b = 0; b < cols / quant_block; ++b) {
    if (t == dtype::q8) q8_to_lane(row + b * bb, group + b * lane_block_bytes(t), l);
    else q4_to_lane(row + b * bb, group + b * lane_block_bytes(t), l);
  }
}

void group_to_lanes(dtype t, const std::byte* rows, std::byte* out, std::int64_t cols) {
  const std::int64_t row_bytes = cols / quant_block * (lane_block_bytes(t) / lane_rows);
  for (std::int64_t l = 0; l < lane_rows; ++l) row_to_lanes(t, rows + l * row_bytes, out, cols, l);
}

void rows_to_lanes(dtype t, std::byte* data, std::int64_t rows, std::int64_t cols) {
  const std::int64_t row_bytes = cols / quant_block * (lane_block_bytes(t) / lane_rows);
  std::vector<std::byte> group(std::size_t(lane_rows * row_bytes));
  for (std::int64_t g = 0; g < rows / lane_rows; ++g) {
    std::byte* at = data + g * lane_rows * row_bytes;
    std::memcpy(group.data(), at, group.size());
    group_to_lanes(t, group.data(), at, cols);
  }
}

void lanes_row(dtype t, const std::byte* data, std::int64_t cols, std::int64_t r, std::byte* out) {
  const std::int64_t bb = lane_block_bytes(t) / lane_rows, blocks = cols / quant_block, l = r % lane_rows;
  const std::byte* group = data + (r / lane_rows) * lane_rows * blocks * bb;
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::byte* in = group + b * lane_block_bytes(t);
    if (t == dtype::q8) q8_from_lane(in, out + b * bb, l);
    else q4_from_lane(in, out + b * bb, l);
  }
}

}  // namespace mpakt
