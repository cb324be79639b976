/// Products against a weight stored [N, K] (transB), AVX-512 (F, BW, VL, DQ): float
/// weights, and q8/q4 weights against int16 activations (int16_avx512_impl.inc, with
/// vpmaddwd), and the activation quantizer of the integer products. Compiled for that level only: see
/// isa_kernels.hpp for what this file may include.
///
/// Float product: the weight is read in place 32 values at a time, widened into two
/// registers and multiplied into f32 accumulators for a tile of rows × weight rows, so each
/// weight value is widened once per row tile and each weight row comes from memory once per
/// call.

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

#include "backends/cpu/fast/isa_kernels.hpp"

namespace mpakt::cpu_fast::avx512 {

namespace {

using i64 = std::int64_t;

inline i64 min_i64(i64 a, i64 b) { return a < b ? a : b; }

inline float half_to_float(std::uint16_t h) { return _cvtsh_ss(h); }

/// How far ahead (bytes) the int16 kernel's one-column tile (a range's odd last column) and
/// two-column tile (a weight row from each half of the range) ask for their weight rows' lines.
constexpr i64 stream_ahead = 512, pair_ahead = 2048;

/// How far ahead (bytes) a float tile of several activation rows asks for its weight rows'
/// lines. Such a tile spends many multiply-adds on each line and left the hardware's stream
/// prefetch behind: bf16 [1536, 576] × 8 rows on a 2-vCPU Xeon drew 8.1 GB/s from memory on one
/// thread and 13.7 on two where the same tile ran 14.8 and 22.2 in cache, memory and arithmetic
/// taking turns; asked 1–8 KB ahead, 12.2–13.3 and 19.2–20.1 (4 KB best); four rows 18.1 →
/// 23.4, two 22.2 → 25.4 (two threads). A one-row tile (decode) is left to the hardware.
constexpr i64 batch_ahead = 4096;

/// Keeps loaded values in registers: g++ otherwise folds a row's activation load into each of
/// a tile's multiply-adds as a memory operand, loading it once per weight row. A 512-bit load
/// takes both of a Zen 4's load ports, so an 8 × 2 tile of batched decode issued 32 of them for
/// its 32 multiply-adds per step and ran at about half the multiply-add rate.
inline void in_register(__m512& a, __m512& b) { asm("" : "+v"(a), "+v"(b)); }

// ------------------------------------------------------------------ float weights

/// Widening of 32 weight values starting at column k0 of one row; `part` reads a final run
/// of fewer than 32 through masked loads (nothing past the row).
template <wtype T>
struct widen;

template <>
struct widen<wtype::f32> {
  static void full(const std::uint8_t* row, i64 k0, __m512& lo, __m512& hi) {
    const float* p = reinterpret_cast<const float*>(row) + k0;
    lo = _mm512_loadu_ps(p);
    hi = _mm512_loadu_ps(p + 16);
  }
  static void part(const std::uint8_t* row, i64 k0, __mmask16 m0, __mmask16 m1, __m512& lo, __m512& hi) {
    const float* p = reinterpret_cast<const float*>(row) + k0;
    lo = _mm512_maskz_loadu_ps(m0, p);
    hi = _mm512_maskz_loadu_ps(m1, p + 16);
  }
};

/// bf16: a whole run of 32 as its even values (lo: each 32-bit word's low half, moved up) and
/// its odd values (hi: the high half, the low one masked off) — two operations for 32 values
/// where widening each half in order takes four, so the activations of such a product come
/// in that order (even_odd_order below).
template <>
struct widen<wtype::bf16> {
  static __m512 from(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static void full(const std::uint8_t* row, i64 k0, __m512& lo, __m512& hi) {
    const __m512i w = _mm512_loadu_si512(reinterpret_cast<const std::uint16_t*>(row) + k0);
    lo = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    hi = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(std::int32_t(0xffff0000u))));
  }
  static void part(const std::uint8_t* row, i64 k0, __mmask16 m0, __mmask16 m1, __m512& lo, __m512& hi) {
    const auto* p = reinterpret_cast<const std::uint16_t*>(row) + k0;
    lo = from(_mm256_maskz_loadu_epi16(m0, p));
    hi = from(_mm256_maskz_loadu_epi16(m1, p + 16));
  }
};

template <>
struct widen<wtype::f16> {
  static void full(const std::uint8_t* row, i64 k0, __m512& lo, __m512& hi) {
    const auto* p = reinterpret_cast<const std::uint16_t*>(row) + k0;
    lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    hi = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
  }
  static void part(const std::uint8_t* row, i64 k0, __mmask16 m0, __mmask16 m1, __m512& lo, __m512& hi) {
    const auto* p = reinterpret_cast<const std::uint16_t*>(row) + k0;
    lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, p));
    hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, p + 16));
  }
};

/// The horizontal sums of 16 accumulators, lane L holding the sum of a[L], added in exactly
/// the order of _mm512_reduce_add_ps (lane i + lane i+8, then + 4, then + 2, then + 1), so a
/// full tile's bits are those of its rows alone — in 45 instructions where 16 separate
/// reductions take about 150, which a compute-bound 8-row tile (batched decode) notices.
/// Each level adds the two halves of what the previous one left, two vectors at a time.
inline __m512 reduce16(const __m512* a) {
  // Fed in transposed order: the last level leaves lane 4g + m holding input 4m + g.
  __m512 b[8];
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) {
    const int i0 = 2 * p, i1 = 2 * p + 1;  // inputs in the order the lanes come out
    const __m512 x = a[(i0 % 4) * 4 + i0 / 4], y = a[(i1 % 4) * 4 + i1 / 4];
    // lanes 0-7 of each input + lanes 8-15
    b[p] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512 c[4];
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p)  // + 4: quarters 0 and 2 against 1 and 3
    c[p] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * p], b[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(b[2 * p], b[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  __m512 d[2];
#pragma GCC unroll 2
  for (int p = 0; p < 2; ++p)  // + 2 within each quarter
    d[p] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * p], c[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(c[2 * p], c[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // + 1
  return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/// RT activation rows [r0, r0+RT) times NT weight rows n0, n0 + dn, …: RT·NT accumulators,
/// each weight block widened once and used for all RT rows. The fixed-count loops are
/// unrolled explicitly: at -O2 g++ otherwise keeps acc[][] in memory.
template <wtype T, int RT, int NT>
void float_tile(const float_product& a, i64 r0, i64 n0, i64 dn) {
  const i64 k = a.k;
  __m512 acc[RT][NT];
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
  const std::uint8_t* wr[NT];
#pragma GCC unroll 16
  for (int j = 0; j < NT; ++j) wr[j] = a.w + (n0 + j * dn) * a.w_row_bytes;
  const float* xr = a.x + r0 * k;

  const i64 full = k / 32 * 32;
  // Decode and small batches read the weights once per pass, each weight row a sequential
  // stream that the hardware's prefetch follows: asking for its lines ahead in software held
  // one thread's bf16 decode at 0.81 of the read probe from memory on a Zen 4, 0.96–1.00
  // without (docs/performance.md). Several rows (batched decode, verify passes) ask
  // (batch_ahead), the first row tile only: the later ones find the weight rows in L1.
  constexpr i64 elem = T == wtype::f32 ? 4 : 2;
  const bool ask = a.rows > 1 && r0 == 0;
  for (i64 k0 = 0; k0 < full; k0 += 32) {
    if (ask) {
#pragma GCC unroll 16
      for (int j = 0; j < NT; ++j)
#pragma GCC unroll 2
        for (i64 l = 0; l < 32 * elem; l += 64) _mm_prefetch(reinterpret_cast<const char*>(wr[j] + batch_ahead + k0 * elem + l), _MM_HINT_T0);
    }
    __m512 wl[NT], wh[NT];
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) widen<T>::full(wr[j], k0, wl[j], wh[j]);
#pragma GCC unroll 16
    for (int i = 0; i < RT; ++i) {
      __m512 xl = _mm512_loadu_ps(xr + i * k + k0), xh = _mm512_loadu_ps(xr + i * k + k0 + 16);
      in_register(xl, xh);
#pragma GCC unroll 16
      for (int j = 0; j < NT; ++j) {
        acc[i][j] = _mm512_fmadd_ps(xl, wl[j], acc[i][j]);
        acc[i][j] = _mm512_fmadd_ps(xh, wh[j], acc[i][j]);
      }
    }
  }
  const i64 rem = k - full;
  if (rem > 0) {
    const auto m0 = static_cast<__mmask16>(rem >= 16 ? 0xffff : (1u << rem) - 1);
    const auto m1 = static_cast<__mmask16>(rem > 16 ? (1u << (rem - 16)) - 1 : 0);
    __m512 wl[NT], wh[NT];
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) widen<T>::part(wr[j], full, m0, m1, wl[j], wh[j]);
#pragma GCC unroll 16
    for (int i = 0; i < RT; ++i) {
      const __m512 xl = _mm512_maskz_loadu_ps(m0, xr + i * k + full);
      const __m512 xh = _mm512_maskz_loadu_ps(m1, xr + i * k + full + 16);
#pragma GCC unroll 16
      for (int j = 0; j < NT; ++j) {
        acc[i][j] = _mm512_fmadd_ps(xl, wl[j], acc[i][j]);
        acc[i][j] = _mm512_fmadd_ps(xh, wh[j], acc[i][j]);
      }
    }
  }
  if constexpr (RT * NT == 16) {
    // A full tile's 16 sums in one pass (reduce16): the same additions as 16 reductions.
    alignas(64) float sums[16];
    _mm512_store_ps(sums, reduce16(&acc[0][0]));
#pragma GCC unroll 16
    for (int i = 0; i < RT; ++i)
#pragma GCC unroll 16
      for (int j = 0; j < NT; ++j) {
        float v = sums[i * NT + j];
        if (a.bias) v += a.bias[n0 + j * dn];
        a.y[(r0 + i) * a.n + n0 + j * dn] = v;
      }
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < RT; ++i)
#pragma GCC unroll 16
      for (int j = 0; j < NT; ++j) {
        float v = _mm512_reduce_add_ps(acc[i][j]);
        if (a.bias) v += a.bias[n0 + j * dn];
        a.y[(r0 + i) * a.n + n0 + j * dn] = v;
      }
  }
}

template <wtype T, int NT, int RT>
void float_tile_rows(const float_product& a, int rt, i64 r0, i64 n0, i64 dn) {
  if (rt == RT) float_tile<T, RT, NT>(a, r0, n0, dn);
  else if constexpr (RT > 1) float_tile_rows<T, NT, RT - 1>(a, rt, r0, n0, dn);
}

/// Weight rows n0, n0 + dn, … (NT of them) against every activation row, in tiles of up to
/// 8 rows; the weight rows stay in L1 between tiles. RT·NT ≤ 16 accumulators fit the registers.
template <wtype T, int NT>
void float_columns(const float_product& a, i64 n0, i64 dn) {
  constexpr int RT = 8;
  for (i64 r0 = 0; r0 < a.rows; r0 += RT) float_tile_rows<T, NT, RT>(a, int(min_i64(RT, a.rows - r0)), r0, n0, dn);
}

/// bf16 decode: a run of 32 activations as its 16 even values, then its 16 odd ones (the order
/// widen<bf16>::full gives the weights).
constexpr i64 bf16_run = 32;
inline void order_run(const float* src, float* dst) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 lo = _mm512_loadu_ps(src), hi = _mm512_loadu_ps(src + 16);
  _mm512_storeu_ps(dst, _mm512_permutex2var_ps(lo, even, hi));
  _mm512_storeu_ps(dst + 16, _mm512_permutex2var_ps(lo, odd, hi));
}

#include "backends/cpu/fast/bf16_order.inc"

/// Each thread reads its columns' weights as two sequential streams, a weight row from each
/// half of its range at a time: two independent chains of multiply-adds per activation row,
/// and long reads. On a Zen 4, tiles of adjacent weight rows (as many streams a row apart)
/// drew 11–12 GB/s from memory on one thread where one stream drew 26, a plain read's rate;
/// the two halves' rows took decode from 20 to 21–25 GB/s (38 to 53 in cache) and four batched
/// rows 40 % faster (docs/performance.md). Every tile sums an output in the same order, so
/// the choice never changes a bit.
template <wtype T>
void float_range(const float_product& in, i64 n_begin, i64 n_end) {
  float_product a = in;
  if constexpr (T == wtype::bf16) a.x = even_odd_order(in);
  const i64 half = (n_end - n_begin) / 2;
  for (i64 n0 = n_begin; n0 < n_begin + half; ++n0) float_columns<T, 2>(a, n0, half);
  if ((n_end - n_begin) % 2) float_columns<T, 1>(a, n_end - 1, 1);
}

// ------------------------------------------------------------------ many rows: columns in the lanes

/// A product of float weights with many rows (prefill: more than a batched step or a verify
/// pass stacks, which keep the tiles above and their bits) runs as a blocked matrix product:
/// 32 weight rows at a time are widened to f32 once per call and laid out k-major in a buffer
/// of the thread (a panel: value k of the 32 rows side by side, two registers), and each
/// activation value is broadcast against it, so every multiply-add serves 32 outputs and no
/// sum crosses lanes. Each output adds its products in order of k, in runs of `lane_run`
/// values whose sums are then added in order, so a long row's rounding grows with the run
/// and the number of runs rather than with k.
constexpr int panel_cols = 32;
constexpr i64 lane_run = 64;

#include "backends/cpu/fast/transpose8.inc"

#include "backends/cpu/fast/panels.inc"

#include "backends/cpu/fast/panel_sums512.inc"

template <int RT>
void panel_run(const float_product& a, const float* panel, i64 kb, float* tot, i64 rb, i64 r0, i64 c0, i64 c1) {
  const i64 k = a.k;
  const float* xr = a.x + r0 * k;
  __m512 acc[RT][2];
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (i64 kk = c0; kk < c1; ++kk) {
    const float* pk = panel + (kk - kb) * panel_cols;
    const __m512 w0 = _mm512_loadu_ps(pk), w1 = _mm512_loadu_ps(pk + 16);
#pragma GCC unroll 16
    for (int i = 0; i < RT; ++i) {
      const __m512 xb = _mm512_set1_ps(xr[i * k + kk]);
      acc[i][0] = _mm512_fmadd_ps(xb, w0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(xb, w1, acc[i][1]);
    }
  }
  add_run_sums<RT>(acc, tot, rb, r0, c0 == 0);
}

template <wtype T>
void panel_range(const float_product& a, i64 n_begin, i64 n_end) {
  const panel_scratch s = thread_panels(a);
  panel_blocks<T, 12>(a, n_begin, n_end, s.panel, s.tot, [&](i64 rb, i64 re, i64 n0, int nc) {
    write_panel_rows(s.tot, a.bias, a.y, a.n, rb, re, n0, nc);
  });
}

}  // namespace

void float_lanes_range(const float_product& a, i64 n_begin, i64 n_end) {
  switch (a.type) {
    case wtype::f32: return panel_range<wtype::f32>(a, n_begin, n_end);
    case wtype::bf16: return panel_range<wtype::bf16>(a, n_begin, n_end);
    case wtype::f16: return panel_range<wtype::f16>(a, n_begin, n_end);
    default: return;
  }
}

void float_product_range(const float_product& a, i64 n_begin, i64 n_end) {
  switch (a.type) {
    case wtype::f32: return float_range<wtype::f32>(a, n_begin, n_end);
    case wtype::bf16: return float_range<wtype::bf16>(a, n_begin, n_end);
    case wtype::f16: return float_range<wtype::f16>(a, n_begin, n_end);
    default: return;
  }
}

void quantize_rows(const float* x, i64 k, i64 r_begin, i64 r_end, std::int16_t* q, float* scale, float* sums) {
  const i64 blocks = k / 32;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (i64 r = r_begin; r < r_end; ++r) {
    for (i64 b = 0; b < blocks; ++b) {
      const float* p = x + r * k + b * 32;
      const __m512 v0 = _mm512_loadu_ps(p), v1 = _mm512_loadu_ps(p + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
      const float inv = amax > 0 ? int16_levels / amax : 0.0f;
      // a NaN or infinity makes the block's scale NaN: the caller then takes the float path
      const bool finite = (_mm512_fpclass_ps_mask(v0, 0x99) | _mm512_fpclass_ps_mask(v1, 0x99)) == 0;
      const float s = amax / int16_levels;
      scale[r * blocks + b] = finite ? s : __builtin_nanf("");
      const __m512 iv = _mm512_set1_ps(inv);
      // round to nearest even (the portable path does the same arithmetic)
      const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, iv)), i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, iv));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + r * k + b * 32), _mm512_cvtsepi32_epi16(i0));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + r * k + b * 32 + 16), _mm512_cvtsepi32_epi16(i1));
      // (a block holding NaN or ±∞ converts to out-of-range integers: its sum is not taken)
      if (sums) sums[r * blocks + b] = finite ? s * float(_mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1))) : __builtin_nanf("");
    }
  }
}

#define MPAKT_DOT16(w, x) _mm512_madd_epi16((w), (x))
#include "backends/cpu/fast/int16_avx512_impl.inc"
#undef MPAKT_DOT16

}  // namespace mpakt::cpu_fast::avx512
