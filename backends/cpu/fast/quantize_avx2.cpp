// Quantize-on-load kernels for AVX2 (with F16C for the scales): the AVX-512 kernels' steps at
// half the width, for the many volunteers whose CPUs stop at AVX2. Each block of 32 values
// gives the reference's bytes — the scale from the block's extreme values divided by 127 (q8)
// or 15 (q4), rounded to f16 by F16C (nearest even, as f32_to_f16 does for finite values),
// each value divided by the widened scale, rounded half away from zero without std::round
// (t = trunc(v); v − t is exact at these magnitudes; one is added away from zero when
// |v − t| ≥ 0.5), clamped, narrowed and packed. The division of each value is done as a
// product with the scale's reciprocal where that cannot change the result (see
// `rounded_quotients`); a block with a value near a rounding boundary is divided again.

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "backends/cpu/fast/quantize_kernels.hpp"

namespace mpakt::cpu_fast {

namespace {

#include "backends/cpu/fast/quantize_blocks.inc"

/// Values [first, first + 32) widened to f32, eight per register.
inline void load32(const void* src, quant_source from, std::int64_t first, __m256* x) {
  if (from == quant_source::bf16) {
    const auto* p = static_cast<const std::uint16_t*>(src) + first;
    for (int i = 0; i < 4; ++i) {
      const __m128i words = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8 * i));
      x[i] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(words), 16));
    }
    return;
  }
  const float* p = static_cast<const float*>(src) + first;
  for (int i = 0; i < 4; ++i) x[i] = _mm256_loadu_ps(p + 8 * i);
}

/// Whether any of the 32 values is NaN or ±∞ (exponent bits all set).
inline bool non_finite(const __m256* x) {
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), largest = _mm256_set1_epi32(0x7f7fffff);
  __m256i bad = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i)
    bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(x[i]), magnitude), largest));
  return !_mm256_testz_si256(bad, bad);
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

inline float hmin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_min_ss(m, _mm_movehdup_ps(m)));
}

/// Round half away from zero of v (finite, or ±∞/NaN passed through), as std::round.
inline __m256 round_away(__m256 v) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
  const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one_away = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
  return _mm256_blendv_ps(t, _mm256_add_ps(t, one_away), up);
}

/// Four registers of whole numbers in [−128, 127] (values 0–31 in order) → 32 bytes in order.
inline __m256i narrow_in_order(const __m256* q) {
  const __m256i w01 = _mm256_packs_epi32(_mm256_cvttps_epi32(q[0]), _mm256_cvttps_epi32(q[1]));
  const __m256i w23 = _mm256_packs_epi32(_mm256_cvttps_epi32(q[2]), _mm256_cvttps_epi32(q[3]));
  // each 128-bit lane interleaves the four registers' halves: put the groups of four back
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/// A block's 32 bf16 words widened, in the order the narrowing packs undo: values 0–3 | 8–11,
/// 4–7 | 12–15, 16–19 | 24–27, 20–23 | 28–31 (interleaved with zeros, no shifts).
inline void widen_block(const std::uint16_t* p, __m256* x) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16));
  x[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w0));
  x[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w0));
  x[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w1));
  x[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w1));
}

/// round_away(x[k] / d) for a block's four registers: the products with `inv` (1/d) rounded
/// to nearest where none lies within 2^−14 of k + ½, else every value divided as the reference
/// does (why that gives the reference's quotients: quantize_blocks.inc).
inline void rounded_quotients(const __m256* x, float inv, float d, __m256* r) {
  const __m256 sign = _mm256_set1_ps(-0.0f), iv = _mm256_set1_ps(inv);
  __m256 off = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    const __m256 v = _mm256_mul_ps(x[k], iv);
    r[k] = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    off = _mm256_max_ps(off, _mm256_andnot_ps(sign, _mm256_sub_ps(v, r[k])));
  }
  if (_mm256_movemask_ps(_mm256_cmp_ps(off, _mm256_set1_ps(0.5f - 0x1p-14f), _CMP_GT_OQ)) != 0) {
    const __m256 dv = _mm256_set1_ps(d);
    for (int k = 0; k < 4; ++k) r[k] = round_away(_mm256_div_ps(x[k], dv));
  }
}

/// A block's 32 bf16 words at `p` → their magnitude bits' per-lane maxima, eight lanes (what
/// q8_scales_of takes).
inline __m128i block_maxima(const void* p) {
  const __m256i magnitude = _mm256_set1_epi16(0x7fff);
  const __m256i w0 = _mm256_loadu_si256(static_cast<const __m256i*>(p));
  const __m256i w1 = _mm256_loadu_si256(static_cast<const __m256i*>(p) + 1);
  const __m256i a = _mm256_max_epu16(_mm256_and_si256(w0, magnitude), _mm256_and_si256(w1, magnitude));
  return _mm_max_epu16(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
}

/// q8 from bf16 words, the common case of a load (checkpoints are published in bf16). The
/// block's largest magnitude is found on the words themselves (a bf16 value's magnitude bits
/// order as integers; any above 0x7f7f is NaN or ±∞): eight blocks' per-lane maxima reduced
/// together. Each value's quotient is a product with the scale's reciprocal, rounded to
/// nearest; where that lies within 2^−14 of k + ½ the block is divided as the reference does
/// (see rounded_quotients: otherwise both round alike, ties included). The words are widened
/// by interleaving with zeros, which the later narrowing packs undo.
bool quantize_q8_bf16_avx2(const std::uint16_t* src, std::uint8_t* dst, std::int64_t blocks) {
  const __m256i lowest = _mm256_set1_epi8(-127);
  for (std::int64_t b = 0; b < blocks; b += 8) {
    const int count = int(std::min<std::int64_t>(8, blocks - b));
    const std::uint16_t* p = src + b * 32;
    const auto maxima = [&](int i) { return block_maxima(p + 32 * i); };
    block_scales sc;
    if (!q8_scales_of(count, maxima, sc)) return false;
    const float *d = sc.d, *inv = sc.inv;
    for (int i = 0; i < count; ++i) {
      std::uint8_t* blk = dst + (b + i) * 34;
      if (!sc.start_q8(i, blk)) continue;
      __m256 x[4], r[4];
      widen_block(p + 32 * i, x);
      rounded_quotients(x, inv[i], d[i], r);
      // |quotient| < 2^8 (the scale is at least amax / 127 less a rounding), so the packs
      // saturate only past ±127: the lower end is −127, not −128
      const __m256i lo = _mm256_packs_epi32(_mm256_cvttps_epi32(r[0]), _mm256_cvttps_epi32(r[1]));  // 0–7 | 8–15
      const __m256i hi = _mm256_packs_epi32(_mm256_cvttps_epi32(r[2]), _mm256_cvttps_epi32(r[3]));  // 16–23 | 24–31
      const __m256i bytes = _mm256_max_epi8(_mm256_packs_epi16(lo, hi), lowest);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk + 2), _mm256_permute4x64_epi64(bytes, 0xd8));
    }
  }
  return true;
}

/// order_key (quantize_blocks.inc) of sixteen words.
inline __m256i order_key(__m256i w) { return _mm256_xor_si256(w, _mm256_and_si256(_mm256_srai_epi16(w, 15), _mm256_set1_epi16(0x7fff))); }

/// A block's 32 bf16 words at `p` → their order keys' per-lane minima and maxima, eight lanes
/// each (what q4_scales_of takes).
inline void block_key_extremes(const void* p, __m128i& lo_k, __m128i& hi_k) {
  const __m256i k0 = order_key(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  const __m256i k1 = order_key(_mm256_loadu_si256(static_cast<const __m256i*>(p) + 1));
  const __m256i lo = _mm256_min_epi16(k0, k1), hi = _mm256_max_epi16(k0, k1);
  lo_k = _mm_min_epi16(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
  hi_k = _mm_max_epi16(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
}

/// q4 from bf16 words, as quantize_q8_bf16_avx2: each block's extremes found on order keys
/// (a key past +FLT_MAX's or below −FLT_MAX's is NaN or ±∞), eight blocks reduced together;
/// the products with the scale's reciprocal trusted where not within 2^−14 of k + ½.
bool quantize_q4_bf16_avx2(const std::uint16_t* src, std::uint8_t* dst, std::int64_t blocks) {
  const __m256i zero_i = _mm256_setzero_si256();
  const __m256 zero = _mm256_setzero_ps(), fifteen = _mm256_set1_ps(15.0f);
  for (std::int64_t b = 0; b < blocks; b += 8) {
    const int count = int(std::min<std::int64_t>(8, blocks - b));
    const std::uint16_t* p = src + b * 32;
    const auto extremes = [&](int i, __m128i& lo_k, __m128i& hi_k) { block_key_extremes(p + 32 * i, lo_k, hi_k); };
    block_scales sc;
    if (!q4_scales_of(count, extremes, sc)) return false;
    const float *d = sc.d, *m = sc.m, *inv = sc.inv;
    for (int i = 0; i < count; ++i) {
      std::uint8_t* blk = dst + (b + i) * 20;
      if (!sc.start_q4(i, blk)) continue;
      __m256 x[4], r[4];
      widen_block(p + 32 * i, x);  // (less the minimum below)
      const __m256 mv = _mm256_set1_ps(m[i]);
      for (int k = 0; k < 4; ++k) x[k] = _mm256_sub_ps(x[k], mv);
      rounded_quotients(x, inv[i], d[i], r);
      for (int k = 0; k < 4; ++k) r[k] = _mm256_min_ps(_mm256_max_ps(r[k], zero), fifteen);
      const __m256i lo = _mm256_packs_epi32(_mm256_cvttps_epi32(r[0]), _mm256_cvttps_epi32(r[1]));  // 0–7 | 8–15
      const __m256i hi = _mm256_packs_epi32(_mm256_cvttps_epi32(r[2]), _mm256_cvttps_epi32(r[3]));  // 16–23 | 24–31
      // bytes 0–7, 16–23 | 8–15, 24–31; as 16-bit pairs (2i, 2i+1) joined into a byte each
      const __m256i pairs = _mm256_packus_epi16(lo, hi);
      const __m256i joined = _mm256_or_si256(_mm256_and_si256(pairs, _mm256_set1_epi16(0x00ff)), _mm256_slli_epi16(_mm256_srli_epi16(pairs, 8), 4));
      // dwords: values 0–7, 16–23, 0, 0 | 8–15, 24–31, 0, 0
      const __m256i nibbles = _mm256_packus_epi16(joined, zero_i);
      const __m256i in_order = _mm256_permutevar8x32_epi32(nibbles, _mm256_setr_epi32(0, 4, 1, 5, 2, 3, 6, 7));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + 4), _mm256_castsi256_si128(in_order));
    }
  }
  return true;
}

/// Row i (0–3) of four rows' dwords (small whole numbers), packed beside the others: rows 0
/// and 1 as words in pair[0], rows 2 and 3 in pair[1].
inline void pack_row(__m256i* pair, int i, __m256i s) {
  if (i % 2 == 0) pair[i / 2] = s;
  else pair[i / 2] = _mm256_packus_epi32(pair[i / 2], s);
}

/// The four rows as bytes: 128-bit lane j at `at` + 64·j (each lane one run's four rows).
inline void store_run_lanes(std::uint8_t* at, const __m256i* pair) {
  const __m256i q = _mm256_packus_epi16(pair[0], pair[1]);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(at), _mm256_castsi256_si128(q));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(at + 64), _mm256_extracti128_si256(q, 1));
}

}  // namespace

bool quantize_q8_row_avx2(const void* src, quant_source from, std::uint8_t* dst, std::int64_t n) {
  if (from == quant_source::bf16) return quantize_q8_bf16_avx2(static_cast<const std::uint16_t*>(src), dst, n / 32);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 lo_q = _mm256_set1_ps(-127.0f), hi_q = _mm256_set1_ps(127.0f);
  const std::int64_t blocks = n / 32;
  // Eight blocks at a time (the last group may be shorter): their extremes, then their scales
  // in one division and one rounding to f16 (lane for lane the reference's scalar steps), then
  // each block's values. Lanes past the last block hold 0 and are never stored.
  for (std::int64_t b = 0; b < blocks; b += 8) {
    const int count = int(std::min<std::int64_t>(8, blocks - b));
    alignas(32) float amax[8] = {};
    for (int i = 0; i < count; ++i) {
      __m256 x[4];
      load32(src, from, (b + i) * 32, x);
      if (non_finite(x)) return false;
      const __m256 m01 = _mm256_max_ps(_mm256_andnot_ps(sign, x[0]), _mm256_andnot_ps(sign, x[1]));
      const __m256 m23 = _mm256_max_ps(_mm256_andnot_ps(sign, x[2]), _mm256_andnot_ps(sign, x[3]));
      amax[i] = hmax(_mm256_max_ps(m01, m23));
    }
    block_scales sc;
    sc.q8(_mm256_load_ps(amax));
    const float *d = sc.d, *inv = sc.inv;
    for (int i = 0; i < count; ++i) {
      std::uint8_t* blk = dst + (b + i) * 34;
      if (!sc.start_q8(i, blk)) continue;
      __m256 x[4], q[4];
      load32(src, from, (b + i) * 32, x);
      rounded_quotients(x, inv[i], d[i], q);
      for (int k = 0; k < 4; ++k) q[k] = _mm256_min_ps(_mm256_max_ps(q[k], lo_q), hi_q);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk + 2), narrow_in_order(q));
    }
  }
  return true;
}

bool quantize_q4_row_avx2(const void* src, quant_source from, std::uint8_t* dst, std::int64_t n) {
  if (from == quant_source::bf16) return quantize_q4_bf16_avx2(static_cast<const std::uint16_t*>(src), dst, n / 32);
  const __m256 zero = _mm256_setzero_ps(), fifteen = _mm256_set1_ps(15.0f);
  const std::int64_t blocks = n / 32;
  // Eight blocks at a time, as q8: extremes, then their scales and minimums together.
  for (std::int64_t b = 0; b < blocks; b += 8) {
    const int count = int(std::min<std::int64_t>(8, blocks - b));
    alignas(32) float lo[8] = {}, hi[8] = {};
    for (int i = 0; i < count; ++i) {
      __m256 x[4];
      load32(src, from, (b + i) * 32, x);
      if (non_finite(x)) return false;
      lo[i] = hmin(_mm256_min_ps(_mm256_min_ps(x[0], x[1]), _mm256_min_ps(x[2], x[3])));
      hi[i] = hmax(_mm256_max_ps(_mm256_max_ps(x[0], x[1]), _mm256_max_ps(x[2], x[3])));
      if (lo[i] == 0 || hi[i] == 0) return false;  // which zero the reference keeps depends on order
    }
    const __m256 lov = _mm256_load_ps(lo), hiv = _mm256_load_ps(hi);
    block_scales sc;
    sc.q4(lov, hiv);
    const float *d = sc.d, *m = sc.m, *inv = sc.inv;
    for (int i = 0; i < count; ++i) {
      std::uint8_t* blk = dst + (b + i) * 20;
      if (!sc.start_q4(i, blk)) continue;
      __m256 x[4], q[4];
      load32(src, from, (b + i) * 32, x);
      const __m256 mv = _mm256_set1_ps(m[i]);
      for (int k = 0; k < 4; ++k) x[k] = _mm256_sub_ps(x[k], mv);
      rounded_quotients(x, inv[i], d[i], q);
      for (int k = 0; k < 4; ++k) q[k] = _mm256_min_ps(_mm256_max_ps(q[k], zero), fifteen);
      // Byte i of the block = value 2i | value 2i+1 << 4: the values in order as bytes, pairs
      // as 16-bit lanes, each pair joined and narrowed.
      const __m256i pairs = narrow_in_order(q);
      const __m256i joined = _mm256_or_si256(_mm256_and_si256(pairs, _mm256_set1_epi16(0x00ff)),
                                             _mm256_slli_epi16(_mm256_srli_epi16(pairs, 8), 4));
      const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(joined, _mm256_setzero_si256()), 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + 4), _mm256_castsi256_si128(bytes));
    }
  }
  return true;
}

namespace {

/// Transposes eight rows of eight dwords: t[k] gets dword k of every row, row l in dword l.
inline void transpose8x8(const __m256i* r, __m256i* t) {
  __m256i a[8], b[8];
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);      // r0k0 r1k0 r0k1 r1k1 | k4 k5
    a[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);  // k2 k3 | k6 k7
  }
  for (int i = 0; i < 2; ++i) {
    b[4 * i] = _mm256_unpacklo_epi64(a[4 * i], a[4 * i + 2]);          // k0 of 4 rows | k4
    b[4 * i + 1] = _mm256_unpackhi_epi64(a[4 * i], a[4 * i + 2]);      // k1 | k5
    b[4 * i + 2] = _mm256_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);  // k2 | k6
    b[4 * i + 3] = _mm256_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);  // k3 | k7
  }
  for (int k = 0; k < 4; ++k) {
    t[k] = _mm256_permute2x128_si256(b[k], b[4 + k], 0x20);
    t[k + 4] = _mm256_permute2x128_si256(b[k], b[4 + k], 0x31);
  }
}

}  // namespace

void group_to_lanes_q8_avx2(const std::uint8_t* rows, std::uint8_t* out, std::int64_t blocks, std::int64_t row_bytes) {
  // Per row, one vpshufb puts each 128-bit half's even values, then its odd ones, in dwords:
  // E0 E1 O0 O1 | E2 E3 O2 O3 (Ej: values 8j, 8j+2, 8j+4, 8j+6; Oj the odd ones); the XOR
  // makes them unsigned. Eight rows' dwords transposed give eight runs' halves.
  const __m256i order = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,  //
                                         0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m256i flip = _mm256_set1_epi8(char(0x80));
  constexpr int run_of_dword[8] = {0, 1, 4, 5, 2, 3, 6, 7};
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* blk = rows + b * 34;
    std::uint8_t* o = out + b * 544;
    for (int l = 0; l < 16; ++l) __builtin_memcpy(o + 2 * l, blk + l * row_bytes, 2);
    for (int h = 0; h < 2; ++h) {
      __m256i r[8], t[8];
      for (int l = 0; l < 8; ++l) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + (8 * h + l) * row_bytes + 2));
        r[l] = _mm256_xor_si256(_mm256_shuffle_epi8(v, order), flip);
      }
      transpose8x8(r, t);
      for (int k = 0; k < 8; ++k) _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 32 + 64 * run_of_dword[k] + 32 * h), t[k]);
    }
  }
}

void group_to_lanes_q4_avx2(const std::uint8_t* rows, std::uint8_t* out, std::int64_t blocks, std::int64_t row_bytes) {
  // Run j is dword j of each row's sixteen bytes of nibbles: four rows' dwords transposed at a
  // time; the scales and minimums are copied.
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* blk = rows + b * 20;
    std::uint8_t* o = out + b * 320;
    for (int l = 0; l < 16; ++l) {
      __builtin_memcpy(o + 2 * l, blk + l * row_bytes, 2);
      __builtin_memcpy(o + 32 + 2 * l, blk + l * row_bytes + 2, 2);
    }
    for (int g = 0; g < 4; ++g) {
      __m128i r[4];
      for (int l = 0; l < 4; ++l) r[l] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (4 * g + l) * row_bytes + 4));
      const __m128i a0 = _mm_unpacklo_epi32(r[0], r[1]), a1 = _mm_unpackhi_epi32(r[0], r[1]);
      const __m128i a2 = _mm_unpacklo_epi32(r[2], r[3]), a3 = _mm_unpackhi_epi32(r[2], r[3]);
      const __m128i t[4] = {_mm_unpacklo_epi64(a0, a2), _mm_unpackhi_epi64(a0, a2), _mm_unpacklo_epi64(a1, a3),
                            _mm_unpackhi_epi64(a1, a3)};
      for (int j = 0; j < 4; ++j) _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 64 + 64 * j + 16 * g), t[j]);
    }
  }
}

bool quantize_q8_lanes_bf16_avx2(const std::uint8_t* src, std::int64_t row_bytes, std::uint8_t* out, std::int64_t blocks) {
  // quantize_q8_lanes_bf16_avx512's steps at half the width: each half of the sixteen rows'
  // scales from eight rows' block maxima (quantize_blocks.inc); a row's values as evens and
  // odds of its two 32-byte halves, so that register kind r's 128-bit lane h holds run 2r + h;
  // each rounded by one fma against 1.5·2^23 + 128 (checked within 2^−14 of k + ½, where a
  // register's eight values are then divided as the reference does; a subnormal scale
  // clamped). One kind of register at a time over four rows — few registers live, as AVX2 has
  // sixteen — packed to bytes, each lane stored as its run's four rows.
  const __m256i high_words = _mm256_set1_epi32(int(0xffff0000u));
  const __m256 m = _mm256_set1_ps(12583040.0f), lo_t = _mm256_set1_ps(12583040.0f - 127), hi_t = _mm256_set1_ps(12583040.0f + 127);
  const __m256i m_bits = _mm256_set1_epi32(0x4b400000);
  const __m256 sign = _mm256_set1_ps(-0.0f), near_half = _mm256_set1_ps(0.5f - 0x1p-14f);
  alignas(32) float d[16], inv[16];
  bool clamp[16];
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* p = src + b * 64;
    std::uint8_t* o = out + b * 544;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const auto maxima = [&](int i) { return block_maxima(p + (8 * h + i) * row_bytes); };
      block_scales sc;
      if (!q8_scales_of(8, maxima, sc)) return false;  // NaN or ±∞
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 16 * h), _mm_load_si128(reinterpret_cast<const __m128i*>(sc.d16)));
      const __m256 dw = _mm256_load_ps(sc.d);
      _mm256_store_ps(d + 8 * h, dw);
      // a zero scale: every byte 128
      _mm256_store_ps(inv + 8 * h, _mm256_andnot_ps(_mm256_cmp_ps(dw, _mm256_setzero_ps(), _CMP_EQ_OQ), _mm256_load_ps(sc.inv)));
      for (int i = 0; i < 8; ++i) clamp[8 * h + i] = (sc.d16[i] & 0x7c00) == 0;  // subnormal
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        __m256i pair[2];
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          const int l = 4 * k + i;
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + l * row_bytes + 32 * (r % 2)));
          const __m256 x = _mm256_castsi256_ps(r < 2 ? _mm256_slli_epi32(w, 16) : _mm256_and_si256(w, high_words));
          const __m256 iv = _mm256_broadcast_ss(inv + l);
          __m256 t = _mm256_fmadd_ps(x, iv, m);
          const __m256 off = _mm256_andnot_ps(sign, _mm256_fmsub_ps(x, iv, _mm256_sub_ps(t, m)));
          __m256i s;
          if (_mm256_movemask_ps(_mm256_cmp_ps(off, near_half, _CMP_GT_OQ)) != 0) {
            const __m256 q = _mm256_min_ps(_mm256_max_ps(round_away(_mm256_div_ps(x, _mm256_broadcast_ss(d + l))),
                                                          _mm256_set1_ps(-127.0f)),
                                           _mm256_set1_ps(127.0f));
            s = _mm256_add_epi32(_mm256_cvttps_epi32(q), _mm256_set1_epi32(128));
          } else {
            if (clamp[l]) t = _mm256_min_ps(_mm256_max_ps(t, lo_t), hi_t);
            s = _mm256_sub_epi32(_mm256_castps_si256(t), m_bits);
          }
          pack_row(pair, i, s);
        }
        store_run_lanes(o + 32 + 128 * r + 16 * k, pair);  // lane h: run 2r + h, rows 4k … 4k+3
      }
    }
  }
  return true;
}

bool quantize_q4_lanes_bf16_avx2(const std::uint8_t* src, std::int64_t row_bytes, std::uint8_t* out, std::int64_t blocks) {
  // quantize_q4_lanes_bf16_avx512's steps at half the width, arranged as AVX2's q8 kernel:
  // each half of the scales and minimums from eight rows' extremes on order keys
  // (quantize_blocks.inc: false for NaN, ±∞ or a zero extreme); a row's bytes 8h … 8h+7 from
  // its half h (its even values | its odd ones << 4), whose 128-bit lanes are runs 2h and
  // 2h + 1; one half over four rows at a time, packed, each lane stored as its run's rows.
  const __m256i high_words = _mm256_set1_epi32(int(0xffff0000u));
  const __m256 m = _mm256_set1_ps(12582912.0f), hi_t = _mm256_set1_ps(12582912.0f + 15);
  const __m256i m_bits = _mm256_set1_epi32(0x4b400000);
  const __m256 sign = _mm256_set1_ps(-0.0f), near_half = _mm256_set1_ps(0.5f - 0x1p-14f);
  const __m256 zero = _mm256_setzero_ps(), fifteen = _mm256_set1_ps(15.0f);
  alignas(32) float d[16], inv[16], mins[16];
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* p = src + b * 64;
    std::uint8_t* o = out + b * 320;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const auto extremes = [&](int i, __m128i& lo_k, __m128i& hi_k) {
        block_key_extremes(p + (8 * h + i) * row_bytes, lo_k, hi_k);
      };
      block_scales sc;
      if (!q4_scales_of(8, extremes, sc)) return false;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 16 * h), _mm_load_si128(reinterpret_cast<const __m128i*>(sc.d16)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 32 + 16 * h), _mm_load_si128(reinterpret_cast<const __m128i*>(sc.m16)));
      const __m256 dw = _mm256_load_ps(sc.d);
      _mm256_store_ps(d + 8 * h, dw);
      _mm256_store_ps(mins + 8 * h, _mm256_load_ps(sc.m));
      // a zero scale: every byte 0
      _mm256_store_ps(inv + 8 * h, _mm256_andnot_ps(_mm256_cmp_ps(dw, zero, _CMP_EQ_OQ), _mm256_load_ps(sc.inv)));
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m256i pair[2];
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          const int l = 4 * k + i;
          const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + l * row_bytes + 32 * h));
          const __m256 mv = _mm256_broadcast_ss(mins + l), iv = _mm256_broadcast_ss(inv + l);
          const __m256 a = _mm256_sub_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)), mv);
          const __m256 c = _mm256_sub_ps(_mm256_castsi256_ps(_mm256_and_si256(w, high_words)), mv);
          const __m256 ta = _mm256_fmadd_ps(a, iv, m), tc = _mm256_fmadd_ps(c, iv, m);
          const __m256 off = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_fmsub_ps(a, iv, _mm256_sub_ps(ta, m))),
                                           _mm256_andnot_ps(sign, _mm256_fmsub_ps(c, iv, _mm256_sub_ps(tc, m))));
          __m256i sa, sc;
          if (_mm256_movemask_ps(_mm256_cmp_ps(off, near_half, _CMP_GT_OQ)) != 0) {
            const __m256 dv = _mm256_broadcast_ss(d + l);
            sa = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(round_away(_mm256_div_ps(a, dv)), zero), fifteen));
            sc = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(round_away(_mm256_div_ps(c, dv)), zero), fifteen));
          } else {
            sa = _mm256_sub_epi32(_mm256_castps_si256(_mm256_min_ps(_mm256_max_ps(ta, m), hi_t)), m_bits);
            sc = _mm256_sub_epi32(_mm256_castps_si256(_mm256_min_ps(_mm256_max_ps(tc, m), hi_t)), m_bits);
          }
          pack_row(pair, i, _mm256_or_si256(sa, _mm256_slli_epi32(sc, 4)));
        }
        store_run_lanes(o + 64 + 128 * h + 16 * k, pair);  // lane j: run 2h + j, rows 4k … 4k+3
      }
    }
  }
  return true;
}

void lanes_to_group_q8_avx2(const std::uint8_t* lanes, std::uint8_t* rows, std::int64_t blocks, std::int64_t row_bytes) {
  // Row l's eight dwords, one from each run (runs 0–3 its even values, 4–7 its odd ones),
  // gathered; the evens' and odds' bytes interleaved give its 32 values in order, XOR 0x80.
  const __m256i runs = _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448);
  const __m128i flip = _mm_set1_epi8(char(0x80));
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* in = lanes + b * 544;
    for (int l = 0; l < 16; ++l) {
      std::uint8_t* out = rows + l * row_bytes + b * 34;
      __builtin_memcpy(out, in + 2 * l, 2);
      const __m256i v = _mm256_i32gather_epi32(reinterpret_cast<const int*>(in + 32 + 4 * l), runs, 1);
      const __m128i even = _mm_xor_si128(_mm256_castsi256_si128(v), flip), odd = _mm_xor_si128(_mm256_extracti128_si256(v, 1), flip);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2), _mm_unpacklo_epi8(even, odd));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 18), _mm_unpackhi_epi8(even, odd));
    }
  }
}

void lanes_to_group_q4_avx2(const std::uint8_t* lanes, std::uint8_t* rows, std::int64_t blocks, std::int64_t row_bytes) {
  // Row l's scale and minimum, then its four dwords of nibbles, one from each run.
  const __m128i runs = _mm_setr_epi32(0, 64, 128, 192);
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* in = lanes + b * 320;
    for (int l = 0; l < 16; ++l) {
      std::uint8_t* out = rows + l * row_bytes + b * 20;
      __builtin_memcpy(out, in + 2 * l, 2);
      __builtin_memcpy(out + 2, in + 32 + 2 * l, 2);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 4), _mm_i32gather_epi32(reinterpret_cast<const int*>(in + 64 + 4 * l), runs, 1));
    }
  }
}

}  // namespace mpakt::cpu_fast
