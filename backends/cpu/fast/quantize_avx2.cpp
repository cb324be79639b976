// Quantize-on-load kernels for AVX2 (with F16C for the scales): the AVX-512 kernels' steps at
// half the width, for the many volunteers whose CPUs stop at AVX2. Each block of 32 values
// takes the reference's IEEE operations in the same order — the scale from the block's
// extreme values divided by 127 (q8) or 15 (q4), rounded to f16 by F16C (nearest even, as
// f32_to_f16 does for finite values), each value divided by the widened scale, rounded half
// away from zero without std::round (t = trunc(v); v − t is exact at these magnitudes; one is
// added away from zero when |v − t| ≥ 0.5), clamped, narrowed and packed.

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "backends/cpu/fast/quantize_kernels.hpp"

namespace mpakt::cpu_fast {

namespace {

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

}  // namespace

bool quantize_q8_row_avx2(const void* src, quant_source from, std::uint8_t* dst, std::int64_t n) {
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
    const __m128i d16 = _mm256_cvtps_ph(_mm256_div_ps(_mm256_load_ps(amax), _mm256_set1_ps(127.0f)), _MM_FROUND_TO_NEAREST_INT);
    alignas(32) float d[8];
    alignas(16) std::uint16_t d16s[8];
    _mm256_store_ps(d, _mm256_cvtph_ps(d16));
    _mm_store_si128(reinterpret_cast<__m128i*>(d16s), d16);
    for (int i = 0; i < count; ++i) {
      std::uint8_t* blk = dst + (b + i) * 34;
      __builtin_memcpy(blk, &d16s[i], 2);
      if (d[i] == 0) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk + 2), _mm256_setzero_si256());
        continue;
      }
      __m256 x[4];
      load32(src, from, (b + i) * 32, x);
      const __m256 dv = _mm256_set1_ps(d[i]);
      __m256 q[4];
      for (int k = 0; k < 4; ++k) q[k] = _mm256_min_ps(_mm256_max_ps(round_away(_mm256_div_ps(x[k], dv)), lo_q), hi_q);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk + 2), narrow_in_order(q));
    }
  }
  return true;
}

bool quantize_q4_row_avx2(const void* src, quant_source from, std::uint8_t* dst, std::int64_t n) {
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
    const __m128i d16 = _mm256_cvtps_ph(_mm256_div_ps(_mm256_sub_ps(hiv, lov), fifteen), _MM_FROUND_TO_NEAREST_INT);
    const __m128i m16 = _mm256_cvtps_ph(lov, _MM_FROUND_TO_NEAREST_INT);
    alignas(32) float d[8], m[8];
    alignas(16) std::uint16_t d16s[8], m16s[8];
    _mm256_store_ps(d, _mm256_cvtph_ps(d16));
    _mm256_store_ps(m, _mm256_cvtph_ps(m16));
    _mm_store_si128(reinterpret_cast<__m128i*>(d16s), d16);
    _mm_store_si128(reinterpret_cast<__m128i*>(m16s), m16);
    for (int i = 0; i < count; ++i) {
      std::uint8_t* blk = dst + (b + i) * 20;
      __builtin_memcpy(blk, &d16s[i], 2);
      __builtin_memcpy(blk + 2, &m16s[i], 2);
      if (d[i] == 0) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + 4), _mm_setzero_si128());
        continue;
      }
      __m256 x[4];
      load32(src, from, (b + i) * 32, x);
      const __m256 dv = _mm256_set1_ps(d[i]), mv = _mm256_set1_ps(m[i]);
      __m256 q[4];
      for (int k = 0; k < 4; ++k)
        q[k] = _mm256_min_ps(_mm256_max_ps(round_away(_mm256_div_ps(_mm256_sub_ps(x[k], mv), dv)), zero), fifteen);
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

}  // namespace mpakt::cpu_fast
