/// Products with many rows (prefill, verify of many drafts) against a bf16 weight stored
/// [N, K], on AMX tiles. Compiled for AMX-BF16 only: see isa_kernels.hpp for what this file
/// may include.
///
/// The product is computed transposed, yᵀ = w·xᵀ, so the weight is the A operand and its
/// tiles (16 weight rows × 32 values) load straight from where it is held, with its row
/// stride: nothing of the weight is copied or reordered. The activations are the B operand:
/// converted once per call to bf16 and laid out as AMX wants (pairs of k side by side, rows
/// of x across: pack_activations). To keep the f32 activations' precision, each is split in
/// two bf16 halves, x = hi + lo (lo = the rounding error of hi, itself rounded), and both
/// are multiplied in: |x − hi − lo| ≤ 2⁻¹⁸·|x|, where one bf16 would leave 2⁻⁹. Each C tile
/// (16 weight rows × 16 activation rows, f32) is stored once at the end and written
/// transposed into y.

#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/fast/isa_kernels.hpp"

namespace mpakt::cpu_fast::amx {

namespace {

using i64 = std::int64_t;

/// The one tile shape used: 16 rows of 64 bytes for every tile (palette 1).
struct alignas(64) tile_config {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

void configure() {
  tile_config c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  _tile_loadconfig(&c);
}

inline std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}

inline float from_bf16(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

constexpr i64 tile_elems = 16 * 32;  // bf16 values in one B tile

/// Writes C tile `c` (16 weight rows n0.. × 16 activation rows m0..) into y, transposed.
inline void write_tile(const float* c, const amx_product& a, i64 n0, i64 m0) {
  const i64 rows = a.rows - m0 < 16 ? a.rows - m0 : 16;
  const i64 cols = a.n - n0 < 16 ? a.n - n0 : 16;
  for (i64 m = 0; m < rows; ++m) {
    float* yr = a.y + (m0 + m) * a.n + n0;
    for (i64 n = 0; n < cols; ++n) yr[n] = c[n * 16 + m] + (a.bias ? a.bias[n0 + n] : 0.0f);
  }
}

/// NB (1 or 2) blocks of 16 weight rows from n0, MB (1 or 2) blocks of 16 activation rows
/// from block mb: C tiles 0–3, weight tiles 4–5, activation tiles 6–7.
template <int NB, int MB>
void block(const amx_product& a, i64 n0, i64 mb) {
  const i64 kb_count = a.k / 32;
  const std::uint8_t* w0 = a.w + n0 * a.w_row_bytes;
  const std::uint8_t* w1 = w0 + 16 * a.w_row_bytes;
  _tile_zero(0);
  if (MB > 1) _tile_zero(1);
  if (NB > 1) _tile_zero(2);
  if (NB > 1 && MB > 1) _tile_zero(3);
  for (int half = 0; half < 2; ++half) {
    const std::uint16_t* xs = half == 0 ? a.xhi : a.xlo;
    const std::uint16_t* b0 = xs + mb * kb_count * tile_elems;
    const std::uint16_t* b1 = b0 + kb_count * tile_elems;
    for (i64 kb = 0; kb < kb_count; ++kb) {
      _tile_loadd(4, w0 + kb * 64, a.w_row_bytes);
      if (NB > 1) _tile_loadd(5, w1 + kb * 64, a.w_row_bytes);
      _tile_loadd(6, b0 + kb * tile_elems, 64);
      if (MB > 1) _tile_loadd(7, b1 + kb * tile_elems, 64);
      _tile_dpbf16ps(0, 4, 6);
      if (MB > 1) _tile_dpbf16ps(1, 4, 7);
      if (NB > 1) _tile_dpbf16ps(2, 5, 6);
      if (NB > 1 && MB > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  alignas(64) float c[16 * 16];
  _tile_stored(0, c, 64);
  write_tile(c, a, n0, mb * 16);
  if (MB > 1) {
    _tile_stored(1, c, 64);
    write_tile(c, a, n0, mb * 16 + 16);
  }
  if (NB > 1) {
    _tile_stored(2, c, 64);
    write_tile(c, a, n0 + 16, mb * 16);
  }
  if (NB > 1 && MB > 1) {
    _tile_stored(3, c, 64);
    write_tile(c, a, n0 + 16, mb * 16 + 16);
  }
}

}  // namespace

void pack_activations(const float* x, i64 rows, i64 k, i64 m_begin, i64 m_end, std::uint16_t* hi, std::uint16_t* lo) {
  const i64 kb_count = k / 32;
  // Tile (mb, kb), row r, entry (m, j) holds x[mb·16 + m][kb·32 + 2r + j]; rows past the end
  // of x are zeros (their results are never written).
  for (i64 mb = m_begin; mb < m_end; ++mb)
    for (i64 kb = 0; kb < kb_count; ++kb) {
      std::uint16_t* th = hi + (mb * kb_count + kb) * tile_elems;
      std::uint16_t* tl = lo + (mb * kb_count + kb) * tile_elems;
      for (i64 m = 0; m < 16; ++m) {
        const i64 row = mb * 16 + m;
        const float* xr = x + row * k + kb * 32;
        for (i64 i = 0; i < 32; ++i) {
          const float v = row < rows ? xr[i] : 0.0f;
          const std::uint16_t h = to_bf16(v);
          const i64 at = (i / 2) * 32 + m * 2 + (i % 2);
          th[at] = h;
          tl[at] = to_bf16(v - from_bf16(h));
        }
      }
    }
}

void bf16_product_range(const amx_product& a, i64 nb_begin, i64 nb_end) {
  configure();
  const i64 m_blocks = (a.rows + 15) / 16;
  i64 nb = nb_begin;
  for (; nb + 2 <= nb_end; nb += 2) {
    i64 mb = 0;
    for (; mb + 2 <= m_blocks; mb += 2) block<2, 2>(a, nb * 16, mb);
    if (mb < m_blocks) block<2, 1>(a, nb * 16, mb);
  }
  if (nb < nb_end) {
    i64 mb = 0;
    for (; mb + 2 <= m_blocks; mb += 2) block<1, 2>(a, nb * 16, mb);
    if (mb < m_blocks) block<1, 1>(a, nb * 16, mb);
  }
  _tile_release();
}

}  // namespace mpakt::cpu_fast::amx
