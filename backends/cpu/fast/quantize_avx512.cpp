// Quantize-on-load kernels for AVX-512 (F/BW/VL/DQ, with F16C for the scales). Each block of
// 32 values gives the reference's bytes — the scale from the block's extreme values divided
// by 127 (q8) or 15 (q4), rounded to f16 by F16C (nearest even, as f32_to_f16 does for finite
// values), each value divided by the widened scale, rounded half away from zero without
// std::round (t = trunc(v); v − t is exact at these magnitudes; one is added away from zero
// when |v − t| ≥ 0.5), clamped and packed. As on AVX2 (quantize_avx2.cpp), eight blocks'
// scales are found together, and each value's division is a product with the scale's
// reciprocal where that cannot change the result (quantize_blocks.inc); a block with a value
// near a rounding boundary is divided again.

// GCC 12's AVX-512 headers start many intrinsics from a self-initialised "undefined" vector,
// which -Wmaybe-uninitialized reports wherever they are inlined here (a false alarm).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "backends/cpu/fast/quantize_kernels.hpp"

namespace mpakt::cpu_fast {

namespace {

#include "backends/cpu/fast/quantize_blocks.inc"

/// Lanes of `a` or `b` that are NaN or ±∞.
inline __mmask16 non_finite(__m512 a, __m512 b) {
  constexpr int nan_or_inf = 0x01 | 0x08 | 0x10 | 0x80;  // QNaN, +∞, −∞, SNaN
  return _mm512_fpclass_ps_mask(a, nan_or_inf) | _mm512_fpclass_ps_mask(b, nan_or_inf);
}

/// round half away from zero of v (finite, |v| < 2^23), exactly as std::round.
inline __m512 round_away(__m512 v) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_andnot_ps(sign, _mm512_sub_ps(v, t));
  const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one_away = _mm512_or_ps(_mm512_and_ps(v, sign), _mm512_set1_ps(1.0f));
  return _mm512_mask_add_ps(t, up, t, one_away);
}

/// round_away(x[k] / d) for a block's two registers: the products with `inv` (1/d) rounded to
/// nearest where none lies within 2^−14 of k + ½, else both divided as the reference does.
inline void rounded_quotients(const __m512* x, float inv, float d, __m512* r) {
  const __m512 sign = _mm512_set1_ps(-0.0f), iv = _mm512_set1_ps(inv);
  const __m512 v0 = _mm512_mul_ps(x[0], iv), v1 = _mm512_mul_ps(x[1], iv);
  r[0] = _mm512_roundscale_ps(v0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r[1] = _mm512_roundscale_ps(v1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 off = _mm512_max_ps(_mm512_andnot_ps(sign, _mm512_sub_ps(v0, r[0])), _mm512_andnot_ps(sign, _mm512_sub_ps(v1, r[1])));
  if (_mm512_cmp_ps_mask(off, _mm512_set1_ps(0.5f - 0x1p-14f), _CMP_GT_OQ) != 0) {
    const __m512 dv = _mm512_set1_ps(d);
    r[0] = round_away(_mm512_div_ps(x[0], dv));
    r[1] = round_away(_mm512_div_ps(x[1], dv));
  }
}

/// A block's 32 bf16 words widened by interleaving with zeros: values 0–3 | 8–11 | 16–19 |
/// 24–27 in x[0], the other four of each eight in x[1] — the order the packs below undo.
inline void widen_block(const std::uint16_t* p, __m512* x) {
  const __m512i w = _mm512_loadu_si512(p), zero = _mm512_setzero_si512();
  x[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w));
  x[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w));
}

/// Whole numbers of a block in widen_block's order → the 32 values as 16-bit words in order.
inline __m512i words_in_order(const __m512* r) { return _mm512_packs_epi32(_mm512_cvttps_epi32(r[0]), _mm512_cvttps_epi32(r[1])); }

/// The per-lane extremes of a block's 32 lanes folded to eight.
inline __m128i fold_max_epu16(__m512i a) {
  const __m256i h = _mm256_max_epu16(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
  return _mm_max_epu16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
inline __m128i fold_min_epi16(__m512i a) {
  const __m256i h = _mm256_min_epi16(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
  return _mm_min_epi16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
inline __m128i fold_max_epi16(__m512i a) {
  const __m256i h = _mm256_max_epi16(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
  return _mm_max_epi16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/// q8 from bf16 words (checkpoints are published in bf16), as quantize_avx2.cpp's: each
/// block's largest magnitude found on the words (magnitude bits order as integers; any above
/// 0x7f7f is NaN or ±∞), eight blocks reduced together; products with the scale's reciprocal.
bool quantize_q8_bf16_avx512(const std::uint16_t* src, std::uint8_t* dst, std::int64_t blocks) {
  const __m512i magnitude = _mm512_set1_epi16(0x7fff);
  const __m256i lowest = _mm256_set1_epi8(-127);
  for (std::int64_t b = 0; b < blocks; b += 8) {
    const int count = int(std::min<std::int64_t>(8, blocks - b));
    const std::uint16_t* p = src + b * 32;
    const auto maxima = [&](int i) { return fold_max_epu16(_mm512_and_si512(_mm512_loadu_si512(p + 32 * i), magnitude)); };
    block_scales sc;
    if (!q8_scales_of(count, maxima, sc)) return false;
    for (int i = 0; i < count; ++i) {
      std::uint8_t* blk = dst + (b + i) * 34;
      if (!sc.start_q8(i, blk)) continue;
      __m512 x[2], r[2];
      widen_block(p + 32 * i, x);
      rounded_quotients(x, sc.inv[i], sc.d[i], r);
      // |quotient| < 2^8, so the narrowings saturate only past ±127: the lower end is −127
      const __m256i bytes = _mm256_max_epi8(_mm512_cvtsepi16_epi8(words_in_order(r)), lowest);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk + 2), bytes);
    }
  }
  return true;
}

/// Byte j of a q4 block = value 2j | value 2j+1 << 4, from the values (0–15) as words in order.
inline __m128i q4_nibbles(__m512i words) { return _mm512_cvtepi32_epi8(_mm512_or_si512(words, _mm512_srli_epi32(words, 12))); }

/// order_key (quantize_blocks.inc) of 32 words: negative values' magnitude bits flipped, so
/// that the keys order as the values do. The same steps turn a key back into its word.
inline __m512i order_key(__m512i w) { return _mm512_xor_si512(w, _mm512_and_si512(_mm512_srai_epi16(w, 15), _mm512_set1_epi16(0x7fff))); }

/// q4 from bf16 words: each block's extremes found on order keys (a key past +FLT_MAX's or
/// below −FLT_MAX's is NaN or ±∞), eight blocks reduced together; products with the scale's
/// reciprocal.
bool quantize_q4_bf16_avx512(const std::uint16_t* src, std::uint8_t* dst, std::int64_t blocks) {
  const __m512 zero = _mm512_setzero_ps(), fifteen = _mm512_set1_ps(15.0f);
  for (std::int64_t b = 0; b < blocks; b += 8) {
    const int count = int(std::min<std::int64_t>(8, blocks - b));
    const std::uint16_t* p = src + b * 32;
    const auto extremes = [&](int i, __m128i& lo_k, __m128i& hi_k) {
      const __m512i w = _mm512_loadu_si512(p + 32 * i);
      const __m512i key = order_key(w);
      lo_k = fold_min_epi16(key);
      hi_k = fold_max_epi16(key);
    };
    block_scales sc;
    if (!q4_scales_of(count, extremes, sc)) return false;
    for (int i = 0; i < count; ++i) {
      std::uint8_t* blk = dst + (b + i) * 20;
      if (!sc.start_q4(i, blk)) continue;
      __m512 x[2], r[2];
      widen_block(p + 32 * i, x);
      const __m512 mv = _mm512_set1_ps(sc.m[i]);
      x[0] = _mm512_sub_ps(x[0], mv);
      x[1] = _mm512_sub_ps(x[1], mv);
      rounded_quotients(x, sc.inv[i], sc.d[i], r);
      for (int k = 0; k < 2; ++k) r[k] = _mm512_min_ps(_mm512_max_ps(r[k], zero), fifteen);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + 4), q4_nibbles(words_in_order(r)));
    }
  }
  return true;
}

/// Sixteen rows' words (one register each, 32 words: a block's values) → each row's extreme by
/// `pick` (max or min, signed or not), as 16 words in row order: rows paired and reduced through
/// 16-, 32- and 64-bit interleaves (each step an extreme over twice the lanes, two rows' lanes
/// beside each other), then across the 128-bit lanes.
template <class Pick>
inline __m256i row_extremes16(const __m512i* m, Pick pick) {
  __m512i u[8], v[4], w[2];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) u[k] = pick(_mm512_unpacklo_epi16(m[2 * k], m[2 * k + 1]), _mm512_unpackhi_epi16(m[2 * k], m[2 * k + 1]));
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) v[k] = pick(_mm512_unpacklo_epi32(u[2 * k], u[2 * k + 1]), _mm512_unpackhi_epi32(u[2 * k], u[2 * k + 1]));
#pragma GCC unroll 2
  for (int k = 0; k < 2; ++k) w[k] = pick(_mm512_unpacklo_epi64(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_epi64(v[2 * k], v[2 * k + 1]));
  // each 128-bit lane of w[0] holds rows 0–7 (one word each), of w[1] rows 8–15
  __m512i z = pick(_mm512_shuffle_i32x4(w[0], w[1], 0x44), _mm512_shuffle_i32x4(w[0], w[1], 0xee));
  z = pick(z, _mm512_shuffle_i32x4(z, z, 0xb1));  // lanes: rows 0–7, 0–7, 8–15, 8–15
  return _mm512_castsi512_si256(_mm512_shuffle_i32x4(z, z, 0x08));
}

/// Four packs of four rows each (128-bit lane j of pack k: run j's bytes of rows 4k … 4k+3) →
/// the four runs, 64 bytes each, at `runs`: the packs' lanes traded.
inline void store_runs(std::uint8_t* runs, const __m512i* q) {
  const __m512i t0 = _mm512_shuffle_i32x4(q[0], q[1], 0x44), t1 = _mm512_shuffle_i32x4(q[0], q[1], 0xee);
  const __m512i t2 = _mm512_shuffle_i32x4(q[2], q[3], 0x44), t3 = _mm512_shuffle_i32x4(q[2], q[3], 0xee);
  _mm512_storeu_si512(runs, _mm512_shuffle_i32x4(t0, t2, 0x88));
  _mm512_storeu_si512(runs + 64, _mm512_shuffle_i32x4(t0, t2, 0xdd));
  _mm512_storeu_si512(runs + 128, _mm512_shuffle_i32x4(t1, t3, 0x88));
  _mm512_storeu_si512(runs + 192, _mm512_shuffle_i32x4(t1, t3, 0xdd));
}

/// q8 bytes + 128 of a block's values (`a`: the even ones, `b`: the odd ones, as f32) as
/// dwords: the reference's division and rounding half away from zero, clamped to ±127.
inline void exact_offset_q8(__m512 a, __m512 b, float d, __m512i* sa, __m512i* sb) {
  const __m512 dv = _mm512_set1_ps(d), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  const __m512i offset = _mm512_set1_epi32(128);
  const __m512 qa = _mm512_min_ps(_mm512_max_ps(round_away(_mm512_div_ps(a, dv)), lo), hi);
  const __m512 qb = _mm512_min_ps(_mm512_max_ps(round_away(_mm512_div_ps(b, dv)), lo), hi);
  *sa = _mm512_add_epi32(_mm512_cvttps_epi32(qa), offset);
  *sb = _mm512_add_epi32(_mm512_cvttps_epi32(qb), offset);
}

}  // namespace

bool quantize_q8_row_avx512(const void* src, quant_source from, std::uint8_t* dst, std::int64_t n) {
  if (from == quant_source::bf16) return quantize_q8_bf16_avx512(static_cast<const std::uint16_t*>(src), dst, n / 32);
  const float* x = static_cast<const float*>(src);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512 lo_q = _mm512_set1_ps(-127.0f), hi_q = _mm512_set1_ps(127.0f);
  const std::int64_t blocks = n / 32;
  // Eight blocks at a time (the last group may be shorter): their extremes, then their scales
  // together (lane for lane the reference's scalar steps), then each block's values. Lanes
  // past the last block hold 0 and are never stored.
  for (std::int64_t b = 0; b < blocks; b += 8) {
    const int count = int(std::min<std::int64_t>(8, blocks - b));
    alignas(32) float amax[8] = {};
    __mmask16 bad = 0;
    for (int i = 0; i < count; ++i) {
      const __m512 x0 = _mm512_loadu_ps(x + (b + i) * 32), x1 = _mm512_loadu_ps(x + (b + i) * 32 + 16);
      bad |= non_finite(x0, x1);
      amax[i] = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
    }
    if (bad) return false;
    block_scales sc;
    sc.q8(_mm256_load_ps(amax));
    for (int i = 0; i < count; ++i) {
      std::uint8_t* blk = dst + (b + i) * 34;
      if (!sc.start_q8(i, blk)) continue;
      const __m512 v[2] = {_mm512_loadu_ps(x + (b + i) * 32), _mm512_loadu_ps(x + (b + i) * 32 + 16)};
      __m512 q[2];
      rounded_quotients(v, sc.inv[i], sc.d[i], q);
      for (int h = 0; h < 2; ++h) {
        q[h] = _mm512_min_ps(_mm512_max_ps(q[h], lo_q), hi_q);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + 2 + 16 * h), _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(q[h])));
      }
    }
  }
  return true;
}

bool quantize_q4_row_avx512(const void* src, quant_source from, std::uint8_t* dst, std::int64_t n) {
  if (from == quant_source::bf16) return quantize_q4_bf16_avx512(static_cast<const std::uint16_t*>(src), dst, n / 32);
  const float* x = static_cast<const float*>(src);
  const __m512 zero = _mm512_setzero_ps(), fifteen = _mm512_set1_ps(15.0f);
  const std::int64_t blocks = n / 32;
  // Eight blocks at a time, as q8: extremes, then their scales and minimums together.
  for (std::int64_t b = 0; b < blocks; b += 8) {
    const int count = int(std::min<std::int64_t>(8, blocks - b));
    alignas(32) float lo[8] = {}, hi[8] = {};
    __mmask16 bad = 0;
    for (int i = 0; i < count; ++i) {
      const __m512 x0 = _mm512_loadu_ps(x + (b + i) * 32), x1 = _mm512_loadu_ps(x + (b + i) * 32 + 16);
      bad |= non_finite(x0, x1);
      lo[i] = _mm512_reduce_min_ps(_mm512_min_ps(x0, x1));
      hi[i] = _mm512_reduce_max_ps(_mm512_max_ps(x0, x1));
      if (lo[i] == 0 || hi[i] == 0) return false;  // which zero the reference keeps depends on order
    }
    if (bad) return false;
    block_scales sc;
    sc.q4(_mm256_load_ps(lo), _mm256_load_ps(hi));
    for (int i = 0; i < count; ++i) {
      std::uint8_t* blk = dst + (b + i) * 20;
      if (!sc.start_q4(i, blk)) continue;
      const __m512 mv = _mm512_set1_ps(sc.m[i]);
      const __m512 v[2] = {_mm512_sub_ps(_mm512_loadu_ps(x + (b + i) * 32), mv), _mm512_sub_ps(_mm512_loadu_ps(x + (b + i) * 32 + 16), mv)};
      __m512 q[2];
      rounded_quotients(v, sc.inv[i], sc.d[i], q);
      for (int h = 0; h < 2; ++h) q[h] = _mm512_min_ps(_mm512_max_ps(q[h], zero), fifteen);
      // values in order (0–15 in q[0], 16–31 in q[1]): narrowed to words in order, then paired
      const __m512i words = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(_mm512_cvttps_epi32(q[0]))),
                                               _mm512_cvtepi32_epi16(_mm512_cvttps_epi32(q[1])), 1);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + 4), q4_nibbles(words));
    }
  }
  return true;
}

void group_to_lanes_q8_avx512(const std::uint8_t* rows, std::uint8_t* out, std::int64_t blocks, std::int64_t row_bytes) {
  // Per row, one vpshufb puts each 128-bit half's even values, then its odd ones, in dwords:
  // E0 E1 O0 O1 | E2 E3 O2 O3 (Ej: values 8j, 8j+2, 8j+4, 8j+6; Oj the odd ones); the XOR
  // makes them unsigned. Run r of the sixteen rows is then dword k(r) of each, gathered.
  const __m256i order = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,  //
                                         0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m256i flip = _mm256_set1_epi8(char(0x80));
  const __m512i row_dwords = _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120);
  const __m512i row_offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                 _mm512_set1_epi32(std::int32_t(row_bytes)));
  constexpr int dword_of_run[8] = {0, 1, 4, 5, 2, 3, 6, 7};
  alignas(64) std::uint32_t sorted[16 * 8];
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* blk = rows + b * 34;
    std::uint8_t* o = out + b * 544;
    // the sixteen scales: the low half of a dword at each row's block
    const __m512i d = _mm512_i32gather_epi32(row_offsets, blk, 1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm512_cvtepi32_epi16(d));
    for (int l = 0; l < 16; ++l) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + l * row_bytes + 2));
      _mm256_store_si256(reinterpret_cast<__m256i*>(sorted + 8 * l), _mm256_xor_si256(_mm256_shuffle_epi8(v, order), flip));
    }
    for (int r = 0; r < 8; ++r) {
      const __m512i run = _mm512_i32gather_epi32(_mm512_add_epi32(row_dwords, _mm512_set1_epi32(dword_of_run[r])), sorted, 4);
      _mm512_storeu_si512(o + 32 + 64 * r, run);
    }
  }
}

void group_to_lanes_q4_avx512(const std::uint8_t* rows, std::uint8_t* out, std::int64_t blocks, std::int64_t row_bytes) {
  // The scales and minimums are one dword per row (d low, m high); run j is dword j of each
  // row's nibbles: all gathered straight from the rows.
  const __m512i row_offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                 _mm512_set1_epi32(std::int32_t(row_bytes)));
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* blk = rows + b * 20;
    std::uint8_t* o = out + b * 320;
    const __m512i dm = _mm512_i32gather_epi32(row_offsets, blk, 1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm512_cvtepi32_epi16(dm));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 32), _mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
    for (int j = 0; j < 4; ++j)
      _mm512_storeu_si512(o + 64 + 64 * j, _mm512_i32gather_epi32(row_offsets, blk + 4 + 4 * j, 1));
  }
}

void lanes_to_group_q8_avx512(const std::uint8_t* lanes, std::uint8_t* rows, std::int64_t blocks, std::int64_t row_bytes) {
  // Run a (0–3) holds values 8a, 8a+2, 8a+4, 8a+6 of each row (dword l: row l) and run a+4
  // the odd ones beside them, so interleaving the two runs' bytes gives each row's values
  // 8a … 8a+7 in order, a qword per row — within each 128-bit lane k, rows 4k and 4k+1 (the
  // low bytes) or 4k+2 and 4k+3 (the high ones). Four such registers (a = 0–3) hold eight
  // rows' four qwords; two rounds of two-source qword permutes put each row's 32 values
  // together, two rows a register. XOR 0x80 makes them signed again.
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  const __m512i pair_lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), pair_hi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  const __m512i rows_lo = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), rows_hi = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* in = lanes + b * 544;
    std::uint8_t* at = rows + b * 34;
    for (int l = 0; l < 16; ++l) __builtin_memcpy(at + l * row_bytes, in + 2 * l, 2);
    __m512i lo[4], hi[4];
    for (int a = 0; a < 4; ++a) {
      const __m512i e = _mm512_xor_si512(_mm512_loadu_si512(in + 32 + 64 * a), flip);
      const __m512i o = _mm512_xor_si512(_mm512_loadu_si512(in + 32 + 64 * (a + 4)), flip);
      lo[a] = _mm512_unpacklo_epi8(e, o);  // qword 2k + j: row 4k + j
      hi[a] = _mm512_unpackhi_epi8(e, o);  // qword 2k + j: row 4k + 2 + j
    }
    for (int h = 0; h < 2; ++h) {
      const __m512i* q = h ? hi : lo;
      const __m512i a01_lo = _mm512_permutex2var_epi64(q[0], pair_lo, q[1]), a01_hi = _mm512_permutex2var_epi64(q[0], pair_hi, q[1]);
      const __m512i a23_lo = _mm512_permutex2var_epi64(q[2], pair_lo, q[3]), a23_hi = _mm512_permutex2var_epi64(q[2], pair_hi, q[3]);
      // qwords 0–3 → rows 2h, 2h+1, 2h+4, 2h+5; 4–7 → rows 2h+8, 2h+9, 2h+12, 2h+13
      const __m512i two[4] = {_mm512_permutex2var_epi64(a01_lo, rows_lo, a23_lo), _mm512_permutex2var_epi64(a01_lo, rows_hi, a23_lo),
                              _mm512_permutex2var_epi64(a01_hi, rows_lo, a23_hi), _mm512_permutex2var_epi64(a01_hi, rows_hi, a23_hi)};
      for (int t = 0; t < 4; ++t) {
        const int row = 2 * h + 4 * t;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(at + row * row_bytes + 2), _mm512_castsi512_si256(two[t]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(at + (row + 1) * row_bytes + 2), _mm512_extracti64x4_epi64(two[t], 1));
      }
    }
  }
}

void lanes_to_group_q4_avx512(const std::uint8_t* lanes, std::uint8_t* rows, std::int64_t blocks, std::int64_t row_bytes) {
  // Run j holds dword j of each row's nibbles (dword l: row l): a 4 × 16 transpose of dwords,
  // which the unpacks do within each 128-bit lane k (rows 4k … 4k+3).
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* in = lanes + b * 320;
    std::uint8_t* at = rows + b * 20;
    for (int l = 0; l < 16; ++l) {
      __builtin_memcpy(at + l * row_bytes, in + 2 * l, 2);
      __builtin_memcpy(at + l * row_bytes + 2, in + 32 + 2 * l, 2);
    }
    const __m512i r0 = _mm512_loadu_si512(in + 64), r1 = _mm512_loadu_si512(in + 128);
    const __m512i r2 = _mm512_loadu_si512(in + 192), r3 = _mm512_loadu_si512(in + 256);
    const __m512i t0 = _mm512_unpacklo_epi32(r0, r1), t1 = _mm512_unpackhi_epi32(r0, r1);
    const __m512i t2 = _mm512_unpacklo_epi32(r2, r3), t3 = _mm512_unpackhi_epi32(r2, r3);
    // lane k of row_j: row 4k + j's sixteen bytes
    const __m512i row_j[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3),
                              _mm512_unpackhi_epi64(t1, t3)};
    for (int j = 0; j < 4; ++j) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(at + j * row_bytes + 4), _mm512_castsi512_si128(row_j[j]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(at + (4 + j) * row_bytes + 4), _mm512_extracti32x4_epi32(row_j[j], 1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(at + (8 + j) * row_bytes + 4), _mm512_extracti32x4_epi32(row_j[j], 2));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(at + (12 + j) * row_bytes + 4), _mm512_extracti32x4_epi32(row_j[j], 3));
    }
  }
}

bool quantize_q8_lanes_bf16_avx512(const std::uint8_t* src, std::int64_t row_bytes, std::uint8_t* out, std::int64_t blocks) {
  // Per block (32 values of each of the 16 rows): the rows' largest magnitudes, reduced
  // together, give the 16 scales — the lanes' first 32 bytes, as they are. Then each row's
  // values: the even ones (a dword's low word shifted up) and the odd ones (its high word
  // masked) as f32, so that 128-bit lane j of the evens holds the values of run j (8j, 8j+2,
  // 8j+4, 8j+6) and of the odds those of run 4 + j. A value's rounded quotient is found as
  // fma(x, 1/d, M) with M = 1.5·2^23 + 128, whose low bits are then the rounded product + 128
  // (the lanes' unsigned byte); where a product lies within 2^−14 of k + ½ the row is divided
  // as the reference does (quantize_blocks.inc). A normal f16 scale keeps |x / d| under 127.07,
  // so only a subnormal one needs the clamp. Four rows' dwords pack to bytes with lane j
  // holding their run-j bytes; the four packs of the group then trade 128-bit lanes into runs.
  const __m512i magnitude = _mm512_set1_epi16(0x7fff), high_words = _mm512_set1_epi32(int(0xffff0000u));
  const __m512 m = _mm512_set1_ps(12583040.0f), lo_t = _mm512_set1_ps(12583040.0f - 127), hi_t = _mm512_set1_ps(12583040.0f + 127);
  const __m512i m_bits = _mm512_set1_epi32(0x4b400000);
  const __m512 near_half = _mm512_set1_ps(0.5f - 0x1p-14f);
  alignas(64) float d[16], inv[16];
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* p = src + b * 64;
    std::uint8_t* o = out + b * 544;
    __m512i mag[16];
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) mag[l] = _mm512_and_si512(_mm512_loadu_si512(p + l * row_bytes), magnitude);
    const __m256i amax_bits = row_extremes16(mag, [](__m512i a, __m512i b) { return _mm512_max_epu16(a, b); });
    if (_mm256_movemask_epi8(_mm256_cmpgt_epi16(amax_bits, _mm256_set1_epi16(0x7f7f))) != 0) return false;  // NaN or ±∞
    const __m512 amax = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(amax_bits), 16));
    const __m256i d16 = _mm512_cvtps_ph(_mm512_div_ps(amax, _mm512_set1_ps(127.0f)), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), d16);
    const __m512 dw = _mm512_cvtph_ps(d16);
    const __mmask16 nonzero = _mm512_cmp_ps_mask(dw, _mm512_setzero_ps(), _CMP_NEQ_OQ);
    _mm512_store_ps(d, dw);
    _mm512_store_ps(inv, _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0f), dw));  // a zero scale: every byte 128
    const __mmask16 subnormal = nonzero & _mm256_testn_epi16_mask(d16, _mm256_set1_epi16(0x7c00));
    __m512i packed[2][4];  // [evens, odds][rows 4k … 4k+3]
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      __m512i s[2][4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const int l = 4 * k + i;
        const __m512i w = _mm512_loadu_si512(p + l * row_bytes);
        const __m512 a = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), c = _mm512_castsi512_ps(_mm512_and_si512(w, high_words));
        const __m512 iv = _mm512_set1_ps(inv[l]);
        __m512 ta = _mm512_fmadd_ps(a, iv, m), tc = _mm512_fmadd_ps(c, iv, m);
        const __m512 ea = _mm512_fmsub_ps(a, iv, _mm512_sub_ps(ta, m)), ec = _mm512_fmsub_ps(c, iv, _mm512_sub_ps(tc, m));
        if (_mm512_cmp_ps_mask(_mm512_range_ps(ea, ec, 0x0b), near_half, _CMP_GT_OQ) != 0) {
          exact_offset_q8(a, c, d[l], &s[0][i], &s[1][i]);
          continue;
        }
        if ((subnormal >> l) & 1) {
          ta = _mm512_min_ps(_mm512_max_ps(ta, lo_t), hi_t);
          tc = _mm512_min_ps(_mm512_max_ps(tc, lo_t), hi_t);
        }
        s[0][i] = _mm512_sub_epi32(_mm512_castps_si512(ta), m_bits);
        s[1][i] = _mm512_sub_epi32(_mm512_castps_si512(tc), m_bits);
      }
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h)
        packed[h][k] = _mm512_packus_epi16(_mm512_packus_epi32(s[h][0], s[h][1]), _mm512_packus_epi32(s[h][2], s[h][3]));
    }
    store_runs(o + 32, packed[0]);  // runs 0–3 from the evens
    store_runs(o + 288, packed[1]);  // runs 4–7 from the odds
  }
  return true;
}

bool quantize_q4_lanes_bf16_avx512(const std::uint8_t* src, std::int64_t row_bytes, std::uint8_t* out, std::int64_t blocks) {
  // quantize_q8_lanes_bf16_avx512's steps for q4: the sixteen rows' extremes found together on
  // order keys (quantize_blocks.inc) give the scales and minimums — the lanes' first 64 bytes as
  // they are; each value less the minimum rounded by one fma against 1.5·2^23 and clamped to
  // 0–15; a row's byte k is its value 2k | value 2k+1 << 4, so that 128-bit lane j of a row's
  // bytes (as dwords) is run j; four rows packed, the packs' lanes traded into the four runs.
  const __m512i high_words = _mm512_set1_epi32(int(0xffff0000u));
  const __m512 m = _mm512_set1_ps(12582912.0f), hi_t = _mm512_set1_ps(12582912.0f + 15);
  const __m512i m_bits = _mm512_set1_epi32(0x4b400000);
  const __m512 near_half = _mm512_set1_ps(0.5f - 0x1p-14f), zero = _mm512_setzero_ps(), fifteen = _mm512_set1_ps(15.0f);
  alignas(64) float d[16], inv[16], mins[16];
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* p = src + b * 64;
    std::uint8_t* o = out + b * 320;
    __m512i key[16];
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) key[l] = order_key(_mm512_loadu_si512(p + l * row_bytes));
    const __m256i lo_k = row_extremes16(key, [](__m512i a, __m512i c) { return _mm512_min_epi16(a, c); });
    const __m256i hi_k = row_extremes16(key, [](__m512i a, __m512i c) { return _mm512_max_epi16(a, c); });
    // NaN or ±∞ (a key past +FLT_MAX's or below −FLT_MAX's), or an extreme of zero (which zero
    // the reference keeps depends on the order it meets them in): the two steps take the group
    if (_mm256_movemask_epi8(_mm256_or_si256(_mm256_cmpgt_epi16(hi_k, _mm256_set1_epi16(0x7f7f)),
                                             _mm256_cmpgt_epi16(_mm256_set1_epi16(std::int16_t(0x8080)), lo_k))) != 0)
      return false;
    const auto widen = [&](__m256i k) {
      const __m256i words = _mm256_xor_si256(k, _mm256_and_si256(_mm256_srai_epi16(k, 15), _mm256_set1_epi16(0x7fff)));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(words), 16));
    };
    const __m512 lo = widen(lo_k), hi = widen(hi_k);
    if ((_mm512_cmp_ps_mask(lo, zero, _CMP_EQ_OQ) | _mm512_cmp_ps_mask(hi, zero, _CMP_EQ_OQ)) != 0) return false;
    const __m256i d16 = _mm512_cvtps_ph(_mm512_div_ps(_mm512_sub_ps(hi, lo), fifteen), _MM_FROUND_TO_NEAREST_INT);
    const __m256i m16 = _mm512_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), d16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 32), m16);
    const __m512 dw = _mm512_cvtph_ps(d16);
    _mm512_store_ps(d, dw);
    _mm512_store_ps(mins, _mm512_cvtph_ps(m16));
    _mm512_store_ps(inv, _mm512_maskz_div_ps(_mm512_cmp_ps_mask(dw, zero, _CMP_NEQ_OQ), _mm512_set1_ps(1.0f), dw));  // zero: bytes 0
    __m512i packed[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      __m512i s[4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const int l = 4 * k + i;
        const __m512i w = _mm512_loadu_si512(p + l * row_bytes);
        const __m512 mv = _mm512_set1_ps(mins[l]), iv = _mm512_set1_ps(inv[l]);
        const __m512 a = _mm512_sub_ps(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)), mv);
        const __m512 c = _mm512_sub_ps(_mm512_castsi512_ps(_mm512_and_si512(w, high_words)), mv);
        __m512 ta = _mm512_fmadd_ps(a, iv, m), tc = _mm512_fmadd_ps(c, iv, m);
        const __m512 ea = _mm512_fmsub_ps(a, iv, _mm512_sub_ps(ta, m)), ec = _mm512_fmsub_ps(c, iv, _mm512_sub_ps(tc, m));
        __m512i sa, sc;
        if (_mm512_cmp_ps_mask(_mm512_range_ps(ea, ec, 0x0b), near_half, _CMP_GT_OQ) != 0) {
          const __m512 dv = _mm512_set1_ps(d[l]);
          sa = _mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(round_away(_mm512_div_ps(a, dv)), zero), fifteen));
          sc = _mm512_cvttps_epi32(_mm512_min_ps(_mm512_max_ps(round_away(_mm512_div_ps(c, dv)), zero), fifteen));
        } else {
          sa = _mm512_sub_epi32(_mm512_castps_si512(_mm512_min_ps(_mm512_max_ps(ta, m), hi_t)), m_bits);
          sc = _mm512_sub_epi32(_mm512_castps_si512(_mm512_min_ps(_mm512_max_ps(tc, m), hi_t)), m_bits);
        }
        s[i] = _mm512_or_si512(sa, _mm512_slli_epi32(sc, 4));
      }
      packed[k] = _mm512_packus_epi16(_mm512_packus_epi32(s[0], s[1]), _mm512_packus_epi32(s[2], s[3]));
    }
    store_runs(o + 64, packed);
  }
  return true;
}

}  // namespace mpakt::cpu_fast
