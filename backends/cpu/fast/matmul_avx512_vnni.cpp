/// Integer products against q8/q4 weights stored [N, K] for CPUs with AVX512-VNNI: pairs of
/// weight blocks in vpdpbusd (below). The int16 kernel of the AVX-512 level (one block per
/// vpmaddwd) serves this level too where these do not: a block's sum starts from zero, so
/// vpdpwssd would gain nothing over vpmaddwd.
/// Compiled for that level only: see isa_kernels.hpp for what this file may include.

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>

#include "backends/cpu/fast/isa_kernels.hpp"

// ------------------------------------------------------------------ pairs of blocks
//
// A pair of weight blocks meets the activations in one vpdpbusd (u8 × s8 → s32, 64
// products). The activations (int8_rows) are int16 split into two int8 planes, one vpdpbusd
// each joined by a shift, for decode and batches on any VNNI CPU (many rows take the lanes
// kernel below, or AMX's tiles). q8: the weights are the signed operand and the activations,
// offset by 128, the unsigned one (the offset's share, 128·Σw, is one more vpdpbusd per weight
// pair, shared by every row). Per-block scales are applied in f32, per pair of blocks.
//
// q4 takes four blocks at a time (a quad, 80 bytes of a weight row): two 64-byte loads and one
// word permute gather the quad's 64 bytes of nibbles, another its eight f16 factors; the low
// nibbles (even values) and the high ones (odd values) are the unsigned operands of two
// vpdpbusd per activation plane, against activations laid out [even values b0..b3, odd values
// b0..b3]. Per quad and weight row that is half the instructions of two pairs — the block
// layout's scale and unpacking work, not the weights' bytes, had held q4 decode.

namespace mpakt::cpu_fast::avx512_vnni {

namespace {

using i64 = std::int64_t;

constexpr i64 q8_bytes = 34, q4_bytes = 20;
inline i64 min_i64(i64 a, i64 b) { return a < b ? a : b; }

/// How far ahead (bytes) a one-column tile (a range's odd last column) and a two-column tile
/// (a weight row from each half of the range) ask for their weight rows' lines.
constexpr i64 stream_ahead = 512, pair_ahead = 2048;

/// q8: a pair of blocks.
struct wpair {
  __m512i q;
  __m512 d;          ///< the two blocks' scales, each in its eight lanes
  __m512i neg_corr;  ///< −128·Σq per 4-group, where each row's sum starts
};

/// The f16 scales of blocks 2p and 2p+1 as f32 lanes, [d0, d1], converted at once; scalar
/// loads and shifts (on ports the vector work leaves free) put them side by side.
inline __m128 pair_halves(std::uint64_t packed) { return _mm_cvtph_ps(_mm_cvtsi64_si128(std::int64_t(packed))); }

inline std::uint32_t u16_at(const std::uint8_t* p) {
  std::uint16_t v;
  __builtin_memcpy(&v, p, 2);
  return v;
}
inline std::uint32_t u32_at(const std::uint8_t* p) {
  std::uint32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}
/// Blocks 2p and 2p+1 of a q8 weight row (the second may be past the end: `single`).
inline wpair load_pair(const std::uint8_t* b0, bool single) {
  wpair w;
  const std::uint8_t* b1 = b0 + q8_bytes;
  const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
  const __m256i q1 = single ? _mm256_setzero_si256() : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b1 + 2));
  w.q = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
  w.neg_corr = _mm512_sub_epi32(_mm512_setzero_si512(),
                                _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(char(0x80)), w.q));
  const __m512 h = _mm512_castps128_ps512(pair_halves(u16_at(b0) | (single ? 0u : u16_at(b1) << 16)));
  // lanes 0–7: block 2p, 8–15: block 2p+1 (zero when single: its half is 0)
  w.d = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), h);
  return w;
}

/// q4's quads (above): the word indices, in a quad's two overlapping loads (bytes [0, 64) as
/// words 0–31, bytes [16, 80) as 32–63), of block b's nibbles (words 10b + 2 … 10b + 9) and of
/// its factors d and m (words 10b and 10b + 1).
inline __m512i quad_nibble_words() {
  alignas(64) std::int16_t idx[32];
  for (int o = 0; o < 32; ++o) {
    const int w = 10 * (o / 8) + 2 + o % 8;
    idx[o] = std::int16_t(w < 32 ? w : 32 + w - 8);
  }
  return _mm512_load_si512(idx);
}
inline __m512i quad_factor_words() {
  alignas(64) std::int16_t idx[32] = {};
  for (int o = 0; o < 8; ++o) idx[o] = std::int16_t(10 * (o / 2) + o % 2);
  return _mm512_load_si512(idx);
}

struct wquad {
  __m512i lo, hi;  ///< the quad's even and odd values, 16 per block, blocks in order
  __m256 h;        ///< [d0, m0, d1, m1, d2, m2, d3, m3]
};

/// Quad g of a weight row at `at` (the row's first byte + 80g) holding `nb` blocks (1–4; the
/// missing ones read as zero: masked loads that never touch bytes past the row).
inline wquad load_quad(const std::uint8_t* at, int nb, __m512i nib_idx, __m512i fac_idx) {
  __m512i a, b;
  if (nb == 4) {
    a = _mm512_loadu_si512(at);
    b = _mm512_loadu_si512(at + 16);
  } else {
    const int bytes = nb * q4_bytes;
    a = _mm512_maskz_loadu_epi8(bytes >= 64 ? ~__mmask64(0) : (__mmask64(1) << bytes) - 1, at);
    b = _mm512_maskz_loadu_epi8(bytes <= 16 ? __mmask64(0) : (__mmask64(1) << (bytes - 16)) - 1, at + 16);
  }
  const __m512i nib = _mm512_permutex2var_epi16(a, nib_idx, b), mask = _mm512_set1_epi8(0x0f);
  wquad w;
  w.lo = _mm512_and_si512(nib, mask);
  w.hi = _mm512_and_si512(_mm512_srli_epi16(nib, 4), mask);
  w.h = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi16(fac_idx, a)));
  return w;
}

/// q4 weight rows n0, n0 + dn, … (NT) against activation rows [r0, r0 + RT), a quad at a time:
/// per activation plane 256·(hi's dot) + (lo's dot), each dot the even values' vpdpbusd and
/// then the odd ones'; each quad's [d·s, m·S] in one eight-lane multiply, the d·s lanes spread
/// over the dot's lanes (four per block), the m·S lanes summed apart and added last.
template <int RT, int NT>
void quad_tile(const int8_rows& x, const int8_pairs_product& a, i64 r0, i64 n0, i64 dn) {
  const i64 blocks = x.k / 32, quads = (blocks + 3) / 4;
  __m512 acc[RT][NT];
  __m256 acc_m[RT][NT];
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) {
      acc[i][j] = _mm512_setzero_ps();
      acc_m[i][j] = _mm256_setzero_ps();
    }
  const std::uint8_t* wr[NT];
#pragma GCC unroll 16
  for (int j = 0; j < NT; ++j) wr[j] = a.w + (n0 + j * dn) * a.w_row_bytes;
  const __m512i nib_idx = quad_nibble_words(), fac_idx = quad_factor_words();
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
  const i64 ahead = NT == 1 ? stream_ahead : pair_ahead;
  for (i64 g = 0; g < quads; ++g) {
    const int nb = int(min_i64(4, blocks - 4 * g));
    if (r0 == 0) {  // (the first row tile: the later ones find the weights in L1)
#pragma GCC unroll 16
      for (int j = 0; j < NT; ++j) {
        const char* at = reinterpret_cast<const char*>(wr[j] + ahead + g * 4 * q4_bytes);
        _mm_prefetch(at, _MM_HINT_T0);
        _mm_prefetch(at + 64, _MM_HINT_T0);
      }
    }
    wquad w[NT];
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) w[j] = load_quad(wr[j] + g * 4 * q4_bytes, nb, nib_idx, fac_idx);
#pragma GCC unroll 16
    for (int i = 0; i < RT; ++i) {
      const i64 at = ((r0 + i) * quads + g) * 128;
      const __m512i he = _mm512_loadu_si512(x.q + at), ho = _mm512_loadu_si512(x.q + at + 64);
      const __m512i le = _mm512_loadu_si512(x.lo + at), lodd = _mm512_loadu_si512(x.lo + at + 64);
      const __m256 xp = _mm256_loadu_ps(x.scale + ((r0 + i) * quads + g) * q4_quad_scales);
#pragma GCC unroll 16
      for (int j = 0; j < NT; ++j) {
        __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[j].lo, he);
        dot = _mm512_dpbusd_epi32(dot, w[j].hi, ho);
        dot = _mm512_dpbusd_epi32(_mm512_slli_epi32(dot, 8), w[j].lo, le);
        dot = _mm512_dpbusd_epi32(dot, w[j].hi, lodd);
        const __m256 f = _mm256_mul_ps(w[j].h, xp);
        acc_m[i][j] = _mm256_add_ps(acc_m[i][j], f);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(spread, _mm512_castps256_ps512(f)), acc[i][j]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) {
      const __m256 m = acc_m[i][j];
      float v = _mm512_reduce_add_ps(acc[i][j]) + ((m[1] + m[3]) + (m[5] + m[7]));
      if (a.bias) v += a.bias[n0 + j * dn];
      a.y[(r0 + i) * a.n + n0 + j * dn] = v;
    }
}

/// q8 weight rows n0, n0 + dn, … (NT) against activation rows [r0, r0 + RT), a pair of blocks at
/// a time, in the two-plane int16 form of the activations (int8_rows): two vpdpbusd per pair,
/// 256·(hi's dot) + (lo's dot).
template <int RT, int NT>
void pair_tile(const int8_rows& x, const int8_pairs_product& a, i64 r0, i64 n0, i64 dn) {
  const i64 blocks = x.k / 32, pairs = (blocks + 1) / 2;
  __m512 acc[RT][NT];
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
  const std::uint8_t* wr[NT];
#pragma GCC unroll 16
  for (int j = 0; j < NT; ++j) wr[j] = a.w + (n0 + j * dn) * a.w_row_bytes;
  // Decode and small batches read the weights once per pass, each weight row a sequential
  // stream: its lines are asked for a little ahead while these are used.
  const i64 ahead = NT == 1 ? stream_ahead : pair_ahead;
  for (i64 p = 0; p < pairs; ++p) {
    const bool single = 2 * p + 1 == blocks;
    if (r0 == 0) {  // (the first row tile: the later ones find the weights in L1)
#pragma GCC unroll 16
      for (int j = 0; j < NT; ++j) {
        const char* at = reinterpret_cast<const char*>(wr[j] + ahead + 2 * p * q8_bytes);
        _mm_prefetch(at, _MM_HINT_T0);
        _mm_prefetch(at + 64, _MM_HINT_T0);
      }
    }
    wpair w[NT];
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) w[j] = load_pair(wr[j] + 2 * p * q8_bytes, single);
#pragma GCC unroll 16
    for (int i = 0; i < RT; ++i) {
      const i64 r = r0 + i;
      const __m512i xq = _mm512_loadu_si512(x.q + r * pairs * 64 + p * 64);
      const __m512i xl = _mm512_loadu_si512(x.lo + r * pairs * 64 + p * 64);
      const __m512 xs = _mm512_loadu_ps(x.scale + (r * pairs + p) * q8_pair_scales);
#pragma GCC unroll 16
      for (int j = 0; j < NT; ++j) {
        __m512i dot = _mm512_dpbusd_epi32(w[j].neg_corr, xq, w[j].q);  // (hi + 128)·q − 128·Σq
        dot = _mm512_dpbusd_epi32(_mm512_slli_epi32(dot, 8), xl, w[j].q);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(w[j].d, xs), acc[i][j]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) {
      float v = _mm512_reduce_add_ps(acc[i][j]);
      if (a.bias) v += a.bias[n0 + j * dn];
      a.y[(r0 + i) * a.n + n0 + j * dn] = v;
    }
}

template <wtype T, int NT, int RT>
void pair_tile_rows(const int8_rows& x, const int8_pairs_product& a, int rt, i64 r0, i64 n0, i64 dn) {
  if (rt == RT) {
    if constexpr (T == wtype::q8) pair_tile<RT, NT>(x, a, r0, n0, dn);
    else quad_tile<RT, NT>(x, a, r0, n0, dn);
  }
  else if constexpr (RT > 1) pair_tile_rows<T, NT, RT - 1>(x, a, rt, r0, n0, dn);
}

/// Weight rows n0, n0 + dn, … (NT of them) against every activation row, in tiles of up to 4.
template <wtype T, int NT>
void pair_columns(const int8_pairs_product& a, i64 n0, i64 dn) {
  constexpr int RT = 4;
  for (i64 r0 = 0; r0 < a.x.rows; r0 += RT) pair_tile_rows<T, NT, RT>(a.x, a, int(min_i64(RT, a.x.rows - r0)), r0, n0, dn);
}

/// Each thread reads its columns' weights as two sequential streams, a weight row from each
/// half of its range at a time, as the float kernels do (matmul_avx512.cpp, which says why):
/// on a Zen 4 that took one-row q8 decode from 27 to 31 GB/s in cache and q4's pairs from 16
/// to 17.5 (q4's quads: one stream per thread 17 GB/s from memory, two 21). The tile's shape
/// never changes a bit.
template <wtype T>
void pair_range(const int8_pairs_product& a, i64 n_begin, i64 n_end) {
  const i64 half = (n_end - n_begin) / 2;
  for (i64 n0 = n_begin; n0 < n_begin + half; ++n0) pair_columns<T, 2>(a, n0, half);
  if ((n_end - n_begin) % 2) pair_columns<T, 1>(a, n_end - 1, 1);
}

}  // namespace

namespace {

inline void store16(std::uint8_t* at, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(at), v); }

/// Rows [r_begin, r_end) quantized per block of 32 in the layouts of int8_rows, in the
/// two-plane int16 form: max|x|/int16_levels; q8: q = 256·h + l with l in [0, 255], hi
/// stored as h + 128; q4: h = (q + 128) >> 8 and l in [−128, 127], both signed. Nearest even
/// throughout.
void quantize_pairs(const float* x, i64 k, i64 r_begin, i64 r_end, wtype type, std::uint8_t* hi, std::uint8_t* lo,
                    float* scale) {
  const i64 blocks = k / 32, plane = int8_rows_plane_bytes(type, k), per_row = int8_rows_scales(type, k);
  const __m512 sign = _mm512_set1_ps(-0.0f);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i c128 = _mm512_set1_epi32(128);
  constexpr float levels = int16_levels;
  for (i64 r = r_begin; r < r_end; ++r) {
    std::uint8_t* hr = hi + r * plane;
    std::uint8_t* lr = lo + r * plane;
    float* sr = scale + r * per_row;
    // the blocks a last pair or quad lacks: zero values and scales, so their lanes add nothing
    for (i64 at = 0; at < plane; at += 64) {
      _mm512_storeu_si512(hr + at, _mm512_setzero_si512());
      _mm512_storeu_si512(lr + at, _mm512_setzero_si512());
    }
    for (i64 l = 0; l < per_row; ++l) sr[l] = 0.0f;
    for (i64 b = 0; b < blocks; ++b) {
      const float* src = x + r * k + b * 32;
      const __m512 v0 = _mm512_loadu_ps(src), v1 = _mm512_loadu_ps(src + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
      const bool finite = (_mm512_fpclass_ps_mask(v0, 0x99) | _mm512_fpclass_ps_mask(v1, 0x99)) == 0;
      const __m512 iv = _mm512_set1_ps(amax > 0 ? levels / amax : 0.0f);
      const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, iv)), i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, iv));
      const float s = finite ? amax / levels : __builtin_nanf("");
      if (type == wtype::q8) {
        const i64 p = b / 2, second = b % 2;
        const __m512i mask = _mm512_set1_epi32(0xff);
        store16(hr + p * 64 + second * 32, _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_srai_epi32(i0, 8), c128)));
        store16(hr + p * 64 + second * 32 + 16, _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_srai_epi32(i1, 8), c128)));
        store16(lr + p * 64 + second * 32, _mm512_cvtepi32_epi8(_mm512_and_si512(i0, mask)));
        store16(lr + p * 64 + second * 32 + 16, _mm512_cvtepi32_epi8(_mm512_and_si512(i1, mask)));
        for (int l = 0; l < 8; ++l) sr[p * q8_pair_scales + second * 8 + l] = s;
        continue;
      }
      // q4: quad g = b / 4, the block's even values at 16·(b % 4), its odd ones 64 bytes on
      const i64 g = b / 4, pos = b % 4;
      const __m512i e = _mm512_permutex2var_epi32(i0, even, i1), o = _mm512_permutex2var_epi32(i0, odd, i1);
      const __m512i he = _mm512_srai_epi32(_mm512_add_epi32(e, c128), 8), ho = _mm512_srai_epi32(_mm512_add_epi32(o, c128), 8);
      store16(hr + g * 128 + pos * 16, _mm512_cvtepi32_epi8(he));
      store16(hr + g * 128 + 64 + pos * 16, _mm512_cvtepi32_epi8(ho));
      store16(lr + g * 128 + pos * 16, _mm512_cvtepi32_epi8(_mm512_sub_epi32(e, _mm512_slli_epi32(he, 8))));
      store16(lr + g * 128 + 64 + pos * 16, _mm512_cvtepi32_epi8(_mm512_sub_epi32(o, _mm512_slli_epi32(ho, 8))));
      // (a block holding NaN or ±∞ converts to out-of-range integers: its sum is not taken)
      const float sum = finite ? s * float(_mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1))) : s;
      sr[g * q4_quad_scales + pos * 2] = s;
      sr[g * q4_quad_scales + pos * 2 + 1] = sum;
    }
  }
}

}  // namespace

void int16_split_quantize_rows(const float* x, i64 k, i64 r_begin, i64 r_end, wtype type, std::uint8_t* hi,
                               std::uint8_t* lo, float* scale) {
  quantize_pairs(x, k, r_begin, r_end, type, hi, lo, scale);
}

void int8_pairs_range(const int8_pairs_product& a, i64 n_begin, i64 n_end) {
  if (a.type == wtype::q8) pair_range<wtype::q8>(a, n_begin, n_end);
  else pair_range<wtype::q4>(a, n_begin, n_end);
}

// ------------------------------------------------------------------ q8 and q4 held in lanes
//
// A CPU worker holds its q8/q4 matrices in lanes (dtype.hpp): per sixteen weight rows and
// block, their sixteen scales (q4: and minimums) side by side and 64-byte runs holding four
// values of the block for each row — q4: four runs of nibbles, run j bytes 4j..4j+3 of each
// row's block, whose low nibbles are values 8j, 8j+2, … and high nibbles the odd values between;
// q8: eight runs of unsigned bytes (q + 128), runs 0–3 those even values and runs 4–7 the odd.
// Against the two-plane activations of the quads (even values of a block, then its odd ones),
// each run meets one broadcast four-byte run of activations per plane, so a block's integer dot
// lands in the lane of its output: one conversion and two multiply-adds scale sixteen outputs,
// where the row-major kernels spent one per block or four of one row. q4 adds m·S after d·s·dot;
// q8 takes off the weights' offset as −128·d·S (S = s·Σq of the activations' block). Each output
// adds its blocks in order whatever the tile: a row's bits do not depend on the rows beside it.

namespace {

/// Bytes of a group's block held in lanes, and where in it the runs of values start.
template <wtype T>
constexpr i64 held_block = 16 * (T == wtype::q8 ? q8_bytes : q4_bytes);
template <wtype T>
constexpr i64 held_runs = T == wtype::q8 ? 32 : 64;

/// Run pair r (0–3) of a group's block held in lanes (`blk`): the sixteen rows' four values
/// 8r, 8r+2, 8r+4, 8r+6 (ev) and 8r+1, …, 8r+7 (od), as unsigned bytes (q8: q + 128 as
/// stored; q4: a run's low and high nibbles).
template <wtype T>
inline void held_run_pair(const std::uint8_t* blk, int r, __m512i& ev, __m512i& od) {
  const std::uint8_t* runs = blk + held_runs<T>;
  if constexpr (T == wtype::q8) {
    ev = _mm512_loadu_si512(runs + 64 * r);
    od = _mm512_loadu_si512(runs + 64 * (4 + r));
  } else {
    const __m512i mask = _mm512_set1_epi8(0x0f), w = _mm512_loadu_si512(runs + 64 * r);
    ev = _mm512_and_si512(w, mask);
    od = _mm512_and_si512(_mm512_srli_epi16(w, 4), mask);
  }
}

/// Activation rows [r0, r0 + RT) against the sixteen-row groups g0 and g0 + dg (NT of them).
/// No software prefetch: a group's blocks lie end to end, the hardware's stream prefetch
/// follows them, and asking for each block's lines ahead took one thread from memory from 26–28
/// to 17–20 GB/s (q8) and 22–26 (q4) on a Zen 4.
template <wtype T, int RT, int NT>
void lanes_tile(const int8_pairs_product& a, i64 r0, i64 g0, i64 dg) {
  constexpr i64 lb = held_block<T>;
  const int8_rows& x = a.x;
  const i64 blocks = x.k / 32, quads = (blocks + 3) / 4;
  const std::uint8_t* gw[NT];
#pragma GCC unroll 4
  for (int j = 0; j < NT; ++j) gw[j] = a.w + (g0 + j * dg) * blocks * lb;
  __m512 acc[RT][NT];
#pragma GCC unroll 4
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
  for (i64 b = 0; b < blocks; ++b) {
    const i64 at = (b / 4) * 128 + 16 * (b % 4);  // the block's even values in its quad
    __m512i ah[RT][NT], al[RT][NT];
#pragma GCC unroll 4
    for (int i = 0; i < RT; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j) ah[i][j] = al[i][j] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      __m512i ev[NT], od[NT];  // the runs meeting values 8r, 8r+2, … and 8r+1, 8r+3, …
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j) held_run_pair<T>(gw[j] + b * lb, r, ev[j], od[j]);
#pragma GCC unroll 4
      for (int i = 0; i < RT; ++i) {
        const i64 row = (r0 + i) * quads * 128 + at + 4 * r;
        const __m512i eh = _mm512_set1_epi32(std::int32_t(u32_at(x.q + row))), oh = _mm512_set1_epi32(std::int32_t(u32_at(x.q + row + 64)));
        const __m512i el = _mm512_set1_epi32(std::int32_t(u32_at(x.lo + row))), ol = _mm512_set1_epi32(std::int32_t(u32_at(x.lo + row + 64)));
#pragma GCC unroll 4
        for (int j = 0; j < NT; ++j) {
          ah[i][j] = _mm512_dpbusd_epi32(ah[i][j], ev[j], eh);
          al[i][j] = _mm512_dpbusd_epi32(al[i][j], ev[j], el);
          ah[i][j] = _mm512_dpbusd_epi32(ah[i][j], od[j], oh);
          al[i][j] = _mm512_dpbusd_epi32(al[i][j], od[j], ol);
        }
      }
    }
    __m512 d[NT], m[NT];
#pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) {
      d[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gw[j] + b * lb)));
      if constexpr (T == wtype::q4) m[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gw[j] + b * lb + 32)));
    }
#pragma GCC unroll 4
    for (int i = 0; i < RT; ++i) {
      const float* sc = x.scale + ((r0 + i) * quads + b / 4) * q4_quad_scales + 2 * (b % 4);
      const __m512 s = _mm512_set1_ps(sc[0]), sum = _mm512_set1_ps(T == wtype::q8 ? -128.0f * sc[1] : sc[1]);
#pragma GCC unroll 4
      for (int j = 0; j < NT; ++j) {
        const __m512i dot = _mm512_add_epi32(_mm512_slli_epi32(ah[i][j], 8), al[i][j]);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(d[j], s), acc[i][j]);
        acc[i][j] = _mm512_fmadd_ps(T == wtype::q8 ? d[j] : m[j], sum, acc[i][j]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < RT; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NT; ++j) {
      const i64 n0 = (g0 + j * dg) * 16;
      __m512 v = acc[i][j];
      if (a.bias) v = _mm512_add_ps(v, _mm512_loadu_ps(a.bias + n0));
      _mm512_storeu_ps(a.y + (r0 + i) * a.n + n0, v);
    }
}

/// Groups g0, g0 + dg, … (NT) against every activation row, two rows at a time.
template <wtype T, int NT>
void lanes_groups(const int8_pairs_product& a, i64 g0, i64 dg) {
  i64 r0 = 0;
  for (; r0 + 2 <= a.x.rows; r0 += 2) lanes_tile<T, 2, NT>(a, r0, g0, dg);
  if (r0 < a.x.rows) lanes_tile<T, 1, NT>(a, r0, g0, dg);
}

template <wtype T>
void lanes_range(const int8_pairs_product& a, i64 n_begin, i64 n_end) {
  // two sequential streams per thread, a group from each half of the range (as pair_range)
  const i64 g_begin = n_begin / 16, g_end = n_end / 16, half = (g_end - g_begin) / 2;
  for (i64 g = g_begin; g < g_begin + half; ++g) lanes_groups<T, 2>(a, g, half);
  if ((g_end - g_begin) % 2) lanes_groups<T, 1>(a, g_end - 1, 1);
}

}  // namespace

void int8_held_lanes_range(const int8_pairs_product& a, i64 n_begin, i64 n_end) {
  if (a.type == wtype::q8) lanes_range<wtype::q8>(a, n_begin, n_end);
  else lanes_range<wtype::q4>(a, n_begin, n_end);
}

// ------------------------------------------------------------------ many rows: sixteen columns in the lanes
//
// A product with many rows (prefill on a CPU with VNNI but no AMX tiles) meets int8
// activations (int8_plain_rows, natural order: AVX2's many-row numbers) sixteen weight rows at
// a time, one output column per lane — AVX2's lanes at twice the width, in vpdpbusd. Once per
// call and sixteen rows, their blocks are laid out in a buffer of the thread as unsigned bytes
// (q4: the nibbles; q8: the value + 128) so that register j of a block holds values
// 4j..4j+3 of each of the sixteen; an activation row's four int8 values are broadcast as the
// signed operand. q8's offset adds 128·Σx per row and block, taken off before the sum starts.
// A block's integer sums then sit in the lanes of sixteen outputs and are scaled for all of
// them in one multiply-add, in the order AVX2's lanes use: the same bits as that kernel.

namespace {

#include "backends/cpu/fast/transpose8.inc"

constexpr int lane16 = 16;

/// pack16 for weights held in lanes (n0 a multiple of 16, all sixteen rows there): each run of
/// a block already holds four values of each row, even ones or odd ones (q4: the nibbles' low
/// and high halves; q8: q + 128 as stored); interleaving a run of even values with its run of odd
/// ones byte by byte gives each row's eight values in order, two registers' worth, and a word
/// permute puts the rows back in order — the registers pack16 makes from rows.
template <wtype T>
void pack16_held(const int8_lanes_product& a, i64 n0, __m512i* wv, float* d, float* m) {
  constexpr i64 lb = held_block<T>;
  const i64 blocks = a.x.k / 32;
  const std::uint8_t* group = a.w + (n0 / 16) * blocks * lb;
  // after the interleave, 128-bit lane L holds rows 4L, 4L+1 (first input) and 4L+2, 4L+3
  // (second), each as [values 0-3, values 4-7]
  const __m512i first = _mm512_setr_epi32(0, 2, 16, 18, 4, 6, 20, 22, 8, 10, 24, 26, 12, 14, 28, 30);
  const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(1));
  for (i64 b = 0; b < blocks; ++b) {
    const std::uint8_t* in = group + b * lb;
    _mm512_storeu_ps(d + b * lane16, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in))));
    if constexpr (T == wtype::q4)
      _mm512_storeu_ps(m + b * lane16, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 32))));
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      __m512i ev, od;
      held_run_pair<T>(in, r, ev, od);
      const __m512i lo = _mm512_unpacklo_epi8(ev, od), hi = _mm512_unpackhi_epi8(ev, od);
      _mm512_storeu_si512(wv + b * 8 + 2 * r, _mm512_permutex2var_epi32(lo, first, hi));
      _mm512_storeu_si512(wv + b * 8 + 2 * r + 1, _mm512_permutex2var_epi32(lo, second, hi));
    }
  }
}

/// Weight rows [n0, n0 + nc) (nc ≤ 16; missing rows zero, with zero scales) as described
/// above: per block eight registers, and the rows' scales (q4: and offsets) as 16 floats.
template <wtype T>
void pack16(const int8_lanes_product& a, i64 n0, int nc, __m512i* wv, float* d, float* m) {
  if (a.w_lanes) return pack16_held<T>(a, n0, wv, d, m);
  constexpr i64 bb = T == wtype::q8 ? q8_bytes : q4_bytes;
  const i64 blocks = a.x.k / 32;
  const __m128i nib = _mm_set1_epi8(0x0f);
  const __m256i offset = _mm256_set1_epi8(char(0x80));
  for (i64 b = 0; b < blocks; ++b) {
    __m256i col[lane16];
#pragma GCC unroll 16
    for (int c = 0; c < lane16; ++c) {
      if (c >= nc) {
        col[c] = _mm256_setzero_si256();
        d[b * lane16 + c] = 0.0f;
        if constexpr (T == wtype::q4) m[b * lane16 + c] = 0.0f;
        continue;
      }
      const std::uint8_t* blk = a.w + (n0 + c) * a.w_row_bytes + b * bb;
      d[b * lane16 + c] = _cvtsh_ss(std::uint16_t(u16_at(blk)));
      if constexpr (T == wtype::q4) {
        m[b * lane16 + c] = _cvtsh_ss(std::uint16_t(u16_at(blk + 2)));
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
        const __m128i lo = _mm_and_si128(raw, nib), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), nib);
        col[c] = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));  // values in order
      } else {
        col[c] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)), offset);
      }
    }
    transpose8(col);
    transpose8(col + 8);
#pragma GCC unroll 16
    for (int j = 0; j < 8; ++j) _mm512_storeu_si512(wv + b * 8 + j, _mm512_inserti64x4(_mm512_castsi256_si512(col[j]), col[8 + j], 1));
  }
}

/// Activation rows [r0, r0 + RT) against the sixteen packed weight rows from n0 (nc real);
/// q8 takes each row's Σx per block from the activations' `qsums`.
template <wtype T, int RT>
void lanes16_rows(const int8_lanes_product& a, const __m512i* wv, const float* d, const float* m, i64 r0, i64 n0, int nc) {
  const i64 k = a.x.k, blocks = k / 32;
  __m512 acc[RT];
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i) acc[i] = _mm512_setzero_ps();
  for (i64 b = 0; b < blocks; ++b) {
    __m512i s[RT];
    const std::int8_t* xb = a.x.q + r0 * k + b * 32;
#pragma GCC unroll 16
    for (int i = 0; i < RT; ++i)
      s[i] = T == wtype::q8 ? _mm512_set1_epi32(-128 * a.x.qsums[(r0 + i) * blocks + b]) : _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m512i w = _mm512_loadu_si512(wv + b * 8 + j);
#pragma GCC unroll 16
      for (int i = 0; i < RT; ++i) {
        std::int32_t four;
        __builtin_memcpy(&four, xb + i * k + 4 * j, 4);
        s[i] = _mm512_dpbusd_epi32(s[i], w, _mm512_set1_epi32(four));
      }
    }
    const __m512 dv = _mm512_loadu_ps(d + b * lane16);
#pragma GCC unroll 16
    for (int i = 0; i < RT; ++i) {
      const i64 r = r0 + i;
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i]), _mm512_mul_ps(dv, _mm512_set1_ps(a.x.scale[r * blocks + b])), acc[i]);
      if constexpr (T == wtype::q4)
        acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(m + b * lane16), _mm512_set1_ps(a.x.sums[r * blocks + b]), acc[i]);
    }
  }
  const __mmask16 keep = __mmask16((1u << nc) - 1u);
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i) {
    float* out = a.y + (r0 + i) * a.n + n0;
    __m512 v = acc[i];
    if (a.bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(keep, a.bias + n0));
    _mm512_mask_storeu_ps(out, keep, v);
  }
}

template <wtype T, int RT>
void lanes16_tail(const int8_lanes_product& a, const __m512i* wv, const float* d, const float* m, int rt, i64 r0, i64 n0,
                  int nc) {
  if (rt == RT) lanes16_rows<T, RT>(a, wv, d, m, r0, n0, nc);
  else if constexpr (RT > 1) lanes16_tail<T, RT - 1>(a, wv, d, m, rt, r0, n0, nc);
}

template <wtype T>
void lanes16_range(const int8_lanes_product& a, i64 n_begin, i64 n_end) {
  constexpr int RT = 8;
  const i64 blocks = a.x.k / 32;
  // blocks × 8 registers of 16 int32
  auto* wv = static_cast<__m512i*>(kernel_scratch(scratch_slot::lane_weights, std::size_t(blocks * 8) * sizeof(__m512i)));
  auto* dbuf = static_cast<float*>(kernel_scratch(scratch_slot::lane_scales, std::size_t(blocks * lane16) * 4));
  auto* mbuf = static_cast<float*>(kernel_scratch(scratch_slot::lane_offsets, std::size_t(blocks * lane16) * 4));
  for (i64 n0 = n_begin; n0 < n_end; n0 += lane16) {
    const int nc = int(min_i64(lane16, n_end - n0));
    pack16<T>(a, n0, nc, wv, dbuf, mbuf);
    i64 r0 = 0;
    for (; r0 + RT <= a.x.rows; r0 += RT) lanes16_rows<T, RT>(a, wv, dbuf, mbuf, r0, n0, nc);
    if (r0 < a.x.rows) lanes16_tail<T, RT - 1>(a, wv, dbuf, mbuf, int(a.x.rows - r0), r0, n0, nc);
  }
}

}  // namespace

void int8_lanes_range(const int8_lanes_product& a, i64 n_begin, i64 n_end) {
  if (a.type == wtype::q8) lanes16_range<wtype::q8>(a, n_begin, n_end);
  else lanes16_range<wtype::q4>(a, n_begin, n_end);
}

}  // namespace mpakt::cpu_fast::avx512_vnni
