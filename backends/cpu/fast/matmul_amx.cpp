/// Products with many rows (prefill) on AMX tiles: bf16 weights stored [N, K] (AMX-BF16),
/// and q8/q4 weights (AMX-INT8). Compiled for AMX only: see isa_kernels.hpp for what this
/// file may include.
///
/// The product is computed transposed, yᵀ = w·xᵀ, so the weight is the A operand and its
/// tiles (16 weight rows × 32 values) load straight from where it is held, with its row
/// stride: nothing of the weight is copied or reordered. The activations are the B operand:
/// converted once per call to bf16 and laid out as AMX wants (pairs of k side by side, rows
/// of x across: pack_activations). pack_activations rounds each to bf16 (nearest even, as
/// matmul.cpp's rounds_activations has every path's prefill take them) as it packs, and can
/// give the rounding error too, x = hi + lo (lo itself rounded); the products take hi alone
/// (amx_product::xlo null). Each C tile
/// (16 weight rows × 16 activation rows, f32) is stored once at the end and written
/// transposed into y.
///
/// q8/q4: the activations are quantized to int8 per row and block of 32 (as llama.cpp's q8_0
/// activations; a prefill's approximation, where decode products use int16), and each block
/// of 32 is one tile product (tdpbssd for q8's signed weights, tdpbusd for q4's nibbles) whose
/// 16 × 16 int32 result is scaled by d_w·s_x (and q4's offset term added) in f32 while the
/// next block's product runs on the other C tile. The weights are unpacked once per 16 rows
/// into tiles (their 34- and 20-byte blocks do not load as tiles in place).

// GCC 12's AVX-512 headers start many intrinsics from a self-initialised "undefined" vector,
// which -W(maybe-)uninitialized reports wherever they are inlined here (a false alarm).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

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

/// Loads a tile configuration. GCC 12 does not treat ldtilecfg's operand as read: where a
/// configuring function was compiled out of line it dropped the stores of the rows and widths
/// (a zeroed configuration, and the first tile load faulted); the barrier keeps them.
inline void load_config(const tile_config& c) {
  asm volatile("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
}

void configure() {
  tile_config c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  load_config(c);
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

/// Transposes a 16 × 16 matrix of 32-bit values held as 16 rows.
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
#pragma GCC unroll 16
  for (int h = 0; h < 16; h += 8)
#pragma GCC unroll 16
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0xdd);
    }
#pragma GCC unroll 16
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

/// Writes C tile `c` (16 weight rows n0.. × 16 activation rows m0.., f32) into y, transposed,
/// adding the bias.
inline void write_tile(const float* c, const amx_product& a, i64 n0, i64 m0) {
  const i64 rows = a.rows - m0 < 16 ? a.rows - m0 : 16;
  const i64 cols = a.n - n0 < 16 ? a.n - n0 : 16;
  __m512i r[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(c + i * 16);
  transpose16(r);
  const __mmask16 mask = __mmask16(cols == 16 ? 0xffff : (1u << cols) - 1);
  const __m512 bias = a.bias ? _mm512_maskz_loadu_ps(mask, a.bias + n0) : _mm512_setzero_ps();
  for (i64 m = 0; m < rows; ++m)
    _mm512_mask_storeu_ps(a.y + (m0 + m) * a.n + n0, mask, _mm512_add_ps(_mm512_castsi512_ps(r[m]), bias));
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
  const int halves = a.xlo ? 2 : 1;  // (no lo halves: activations that are bf16 already)
  for (int half = 0; half < halves; ++half) {
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
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), infinity = _mm512_set1_epi32(0x7f800000);
  const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x400000);
  // x rounded to bf16, nearest even, in its high half (a NaN kept, made quiet; subnormals kept):
  // to_bf16's bits, and round_to_bf16's (matmul_avx2.cpp) — so unrounded activations pack as
  // the rounded ones do
  auto rounded = [&](__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, magnitude), infinity);
    const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
    return _mm512_mask_or_epi32(r, nan, u, quiet);
  };
  // Tile (mb, kb), row r, entry (m, j) holds x[mb·16 + m][kb·32 + 2r + j]: row m of the
  // 16 × 32 block, converted to 16 pairs of bf16, is column m of the tile — a transpose of
  // 32-bit pairs. Rows past the end of x are zeros (their results are never written).
  for (i64 mb = m_begin; mb < m_end; ++mb)
    for (i64 kb = 0; kb < kb_count; ++kb) {
      __m512i h[16], l[16];
      for (i64 m = 0; m < 16; ++m) {
        const i64 row = mb * 16 + m;
        __m512 v0 = _mm512_setzero_ps(), v1 = _mm512_setzero_ps();
        if (row < rows) {
          v0 = _mm512_loadu_ps(x + row * k + kb * 32);
          v1 = _mm512_loadu_ps(x + row * k + kb * 32 + 16);
        }
        const __m512i r0 = _mm512_srli_epi32(rounded(v0), 16), r1 = _mm512_srli_epi32(rounded(v1), 16);
        h[m] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(r0)), _mm512_cvtepi32_epi16(r1), 1);
        if (lo) {
          // the rounding error of hi, itself rounded (nearest even)
          const __m512 h0 = _mm512_castsi512_ps(_mm512_slli_epi32(r0, 16)), h1 = _mm512_castsi512_ps(_mm512_slli_epi32(r1, 16));
          const __m512i e0 = _mm512_srli_epi32(rounded(_mm512_sub_ps(v0, h0)), 16);
          const __m512i e1 = _mm512_srli_epi32(rounded(_mm512_sub_ps(v1, h1)), 16);
          l[m] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(e0)), _mm512_cvtepi32_epi16(e1), 1);
        }
      }
      transpose16(h);
      std::uint16_t* th = hi + (mb * kb_count + kb) * tile_elems;
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) _mm512_storeu_si512(th + r * 32, h[r]);
      if (!lo) continue;
      transpose16(l);
      std::uint16_t* tl = lo + (mb * kb_count + kb) * tile_elems;
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) _mm512_storeu_si512(tl + r * 32, l[r]);
    }
}

void pack_activations_reference(const float* x, i64 rows, i64 k, i64 m_begin, i64 m_end, std::uint16_t* hi,
                                std::uint16_t* lo) {
  const i64 kb_count = k / 32;
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


// ------------------------------------------------------------------ q8/q4 weights (AMX-INT8)

namespace {

constexpr i64 q8_bytes = 34, q4_bytes = 20;
constexpr i64 int_tile_bytes = 512;  ///< one A (16 × 32) or B (8 × 64) tile of int8

/// Integer tiles: C 0–1 (16 × 16 int32), A 2–3 (16 weight rows × 32 values), B 4–5 (8 rows
/// of 4 values × 16 activation rows).
void configure_int() {
  tile_config c;
  for (int t = 0; t < 2; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  for (int t = 2; t < 4; ++t) {
    c.colsb[t] = 32;
    c.rows[t] = 16;
  }
  for (int t = 4; t < 6; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 8;
  }
  load_config(c);
}

/// The 16 weight rows from n0 as A tiles, one per block ([block][row][32 values]: int8 for
/// q8, the q4 nibbles as bytes in their natural order), and their scales ([block][row]).
void unpack_weights(const amx_int_product& a, i64 n0, std::int8_t* wq, float* d, float* m) {
  const i64 blocks = a.k / 32;
  for (i64 r = 0; r < 16; ++r) {
    const std::uint8_t* row = a.w + (n0 + r) * a.w_row_bytes;
    for (i64 b = 0; b < blocks; ++b) {
      std::int8_t* dst = wq + b * int_tile_bytes + r * 32;
      if (a.type == wtype::q8) {
        const std::uint8_t* blk = row + b * q8_bytes;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)));
        d[b * 16 + r] = _cvtsh_ss(*reinterpret_cast<const std::uint16_t*>(blk));
      } else {
        const std::uint8_t* blk = row + b * q4_bytes;
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
        const __m128i nib = _mm_set1_epi8(0x0f);
        const __m128i lo = _mm_and_si128(v, nib), hi = _mm_and_si128(_mm_srli_epi16(v, 4), nib);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_unpacklo_epi8(lo, hi));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16), _mm_unpackhi_epi8(lo, hi));
        const auto* h = reinterpret_cast<const std::uint16_t*>(blk);
        d[b * 16 + r] = _cvtsh_ss(h[0]);
        m[b * 16 + r] = _cvtsh_ss(h[1]);
      }
    }
  }
}

/// Folds block b's int32 dot products `c` (16 weight rows × 16 activation rows) into the f32
/// accumulators acc[row] (lanes: activation rows).
inline void fold_block(const amx_int_product& a, const std::int32_t* c, i64 mb, i64 b, const float* d, const float* m,
                       __m512* acc) {
  const i64 blocks = a.k / 32;
  const __m512 xs = _mm512_loadu_ps(a.xs + (mb * blocks + b) * 16);
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) {
    const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(c + r * 16));
    acc[r] = _mm512_fmadd_ps(dot, _mm512_mul_ps(_mm512_set1_ps(d[b * 16 + r]), xs), acc[r]);
  }
  if (a.type == wtype::q4) {
    const __m512 xm = _mm512_loadu_ps(a.xsum + (mb * blocks + b) * 16);
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(m[b * 16 + r]), xm, acc[r]);
  }
}

/// One activation row's block of 32 values quantized to int8 for the tiles (as llama.cpp's
/// q8_0 activations): the values times 127/max|x|, rounded to nearest even (saturated to int8
/// when stored), the scale max|x|/127, the sum of the integers (0 for a block holding NaN or
/// ±∞: no sum of out-of-range integers). A row past the activations is the default: zeros.
struct int8_block {
  __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
  float scale = 0;
  std::int32_t total = 0;
  bool finite = true;
};
inline int8_block quantize_int8_block(const float* p) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512 v0 = _mm512_loadu_ps(p), v1 = _mm512_loadu_ps(p + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
  int8_block b;
  b.finite = (_mm512_fpclass_ps_mask(v0, 0x99) | _mm512_fpclass_ps_mask(v1, 0x99)) == 0;
  const __m512 iv = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
  b.i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, iv));
  b.i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, iv));
  b.scale = amax / 127.0f;
  b.total = b.finite ? _mm512_reduce_add_epi32(_mm512_add_epi32(b.i0, b.i1)) : 0;
  return b;
}

// Block b's product into C tile C from A tile A and B tile B (q8's weights are signed, q4's
// nibbles unsigned), and storing a C tile. The tile registers are named in the instructions,
// so these are macros, not functions taking the numbers.
#define MPAKT_AMX_ISSUE(C, A, B, b)                                                 \
  do {                                                                              \
    _tile_loadd(A, wq + (b) * int_tile_bytes, 32);                                  \
    _tile_loadd(B, a.xq + (mb * blocks + (b)) * int_tile_bytes, 64);                \
    _tile_zero(C);                                                                  \
    if (a.type == wtype::q8) _tile_dpbssd(C, A, B);                                 \
    else _tile_dpbusd(C, A, B);                                                     \
  } while (0)

}  // namespace

void pack_int8_activations(const float* x, i64 rows, i64 k, i64 m_begin, i64 m_end, std::int8_t* xq, float* xs,
                           float* xsum) {
  const i64 blocks = k / 32;
  for (i64 mb = m_begin; mb < m_end; ++mb)
    for (i64 b = 0; b < blocks; ++b) {
      std::int8_t* tile = xq + (mb * blocks + b) * int_tile_bytes;
      float* s = xs + (mb * blocks + b) * 16;
      float* sm = xsum ? xsum + (mb * blocks + b) * 16 : nullptr;
      for (i64 m = 0; m < 16; ++m) {
        const i64 row = mb * 16 + m;
        alignas(16) std::int8_t q[32] = {};
        const int8_block v = row < rows ? quantize_int8_block(x + row * k + b * 32) : int8_block{};
        _mm_store_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(v.i0));
        _mm_store_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(v.i1));
        // B tile row r holds values 4r … 4r+3 of every activation row, side by side
        for (int r = 0; r < 8; ++r) __builtin_memcpy(tile + r * 64 + m * 4, q + 4 * r, 4);
        s[m] = v.finite ? v.scale : __builtin_nanf("");
        if (sm) sm[m] = v.scale * float(v.total);
      }
    }
}

void int8_product_range(const amx_int_product& a, i64 nb_begin, i64 nb_end) {
  const i64 blocks = a.k / 32, m_blocks = (a.rows + 15) / 16;
  // per part: the 16 weight rows as tiles, and their scales (a few tens of KB for decoder widths)
  std::int8_t* wq = new std::int8_t[std::size_t(blocks * int_tile_bytes)];
  float* d = new float[std::size_t(blocks * 16)];
  float* m = new float[std::size_t(blocks * 16)];
  configure_int();
  for (i64 nb = nb_begin; nb < nb_end; ++nb) {
    const i64 n0 = nb * 16;
    unpack_weights(a, n0, wq, d, m);
    for (i64 mb = 0; mb < m_blocks; ++mb) {
      __m512 acc[16];
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
      // two C tiles in turn: block b+1's product runs while block b's is folded in
      alignas(64) std::int32_t c[16 * 16];
      MPAKT_AMX_ISSUE(0, 2, 4, 0);
      for (i64 b = 0; b < blocks; b += 2) {
        if (b + 1 < blocks) MPAKT_AMX_ISSUE(1, 3, 5, b + 1);
        _tile_stored(0, c, 64);
        fold_block(a, c, mb, b, d, m, acc);
        if (b + 1 < blocks) {
          if (b + 2 < blocks) MPAKT_AMX_ISSUE(0, 2, 4, b + 2);
          _tile_stored(1, c, 64);
          fold_block(a, c, mb, b + 1, d, m, acc);
        }
      }
      // acc[weight row] holds activation rows in lanes: written transposed, with the bias
      __m512i r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) r[i] = _mm512_castps_si512(acc[i]);
      transpose16(r);
      const i64 rows = a.rows - mb * 16 < 16 ? a.rows - mb * 16 : 16;
      const __m512 bias = a.bias ? _mm512_loadu_ps(a.bias + n0) : _mm512_setzero_ps();
      for (i64 i = 0; i < rows; ++i)
        _mm512_storeu_ps(a.y + (mb * 16 + i) * a.n + n0, _mm512_add_ps(_mm512_castsi512_ps(r[i]), bias));
    }
  }
  _tile_release();
#undef MPAKT_AMX_ISSUE
  delete[] wq;
  delete[] d;
  delete[] m;
}

// ------------------------------------------------------------------ q8/q4 weights held in lanes
//
// A lane block (runtime/dtype.hpp) holds, per 16 weight rows and block, runs of 64 bytes with
// four values of each row side by side: the layout of an AMX B tile (rows of four values of k,
// sixteen columns), so the weight is the B operand and loads in place (q8: its eight runs of
// q + 128; q4: its four runs of nibbles, split once per group into the low nibbles' four rows
// and the high nibbles' four). The runs hold a block's even values, then its odd ones; the
// activations' A tiles take that order (pack_int8_lane_activations). Both are unsigned
// weights against signed activations (tdpbsud): q8's sum is offset by 128·Σx, taken off in
// integers before the conversion. Each output then gets int8_product_range's integer sum and
// the same f32 steps in the same order (dot·(d·s), q4's + m·(s·Σq)): the same bits. A C tile
// (16 activation rows × 16 weight rows) folds into one accumulator per activation row, whose
// lanes are that row's sixteen outputs, stored as they are.

void pack_int8_lane_activations(const float* x, i64 rows, i64 k, i64 m_begin, i64 m_end, std::int8_t* xq, float* xs,
                                float* xsum, std::int32_t* xtot) {
  const i64 blocks = k / 32;
  const __m512i evens_first = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (i64 mb = m_begin; mb < m_end; ++mb)
    for (i64 b = 0; b < blocks; ++b) {
      std::int8_t* tile = xq + (mb * blocks + b) * int_tile_bytes;
      float* s = xs + (mb * blocks + b) * 16;
      float* sm = xsum ? xsum + (mb * blocks + b) * 16 : nullptr;
      std::int32_t* st = xtot + (mb * blocks + b) * 16;
      for (i64 m = 0; m < 16; ++m) {
        const i64 row = mb * 16 + m;
        const int8_block v = row < rows ? quantize_int8_block(x + row * k + b * 32) : int8_block{};
        // the row of the A tile: values 0, 2, …, 30, then 1, 3, …, 31
        _mm_storeu_si128(reinterpret_cast<__m128i*>(tile + m * 32), _mm512_cvtsepi32_epi8(_mm512_permutex2var_epi32(v.i0, evens_first, v.i1)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(tile + m * 32 + 16), _mm512_cvtsepi32_epi8(_mm512_permutex2var_epi32(v.i0, odds, v.i1)));
        s[m] = v.finite ? v.scale : __builtin_nanf("");
        if (sm) sm[m] = v.scale * float(v.total);
        st[m] = v.total;
      }
    }
}

void int8_held_lanes_range(const amx_int_product& a, const std::int32_t* xtot, i64 nb_begin, i64 nb_end) {
  const i64 blocks = a.k / 32, m_blocks = (a.rows + 15) / 16;
  const bool q4 = a.type == wtype::q4;
  const i64 lane_block = 16 * (q4 ? q4_bytes : q8_bytes);
  // per group (q4): its runs split into B tiles, one per block
  std::uint8_t* split = q4 ? new std::uint8_t[std::size_t(blocks * int_tile_bytes)] : nullptr;
  configure_int();
  for (i64 nb = nb_begin; nb < nb_end; ++nb) {
    const i64 n0 = nb * 16;
    const std::uint8_t* group = a.w + nb * blocks * lane_block;
    if (q4) {
      const __m512i nib = _mm512_set1_epi8(0x0f);
      for (i64 b = 0; b < blocks; ++b) {
        const std::uint8_t* runs = group + b * lane_block + 64;
        std::uint8_t* t = split + b * int_tile_bytes;
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const __m512i w = _mm512_loadu_si512(runs + 64 * j);
          _mm512_storeu_si512(t + 64 * j, _mm512_and_si512(w, nib));
          _mm512_storeu_si512(t + 64 * (4 + j), _mm512_and_si512(_mm512_srli_epi16(w, 4), nib));
        }
      }
    }
    auto b_tile = [&](i64 b) -> const void* { return q4 ? static_cast<const void*>(split + b * int_tile_bytes) : group + b * lane_block + 32; };
    auto factors = [&](i64 b, __m512& d, __m512& m) {
      const auto* h = reinterpret_cast<const __m256i*>(group + b * lane_block);
      d = _mm512_cvtph_ps(_mm256_loadu_si256(h));
      if (q4) m = _mm512_cvtph_ps(_mm256_loadu_si256(h + 1));
    };
    for (i64 mb = 0; mb < m_blocks; ++mb) {
      __m512 acc[16];
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
      alignas(64) std::int32_t c[16 * 16];
      auto fold = [&](i64 b) {
        __m512 d, mv = _mm512_setzero_ps();
        factors(b, d, mv);
        const float* xs = a.xs + (mb * blocks + b) * 16;
        const std::int32_t* tot = xtot + (mb * blocks + b) * 16;
#pragma GCC unroll 16
        for (int r = 0; r < 16; ++r) {
          __m512i dot = _mm512_load_si512(c + r * 16);
          if (!q4) dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(128 * tot[r]));  // (q + 128)·x − 128·Σx
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(d, _mm512_set1_ps(xs[r])), acc[r]);
        }
        if (q4) {
          const float* xm = a.xsum + (mb * blocks + b) * 16;
#pragma GCC unroll 16
          for (int r = 0; r < 16; ++r) acc[r] = _mm512_fmadd_ps(mv, _mm512_set1_ps(xm[r]), acc[r]);
        }
      };
#define MPAKT_AMX_LANES(C, A, B, b)                                       \
  do {                                                                    \
    _tile_loadd(A, a.xq + (mb * blocks + (b)) * int_tile_bytes, 32);      \
    _tile_loadd(B, b_tile(b), 64);                                        \
    _tile_zero(C);                                                        \
    _tile_dpbsud(C, A, B);                                                \
  } while (0)
      // two C tiles in turn: block b+1's product runs while block b's is folded in
      MPAKT_AMX_LANES(0, 2, 4, 0);
      for (i64 b = 0; b < blocks; b += 2) {
        if (b + 1 < blocks) MPAKT_AMX_LANES(1, 3, 5, b + 1);
        _tile_stored(0, c, 64);
        fold(b);
        if (b + 1 < blocks) {
          if (b + 2 < blocks) MPAKT_AMX_LANES(0, 2, 4, b + 2);
          _tile_stored(1, c, 64);
          fold(b + 1);
        }
      }
#undef MPAKT_AMX_LANES
      const i64 rows = a.rows - mb * 16 < 16 ? a.rows - mb * 16 : 16;
      const __m512 bias = a.bias ? _mm512_loadu_ps(a.bias + n0) : _mm512_setzero_ps();
      for (i64 i = 0; i < rows; ++i) _mm512_storeu_ps(a.y + (mb * 16 + i) * a.n + n0, _mm512_add_ps(acc[i], bias));
    }
  }
  _tile_release();
  delete[] split;
}

}  // namespace mpakt::cpu_fast::amx
