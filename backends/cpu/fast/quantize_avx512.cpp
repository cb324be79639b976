// Quantize-on-load kernels for AVX-512 (F/BW/VL/DQ, with F16C for the scales). Each block of
// 32 values takes the reference's steps in the same IEEE operations, 16 lanes at a time:
// the scale from the block's extreme values divided by 127 (q8) or 15 (q4) and rounded to
// f16 (F16C rounds to nearest even, as f32_to_f16 does for finite values), each value divided
// by the widened scale (an exact IEEE division, like the reference's), rounded half away from
// zero, clamped and packed. Rounding half away from zero is done exactly, without the
// reference's std::round call: t = trunc(v); v − t is exact for these magnitudes; one is
// added away from zero when |v − t| ≥ 0.5.

// GCC 12's AVX-512 headers start many intrinsics from a self-initialised "undefined" vector,
// which -Wmaybe-uninitialized reports wherever they are inlined here (a false alarm).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "backends/cpu/fast/quantize_kernels.hpp"

namespace mpakt::cpu_fast {

namespace {

/// 16 values from `first` on, widened to f32.
inline __m512 load16(const void* src, quant_source from, std::int64_t first) {
  if (from == quant_source::bf16) {
    const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const std::uint16_t*>(src) + first));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(words), 16));
  }
  return _mm512_loadu_ps(static_cast<const float*>(src) + first);
}

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

}  // namespace

bool quantize_q8_row_avx512(const void* src, quant_source from, std::uint8_t* dst, std::int64_t n) {
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512 lo_q = _mm512_set1_ps(-127.0f), hi_q = _mm512_set1_ps(127.0f);
  const std::int64_t blocks = n / 32;
  // Sixteen blocks at a time (the last group may be shorter): their extremes first, then their
  // scales in one division and one rounding to f16 — lane for lane the reference's scalar
  // steps, which block by block made a chain of dependent operations — then each block's
  // values divided. Lanes past the last block hold 0 and are never stored.
  for (std::int64_t b = 0; b < blocks; b += 16) {
    const int count = int(std::min<std::int64_t>(16, blocks - b));
    alignas(64) float amax[16] = {};
    __mmask16 bad = 0;
    for (int i = 0; i < count; ++i) {
      const __m512 x0 = load16(src, from, (b + i) * 32), x1 = load16(src, from, (b + i) * 32 + 16);
      bad |= non_finite(x0, x1);
      amax[i] = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
    }
    if (bad) return false;
    const __m256i d16 = _mm512_cvtps_ph(_mm512_div_ps(_mm512_load_ps(amax), _mm512_set1_ps(127.0f)), _MM_FROUND_TO_NEAREST_INT);
    alignas(64) float d[16];
    alignas(32) std::uint16_t d16s[16];
    _mm512_store_ps(d, _mm512_cvtph_ps(d16));
    _mm256_store_si256(reinterpret_cast<__m256i*>(d16s), d16);
    for (int i = 0; i < count; ++i) {
      std::uint8_t* blk = dst + (b + i) * 34;
      __builtin_memcpy(blk, &d16s[i], 2);
      if (d[i] == 0) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(blk + 2), _mm256_setzero_si256());
        continue;
      }
      const __m512 dv = _mm512_set1_ps(d[i]);
      for (int h = 0; h < 2; ++h) {
        __m512 q = round_away(_mm512_div_ps(load16(src, from, (b + i) * 32 + 16 * h), dv));
        q = _mm512_min_ps(_mm512_max_ps(q, lo_q), hi_q);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + 2 + 16 * h), _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(q)));
      }
    }
  }
  return true;
}

bool quantize_q4_row_avx512(const void* src, quant_source from, std::uint8_t* dst, std::int64_t n) {
  const __m512 zero = _mm512_setzero_ps(), fifteen = _mm512_set1_ps(15.0f);
  const std::int64_t blocks = n / 32;
  // Sixteen blocks at a time, as q8: extremes, then their scales and minimums together.
  for (std::int64_t b = 0; b < blocks; b += 16) {
    const int count = int(std::min<std::int64_t>(16, blocks - b));
    const __mmask16 used = __mmask16((1u << count) - 1);
    alignas(64) float lo[16] = {}, hi[16] = {};
    __mmask16 bad = 0;
    for (int i = 0; i < count; ++i) {
      const __m512 x0 = load16(src, from, (b + i) * 32), x1 = load16(src, from, (b + i) * 32 + 16);
      bad |= non_finite(x0, x1);
      lo[i] = _mm512_reduce_min_ps(_mm512_min_ps(x0, x1));
      hi[i] = _mm512_reduce_max_ps(_mm512_max_ps(x0, x1));
    }
    if (bad) return false;
    const __m512 lov = _mm512_load_ps(lo), hiv = _mm512_load_ps(hi);
    // (which zero the reference keeps depends on order)
    if ((_mm512_cmp_ps_mask(lov, zero, _CMP_EQ_OQ) | _mm512_cmp_ps_mask(hiv, zero, _CMP_EQ_OQ)) & used) return false;
    const __m256i d16 = _mm512_cvtps_ph(_mm512_div_ps(_mm512_sub_ps(hiv, lov), fifteen), _MM_FROUND_TO_NEAREST_INT);
    const __m256i m16 = _mm512_cvtps_ph(lov, _MM_FROUND_TO_NEAREST_INT);
    alignas(64) float d[16], m[16];
    alignas(32) std::uint16_t d16s[16], m16s[16];
    _mm512_store_ps(d, _mm512_cvtph_ps(d16));
    _mm512_store_ps(m, _mm512_cvtph_ps(m16));
    _mm256_store_si256(reinterpret_cast<__m256i*>(d16s), d16);
    _mm256_store_si256(reinterpret_cast<__m256i*>(m16s), m16);
    for (int i = 0; i < count; ++i) {
      std::uint8_t* blk = dst + (b + i) * 20;
      __builtin_memcpy(blk, &d16s[i], 2);
      __builtin_memcpy(blk + 2, &m16s[i], 2);
      if (d[i] == 0) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + 4), _mm_setzero_si128());
        continue;
      }
      const __m512 dv = _mm512_set1_ps(d[i]), mv = _mm512_set1_ps(m[i]);
      __m128i q8[2];
      for (int h = 0; h < 2; ++h) {
        __m512 q = round_away(_mm512_div_ps(_mm512_sub_ps(load16(src, from, (b + i) * 32 + 16 * h), mv), dv));
        q = _mm512_min_ps(_mm512_max_ps(q, zero), fifteen);
        q8[h] = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q));  // values 0..15, one per byte
      }
      // Byte i of the block = value 2i | value 2i+1 << 4: pairs as 16-bit lanes, then narrowed.
      const __m256i pairs = _mm256_set_m128i(q8[1], q8[0]);
      const __m256i packed = _mm256_or_si256(_mm256_and_si256(pairs, _mm256_set1_epi16(0x00ff)),
                                             _mm256_slli_epi16(_mm256_srli_epi16(pairs, 8), 4));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(blk + 4), _mm256_cvtepi16_epi8(packed));
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

}  // namespace mpakt::cpu_fast
