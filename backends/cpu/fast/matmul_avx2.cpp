/// Products against a weight stored [N, K] (transB), AVX2 + FMA + F16C: the portable path
/// every x86-64 volunteer since 2013 has. Compiled for that level only: see
/// isa_kernels.hpp for what this file may include.
///
/// The same shape as the AVX-512 kernels at half the width; q8/q4 weights widen to int16
/// and meet the int16 activations in vpmaddwd.

#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/fast/isa_kernels.hpp"

namespace mpakt::cpu_fast::avx2 {

namespace {

#include "backends/cpu/fast/avx2_basics.inc"

inline float bf16_to_float(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

/// A block of 32 activations loaded into v, and its largest magnitude; `finite` false when it
/// holds a NaN or an infinity (its scale is then NaN: the caller takes the float path).
inline float load_block(const float* p, __m256* v, bool& finite) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 mx = _mm256_setzero_ps();
  finite = true;
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(p + 8 * i);
    const __m256 av = _mm256_andnot_ps(sign, v[i]);
    finite = finite && _mm256_movemask_ps(_mm256_cmp_ps(av, _mm256_set1_ps(3.4028235e38f), _CMP_NLE_UQ)) == 0;
    mx = _mm256_max_ps(mx, av);
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  return _mm_cvtss_f32(m4);
}

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// ------------------------------------------------------------------ float weights

template <wtype T>
struct widen;

template <>
struct widen<wtype::f32> {
  static __m256 load8(const std::uint8_t* row, i64 k0) { return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k0); }
  static float one(const std::uint8_t* row, i64 i) { return reinterpret_cast<const float*>(row)[i]; }
};

/// bf16 in the decode tiles: a run of 16 as its even values (h = 0: each 32-bit word's low
/// half, moved up) and then its odd values (h = 1: the high half, the low one masked off) —
/// one operation per eight values where widening in order takes two, so the activations of
/// such a product come in that order (even_odd_order below).
template <>
struct widen<wtype::bf16> {
  static __m256 half16(const std::uint8_t* row, i64 k0, int h) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const std::uint16_t*>(row) + k0));
    return _mm256_castsi256_ps(h == 0 ? _mm256_slli_epi32(w, 16) : _mm256_and_si256(w, _mm256_set1_epi32(std::int32_t(0xffff0000u))));
  }
  static float one(const std::uint8_t* row, i64 i) { return bf16_to_float(reinterpret_cast<const std::uint16_t*>(row)[i]); }
};

template <>
struct widen<wtype::f16> {
  static __m256 load8(const std::uint8_t* row, i64 k0) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const std::uint16_t*>(row) + k0)));
  }
  static float one(const std::uint8_t* row, i64 i) { return half_to_float(reinterpret_cast<const std::uint16_t*>(row)[i]); }
};

/// Sixteen values of k of the batched bf16 tile (four activation rows × three weight rows):
/// the steps of float_tile below, with the registers named. Its twelve sums, three widened
/// weights and one activation fill AVX2's sixteen registers; compiled from intrinsics, GCC
/// kept one sum in memory (a chain through a store and a load each step) and folded some
/// activation loads into the multiply-adds, which held the tile to half its rate on a Zen 3.
/// The odd values' mask is read from memory for the same reason. The same operations in the
/// same order as the intrinsics: the same bits.
alignas(32) constexpr std::uint32_t bf16_odd_mask[8] = {0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u,
                                                          0xffff0000u, 0xffff0000u, 0xffff0000u, 0xffff0000u};

/// `w`: the first weight row's sixteen values, the others `ws` bytes apart; `x`: the first
/// activation row's, the others `xs` bytes apart (operands are few: GCC allows thirty, and
/// each sum counts twice).
inline void bf16_tile_4x3_step(__m256 (&acc)[4][3], const std::uint8_t* w, i64 ws, const float* x, i64 xs) {
  const float* x3 = reinterpret_cast<const float*>(reinterpret_cast<const char*>(x) + 3 * xs);
// the three weight rows' sixteen bf16 values, then eight values of k of the four activation
// rows (`o`: their byte offset) against the widened weights
#define MPAKT_LOAD_W                      \
  "vmovdqu (%[w]), %%ymm12\n\t"           \
  "vmovdqu (%[w],%[ws],1), %%ymm13\n\t"   \
  "vmovdqu (%[w],%[ws],2), %%ymm14\n\t"
#define MPAKT_ROW(x, a, b, c)                  \
  "vmovups " x ", %%ymm15\n\t"                 \
  "vfmadd231ps %%ymm12, %%ymm15, " a "\n\t"    \
  "vfmadd231ps %%ymm13, %%ymm15, " b "\n\t"    \
  "vfmadd231ps %%ymm14, %%ymm15, " c "\n\t"
#define MPAKT_ROWS(o)                                               \
  MPAKT_ROW(o "(%[x])", "%[a00]", "%[a01]", "%[a02]")               \
  MPAKT_ROW(o "(%[x],%[xs],1)", "%[a10]", "%[a11]", "%[a12]")       \
  MPAKT_ROW(o "(%[x],%[xs],2)", "%[a20]", "%[a21]", "%[a22]")       \
  MPAKT_ROW(o "(%[x3])", "%[a30]", "%[a31]", "%[a32]")
  asm(MPAKT_LOAD_W  // the even values: each word's low half moved up
      "vpslld $16, %%ymm12, %%ymm12\n\t"
      "vpslld $16, %%ymm13, %%ymm13\n\t"
      "vpslld $16, %%ymm14, %%ymm14\n\t"
      MPAKT_ROWS("")
      MPAKT_LOAD_W  // the odd values: each word's high half, the low one masked off
      "vpand %[mask], %%ymm12, %%ymm12\n\t"
      "vpand %[mask], %%ymm13, %%ymm13\n\t"
      "vpand %[mask], %%ymm14, %%ymm14\n\t"
      MPAKT_ROWS("32")
      : [a00] "+x"(acc[0][0]), [a01] "+x"(acc[0][1]), [a02] "+x"(acc[0][2]), [a10] "+x"(acc[1][0]),
        [a11] "+x"(acc[1][1]), [a12] "+x"(acc[1][2]), [a20] "+x"(acc[2][0]), [a21] "+x"(acc[2][1]),
        [a22] "+x"(acc[2][2]), [a30] "+x"(acc[3][0]), [a31] "+x"(acc[3][1]), [a32] "+x"(acc[3][2])
      : [w] "r"(w), [ws] "r"(ws), [x] "r"(x), [xs] "r"(xs), [x3] "r"(x3),
        [mask] "m"(*reinterpret_cast<const __m256i*>(bf16_odd_mask))
      : "xmm12", "xmm13", "xmm14", "xmm15", "memory");
#undef MPAKT_ROWS
#undef MPAKT_ROW
#undef MPAKT_LOAD_W
}

/// RT rows × NT weight rows, 16 values of K per step, taken eight at a time. Not inlined:
/// inside the column loops the k loop's pointers and counter lived on the stack (eleven
/// scalar loads and stores a step beside the 4 × 3 tile's 24 multiply-adds); alone it holds
/// them in registers, and that tile ran 1.2× as fast in cache on a Zen 3 (one row: the same).
template <wtype T, int RT, int NT>
__attribute__((noinline)) void float_tile(const float_product& a, i64 r0, i64 n0, i64 dn) {
  const i64 k = a.k;
  __m256 acc[RT][NT];
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_setzero_ps();
  const std::uint8_t* wr[NT];
#pragma GCC unroll 16
  for (int j = 0; j < NT; ++j) wr[j] = a.w + (n0 + j * dn) * a.w_row_bytes;
  const float* xr = a.x + r0 * k;
  const i64 full = k / 16 * 16;
  // Small batches read the weights once per pass: the weight rows ahead (contiguous) are
  // asked for, a line per row every 64 bytes, while these are used — a one-column tile
  // stream_ahead on, a wider one two tiles on. A one-row product (decode) is left to the
  // hardware's stream prefetch: asking in software held it to 0.77–0.88 of the read probe
  // where it reads at 0.94–1.07 without (bf16 [1536, 576], one thread, Zen 4 at avx2).
  constexpr i64 elem = T == wtype::f32 ? 4 : 2;
  const i64 ahead = NT == 1 || dn > 1 ? stream_ahead : 2 * NT * a.w_row_bytes;
  for (i64 k0 = 0; k0 < full; k0 += 16) {
    if (a.rows > 1 && r0 == 0) {  // (the first row tile: the later ones find the weights in L1)
      if ((k0 * elem) % 64 == 0) {
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) _mm_prefetch(reinterpret_cast<const char*>(wr[j] + ahead + k0 * elem), _MM_HINT_T0);
      }
    }
    if constexpr (T == wtype::bf16 && RT == 4 && NT == 3) {
      bf16_tile_4x3_step(acc, wr[0] + k0 * elem, dn * a.w_row_bytes, xr + k0, k * i64(sizeof(float)));
      continue;
    }
    // Eight values of K at a time: NT weight registers, then one activation register per
    // row, so a 4 × 3 tile's twelve sums stay in registers (sixteen in all).
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256 wv[NT];
#pragma GCC unroll 16
      for (int j = 0; j < NT; ++j) {
        if constexpr (T == wtype::bf16) wv[j] = widen<T>::half16(wr[j], k0, h);
        else wv[j] = widen<T>::load8(wr[j], k0 + 8 * h);
      }
#pragma GCC unroll 16
      for (int i = 0; i < RT; ++i) {
        const __m256 xv = _mm256_loadu_ps(xr + i * k + k0 + 8 * h);
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) {
      float v = hsum(acc[i][j]);
      for (i64 c = full; c < k; ++c) v += xr[i * k + c] * widen<T>::one(wr[j], c);
      if (a.bias) v += a.bias[n0 + j * dn];
      a.y[(r0 + i) * a.n + n0 + j * dn] = v;
    }
}

template <wtype T, int NT, int RT>
void float_tile_rows(const float_product& a, int rt, i64 r0, i64 n0, i64 dn) {
  if (rt == RT) float_tile<T, RT, NT>(a, r0, n0, dn);
  else if constexpr (RT > 1) float_tile_rows<T, NT, RT - 1>(a, rt, r0, n0, dn);
}

/// Weight rows n0, n0 + dn, … (NT of them) against every activation row.
template <wtype T, int NT>
void float_columns(const float_product& a, i64 n0, i64 dn) {
  // (NT 4: one-row decode; NT 2: two or three rows; NT 1: the columns left over)
  constexpr int RT = NT == 3 ? 4 : NT == 2 ? 3 : NT == 4 ? 1 : 6;
  for (i64 r0 = 0; r0 < a.rows; r0 += RT) float_tile_rows<T, NT, RT>(a, int(min_i64(RT, a.rows - r0)), r0, n0, dn);
}

/// bf16 decode: a run of 16 activations as its 8 even values, then its 8 odd ones (the order
/// widen<bf16>::half16 gives the weights).
constexpr i64 bf16_run = 16;
inline void order_run(const float* src, float* dst) {
  // each half's even values in its low four lanes and its odd ones in the high four
  const __m256i gather = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(src), gather);
  const __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(src + 8), gather);
  _mm256_storeu_ps(dst, _mm256_permute2f128_ps(lo, hi, 0x20));
  _mm256_storeu_ps(dst + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}

#include "backends/cpu/fast/bf16_order.inc"

/// Decode (one row) reads each thread's columns as four sequential streams, a weight row from
/// each quarter of its range at a time; two and three rows, two streams (halves). Four
/// adjacent rows a tile (four streams 1–3 KB apart) drew a tenth to a fifth less bandwidth on
/// a Zen 3, and one row at a time leaves a single chain of dependent multiply-adds (eight
/// values of k per four cycles' latency), which bounds a thread below its memory's rate on a
/// Zen 4. Two chains still bound a Zen 1 core (multiply-adds of five cycles' latency, 256-bit
/// operations as two halves): four long streams decoded the SmolLM2 shape 1.35× faster on
/// one thread, 1.2× on two, than two. Batched and verify steps take three adjacent
/// weight rows against four activation rows, the widest tile whose sums, weights and one
/// activation fit AVX2's sixteen registers. Every tile sums each output in the same order, so
/// the shape of the tile never changes a bit.
template <wtype T>
void float_range(const float_product& in, i64 n_begin, i64 n_end) {
  float_product a = in;
  if constexpr (T == wtype::bf16) a.x = even_odd_order(in);
  i64 n0 = n_begin;
  if (a.rows > 3) {
    for (; n0 + 3 <= n_end; n0 += 3) float_columns<T, 3>(a, n0, 1);
  } else if (a.rows > 1) {
    const i64 half = (n_end - n_begin) / 2;
    for (; n0 < n_begin + half; ++n0) float_columns<T, 2>(a, n0, half);
    n0 = n_begin + 2 * half;
  } else {
    const i64 quarter = (n_end - n_begin) / 4;
    for (; n0 < n_begin + quarter; ++n0) float_columns<T, 4>(a, n0, quarter);
    n0 = n_begin + 4 * quarter;
  }
  for (; n0 < n_end; ++n0) float_columns<T, 1>(a, n0, 1);
}

// ------------------------------------------------------------------ q8/q4 weights

/// A weight block as two registers of 16 int16: q8 sign-extended, values 0–15 and 16–31;
/// q4 its low nibbles (the block's even values) and its high nibbles (the odd values) — the
/// activations of a q4 product are reordered to match (int_range).
template <wtype T>
inline void load_w(const std::uint8_t* blk, __m256i& lo, __m256i& hi) {
  if constexpr (T == wtype::q8) {
    lo = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
    hi = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18)));
  } else {
    // each byte widened once: its low nibble is the low four bits of the int16, its high
    // nibble what a shift by four leaves (the upper byte is zero)
    const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4)));
    lo = _mm256_and_si256(b, _mm256_set1_epi16(0x0f));
    hi = _mm256_srli_epi16(b, 4);
  }
}

/// One tile of an integer product: activation rows [r0, r0 + RT) against weight rows
/// [n0, n0 + NT), a weight block at a time. Each output keeps eight lanes of Σ dot·d·s in
/// block order (one multiply-add per block) and, for q4, the offsets' Σ m·Σq·s in lane 1 of
/// a four-lane sum; the lanes are added at the end. Every tile shape does the same operations
/// per output in the same order, so a row has the same bits alone, batched or verified.
///
/// A block's scale is widened from its first four bytes and multiplied by the activations'
/// scale before one broadcast. q4 takes its activations' scale and Σq·scale of a block as one
/// pair (`pairs`, made by with_q4_order): the block's f16 scale and offset are widened
/// together and one multiply gives both terms' factors — two instructions fewer a block than
/// a broadcast of each, and no scalar chain of offsets.
template <wtype T, int RT, int NT>
void int_tile(const int_product& a, const float* pairs, i64 r0, i64 n0, i64 dn) {
  const i64 k = a.x.k, blocks = k / 32;
  __m256 acc[RT][NT];
  __m128 mins[RT][NT];  ///< q4: lane 1 holds Σ over blocks of the offset × the activations' Σq·scale
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) {
      acc[i][j] = _mm256_setzero_ps();
      mins[i][j] = _mm_setzero_ps();
    }
  const std::uint8_t* wr[NT];
#pragma GCC unroll 16
  for (int j = 0; j < NT; ++j) wr[j] = a.w + (n0 + j * dn) * a.w_row_bytes;
  constexpr i64 bb = T == wtype::q8 ? q8_bytes : q4_bytes;
  const auto block = [&](i64 b) __attribute__((always_inline)) {
    __m256i wl[NT], wh[NT];
    __m128 dm[NT];
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) {
      const std::uint8_t* blk = wr[j] + b * bb;
      load_w<T>(blk, wl[j], wh[j]);
      // the block's first four bytes widened: q4 (d, m, 0, 0); q8 d in lane 0 (lane 1 holds
      // its first two values read as an f16, never used)
      std::int32_t dm_bits;
      __builtin_memcpy(&dm_bits, blk, 4);
      dm[j] = _mm_cvtph_ps(_mm_cvtsi32_si128(dm_bits));
    }
#pragma GCC unroll 16
    for (int i = 0; i < RT; ++i) {
      const i64 r = r0 + i;
      const std::int16_t* xr = a.x.q + r * k + b * 32;
      const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr));
      const __m256i xh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + 16));
      if constexpr (T == wtype::q4) {
        // (s, Σq·s) of this block and the next; × (d, m, 0, 0) = (d·s, m·Σq·s, 0, 0)
        const __m128 sm = _mm_loadu_ps(pairs + (r * blocks + b) * 2);
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) {
          const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(wl[j], xl), _mm256_madd_epi16(wh[j], xh));
          const __m128 f = _mm_mul_ps(dm[j], sm);
          mins[i][j] = _mm_add_ps(mins[i][j], f);
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_broadcastss_ps(f), acc[i][j]);
        }
      } else {
        const __m128 xs = _mm_load_ss(a.x.scale + r * blocks + b);
#pragma GCC unroll 16
        for (int j = 0; j < NT; ++j) {
          const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(wl[j], xl), _mm256_madd_epi16(wh[j], xh));
          const __m128 f = _mm_mul_ss(dm[j], xs);
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_broadcastss_ps(f), acc[i][j]);
        }
      }
    }
  };
  // As in the float tiles: the weight rows ahead are asked for while these are used (decode
  // waits on memory otherwise: the loads of the weight blocks took most of the time). A q4
  // block is 20 bytes: one request per three (60 bytes apart) still asks for every line.
  constexpr i64 per_prefetch = T == wtype::q4 ? 3 : 1;
  const i64 ahead = NT == 1 || dn > 1 ? stream_ahead : 2 * NT * a.w_row_bytes;
  i64 b = 0;
  if (r0 == 0)
    for (; b + per_prefetch <= blocks; b += per_prefetch) {
#pragma GCC unroll 16
      for (int j = 0; j < NT; ++j) _mm_prefetch(reinterpret_cast<const char*>(wr[j] + ahead + b * bb), _MM_HINT_T0);
#pragma GCC unroll 4
      for (i64 u = 0; u < per_prefetch; ++u) block(b + u);
    }
  for (; b < blocks; ++b) block(b);
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) {
      float v = hsum(acc[i][j]);
      if constexpr (T == wtype::q4) v += _mm_cvtss_f32(_mm_movehdup_ps(mins[i][j]));
      if (a.bias) v += a.bias[n0 + j * dn];
      a.y[(r0 + i) * a.n + n0 + j * dn] = v;
    }
}

template <wtype T, int NT, int RT>
void int_tile_rows(const int_product& a, const float* pairs, int rt, i64 r0, i64 n0, i64 dn) {
  if (rt == RT) int_tile<T, RT, NT>(a, pairs, r0, n0, dn);
  else if constexpr (RT > 1) int_tile_rows<T, NT, RT - 1>(a, pairs, rt, r0, n0, dn);
}

/// Columns outer, rows inner: a pair of weight rows is read from memory once (the first row
/// tile prefetches it) and found in L1 by every later row tile of a batched or verify step.
template <wtype T, int NT>
void int_columns(const int_product& a, const float* pairs, i64 n0, i64 dn) {
  constexpr int RT = 2;
  for (i64 r0 = 0; r0 < a.x.rows; r0 += RT) int_tile_rows<T, NT, RT>(a, pairs, int(min_i64(RT, a.x.rows - r0)), r0, n0, dn);
}

/// Decode (up to 3 rows) two weight rows at a time, one from each half of the range, as
/// float_range; more rows two adjacent ones at a time.
template <wtype T>
void int_range(const int_product& a, const float* pairs, i64 n_begin, i64 n_end) {
  i64 n0 = n_begin;
  if (a.x.rows > 3) {
    for (; n0 + 2 <= n_end; n0 += 2) int_columns<T, 2>(a, pairs, n0, 1);
  } else {
    const i64 half = (n_end - n_begin) / 2;
    for (; n0 < n_begin + half; ++n0) int_columns<T, 2>(a, pairs, n0, half);
    n0 = n_begin + 2 * half;
  }
  for (; n0 < n_end; ++n0) int_columns<T, 1>(a, pairs, n0, 1);
}

/// The activations of a q4 product, each block reordered as its even values then its odd
/// ones (load_w's order for q4), into a scratch buffer of the calling thread: rows × K values,
/// a small cost next to the product's N × K weights. `pairs` gets each block's scale and
/// Σq·scale side by side (int_tile), and four zeros after the last block's pair: the tile
/// reads a block's pair with the next one's.
int_product with_q4_order(const int_product& a, const float*& pairs) {
  const i64 total = a.x.rows * a.x.k, n_blocks = total / 32;
  auto* sm = static_cast<float*>(kernel_scratch(scratch_slot::scale_pairs, std::size_t(n_blocks * 2 + 4) * 4));
  for (i64 i = 0; i < n_blocks; ++i) {
    sm[2 * i] = a.x.scale[i];
    sm[2 * i + 1] = a.x.sums[i];
  }
  for (int i = 0; i < 4; ++i) sm[n_blocks * 2 + i] = 0.0f;
  pairs = sm;
  auto* buf = static_cast<std::int16_t*>(kernel_scratch(scratch_slot::reordered_activations, std::size_t(total) * 2));
  // within each 128-bit lane the even values to its low half, the odd to its high; then the
  // halves of the two registers gathered
  const __m256i pick = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,  //
                                        0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  for (i64 o = 0; o < total; o += 32) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.x.q + o));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.x.q + o + 16));
    // [evens of v0 | odds of v0], [evens of v1 | odds of v1]
    const __m256i s0 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v0, pick), 0xd8);
    const __m256i s1 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v1, pick), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(buf + o), _mm256_permute2x128_si256(s0, s1, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(buf + o + 16), _mm256_permute2x128_si256(s0, s1, 0x31));
  }
  int_product p = a;
  p.x.q = buf;
  return p;
}

// ------------------------------------------------------------------ q8/q4 in lanes (int_lanes_avx2.inc)

/// The lanes kernels' dot steps on plain AVX2 (int_lanes_avx2.inc says what each does).
inline __m256i dot_pairs(__m256i acc, __m256i w, __m256i p) { return _mm256_add_epi32(acc, _mm256_madd_epi16(w, p)); }
inline __m256i dot_bytes(__m256i acc, __m256i u, __m256i s) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
constexpr bool byte_dots = false;

}  // namespace

#include "backends/cpu/fast/int_lanes_avx2.inc"

namespace {

// ------------------------------------------------------------------ many rows of float weights: columns in the lanes

/// As the AVX-512 level's panels (matmul_avx512.cpp): a float product with many rows (prefill)
/// widens 24 weight rows at a time to f32 once per call, k-major in a buffer of the thread,
/// and broadcasts each activation value against them; each output adds its products in order
/// of k in runs of `lane_run`, the runs' sums added in order (kept in memory between runs).
/// Four rows by three vectors of sums: twelve sums, three weight vectors and the broadcast
/// fill the sixteen registers, and each step loads seven vectors for twelve multiply-adds
/// (six rows by two loaded eight for twelve, and ran 10–25 % slower on a Zen 3). The same
/// additions as AVX-512's: the same bits.
constexpr int panel_cols = 24;
constexpr i64 lane_run = 64;

#include "backends/cpu/fast/panels.inc"

template <int RT>
void panel_run(const float_product& a, const float* panel, i64 kb, float* tot, i64 rb, i64 r0, i64 c0, i64 c1) {
  constexpr int NV = panel_cols / 8;
  const i64 k = a.k;
  const float* xr = a.x + r0 * k;
  __m256 acc[RT][NV];
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm256_setzero_ps();
  for (i64 kk = c0; kk < c1; ++kk) {
    const float* pk = panel + (kk - kb) * panel_cols;
    __m256 w[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) w[j] = _mm256_loadu_ps(pk + 8 * j);
#pragma GCC unroll 16
    for (int i = 0; i < RT; ++i) {
      const __m256 xb = _mm256_broadcast_ss(xr + i * k + kk);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm256_fmadd_ps(xb, w[j], acc[i][j]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i) {
    float* t = tot + (r0 + i - rb) * panel_cols;
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j)
      _mm256_storeu_ps(t + 8 * j, c0 == 0 ? acc[i][j] : _mm256_add_ps(_mm256_loadu_ps(t + 8 * j), acc[i][j]));
  }
}

template <wtype T>
void panel_range(const float_product& a, i64 n_begin, i64 n_end) {
  const panel_scratch s = thread_panels(a);
  panel_blocks<T, 4>(a, n_begin, n_end, s.panel, s.tot, [&](i64 rb, i64 re, i64 n0, int nc) {
    if (nc < panel_cols) {
      for (i64 r = rb; r < re; ++r) {
        float* out = a.y + r * a.n + n0;
        const float* t = s.tot + (r - rb) * panel_cols;
        for (int c = 0; c < nc; ++c) out[c] = a.bias ? t[c] + a.bias[n0 + c] : t[c];
      }
      return;
    }
    // a whole panel: three stores a row (a store per value left the store buffer full of
    // writes to lines not yet in the cache)
    __m256 b[panel_cols / 8];
    for (int j = 0; j < panel_cols / 8; ++j) b[j] = a.bias ? _mm256_loadu_ps(a.bias + n0 + 8 * j) : _mm256_setzero_ps();
    for (i64 r = rb; r < re; ++r) {
      float* out = a.y + r * a.n + n0;
      const float* t = s.tot + (r - rb) * panel_cols;
#pragma GCC unroll 4
      for (int j = 0; j < panel_cols / 8; ++j) {
        __m256 v = _mm256_loadu_ps(t + 8 * j);
        if (a.bias) v = _mm256_add_ps(v, b[j]);
        _mm256_storeu_ps(out + 8 * j, v);
      }
    }
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
  for (i64 r = r_begin; r < r_end; ++r) {
    for (i64 b = 0; b < blocks; ++b) {
      __m256 v[4];
      bool finite;
      const float amax = load_block(x + r * k + b * 32, v, finite);
      const float inv = amax > 0 ? int16_levels / amax : 0.0f;
      const float s = amax / int16_levels;
      scale[r * blocks + b] = finite ? s : __builtin_nanf("");
      const __m256 iv = _mm256_set1_ps(inv);
      alignas(32) std::int32_t ints[32];
      for (int i = 0; i < 4; ++i)
        _mm256_store_si256(reinterpret_cast<__m256i*>(ints + 8 * i), _mm256_cvtps_epi32(_mm256_mul_ps(v[i], iv)));
      std::int16_t* out = q + r * k + b * 32;
      std::int32_t total = 0;
      for (int i = 0; i < 32; ++i) {
        const std::int32_t c = ints[i] > 32767 ? 32767 : ints[i] < -32768 ? -32768 : ints[i];
        out[i] = std::int16_t(c);
        total += c;
      }
      if (sums) sums[r * blocks + b] = s * float(total);
    }
  }
}

void int_product_range(const int_product& a, i64 n_begin, i64 n_end) {
  if (a.type == wtype::q8) {
    int_range<wtype::q8>(a, nullptr, n_begin, n_end);
  } else {
    const float* pairs = nullptr;
    const int_product p = with_q4_order(a, pairs);
    int_range<wtype::q4>(p, pairs, n_begin, n_end);
  }
}

void int8_quantize_rows(const float* x, i64 k, i64 r_begin, i64 r_end, std::int8_t* q, float* scale, float* sums,
                        std::int32_t* qsums) {
  const i64 blocks = k / 32;
  for (i64 r = r_begin; r < r_end; ++r) {
    for (i64 b = 0; b < blocks; ++b) {
      __m256 v[4];
      bool finite;
      const float amax = load_block(x + r * k + b * 32, v, finite);
      const __m256 iv = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
      const float s = amax / 127.0f;
      scale[r * blocks + b] = finite ? s : __builtin_nanf("");
      __m256i iq[4];
      for (int i = 0; i < 4; ++i) iq[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], iv));
      // int32 → int16 → int8 with saturation; the packs interleave the 128-bit lanes, undone
      // by one permute
      const __m256i w16a = _mm256_packs_epi32(iq[0], iq[1]), w16b = _mm256_packs_epi32(iq[2], iq[3]);
      const __m256i w8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w16a, w16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + r * k + b * 32), w8);
      if (sums || qsums) {
        // (iq holds the stored int8 values: |x|·127/max|x| rounds to at most 127)
        const __m256i t = _mm256_add_epi32(_mm256_add_epi32(iq[0], iq[1]), _mm256_add_epi32(iq[2], iq[3]));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        const std::int32_t total = _mm_cvtsi128_si32(h);
        if (sums) sums[r * blocks + b] = s * float(total);
        if (qsums) qsums[r * blocks + b] = total;
      }
    }
  }
}

void held_pairs(const std::int16_t* q, i64 n, std::int32_t* out) {
  for (i64 o = 0; o < n; o += 16) {
    // per 128-bit lane (eight values of one run): values 0–3 with values 4–7
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + o));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + o / 2), _mm256_unpacklo_epi16(v, _mm256_srli_si256(v, 8)));
  }
}

void round_to_bf16(const float* x, i64 rows, i64 k, float* out, bool panel_order) {
  // u + 0x7fff + (bit 16 of u), the low half cleared: nearest even; a NaN keeps its high half,
  // made quiet
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), infinity = _mm256_set1_epi32(0x7f800000);
  const __m256i half = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), quiet = _mm256_set1_epi32(0x400000);
  const __m256i high = _mm256_set1_epi32(int(0xffff0000u));
  auto round8 = [&](__m256i u) {
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, magnitude), infinity);
    const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(half, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
    return _mm256_and_si256(_mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), nan), high);
  };
  for (i64 r = 0; r < rows; ++r) {
    const float* xr = x + r * k;
    float* o = out + r * k;
    i64 i = 0;
    for (; i + 8 <= k; i += 8) {
      __m256i v = round8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr + i)));
      if (panel_order) v = _mm256_castps_si256(_mm256_permute_ps(_mm256_castsi256_ps(v), 0xb1));  // (pairs swapped)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), v);
    }
    if (i == k) continue;
    alignas(32) float tmp[8] = {};
    __builtin_memcpy(tmp, xr + i, std::size_t(k - i) * 4);
    _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), round8(_mm256_load_si256(reinterpret_cast<const __m256i*>(tmp))));
    for (i64 j = 0; j < k - i; ++j)  // (i is even: a value's partner is j ^ 1, when there is one)
      o[i + j] = tmp[panel_order && (j ^ 1) < k - i ? j ^ 1 : j];
  }
}

}  // namespace mpakt::cpu_fast::avx2
