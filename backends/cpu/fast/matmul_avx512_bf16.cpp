/// bf16 weights times many activation rows (prefill) on AVX512-BF16: vdpbf16ps multiplies a
/// pair of bf16 weights by a pair of bf16 activations and adds both products into an f32 lane,
/// 32 multiply-adds an instruction where an f32 fused multiply-add does 16, at the same rate
/// on the CPUs that have it (Zen 4: 117 against 58 GMAC/s on one core).
///
/// The numbers are those of the f32 panels of the other levels (panels.inc), bit for bit: the
/// activations come rounded to bf16 (nearest even) on every level for these products
/// (matmul.cpp, rounds_activations), so every product is exact in f32; the instruction adds
/// a pair's second product and then its first, each rounded, as the f32 panels do (they lay
/// out a pair's values and activations swapped); runs of 64 values of k (32 pairs) start from zero and their sums are added in order,
/// then the bias. The instruction treats subnormal inputs as zero and flushes subnormal
/// results, where the f32 panels keep them: only sums that stay below 2⁻¹²⁶ can differ.
///
/// Layout: 32 weight rows at a time are laid out pair-major in a thread's panel (pair p of the
/// 32 rows side by side: two registers), without widening; each activation pair is broadcast
/// against it, so every instruction serves 32 outputs and no sum crosses lanes.

// GCC 12's AVX-512 headers start many intrinsics from a self-initialised "undefined" vector,
// which -Wmaybe-uninitialized reports wherever they are inlined here (a false alarm).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/fast/isa_kernels.hpp"

namespace mpakt::cpu_fast::avx512_bf16 {

namespace {

using i64 = std::int64_t;

inline i64 min_i64(i64 a, i64 b) { return a < b ? a : b; }

#include "backends/cpu/fast/transpose8.inc"

#include "backends/cpu/fast/panel_sums512.inc"

constexpr int panel_cols = 32;
/// Pairs in a run: 64 values of k, the f32 panels' lane_run.
constexpr i64 run_pairs = 32;
/// A panel holds at most this many pairs (the f32 panels' 4096 values of k), and the sums of
/// at most `row_block` activation rows at once: 256 KB and 64 KB a thread, whatever the shape.
constexpr i64 panel_pairs = 2048, row_block = 512;

/// Pairs [pb, pe) of weight rows [n0, n0 + nc) (nc ≤ panel_cols; missing rows zero) as a
/// pair-major panel: pair p of row c at panel[(p − pb)·panel_cols + c], value k = 2p in its
/// low half; values past k are zero.
void pack(const bf16_pairs_product& a, i64 n0, int nc, i64 pb, i64 pe, std::uint32_t* panel) {
  constexpr i64 pack_ahead = 512;
  const std::uint8_t* rows[panel_cols];
  for (int c = 0; c < panel_cols; ++c) rows[c] = c < nc ? a.w + (n0 + c) * a.w_row_bytes : nullptr;
  // eight pairs (32 bytes of a row) at a time across all the columns, so each panel row is
  // written whole
  for (i64 p0 = pb; p0 < pe; p0 += 8) {
    const i64 count = min_i64(8, pe - p0);
    const i64 values = min_i64(16, a.k - 2 * p0);  // of k, from value 2·p0
    const auto mask = static_cast<__mmask16>(values >= 16 ? 0xffff : (1u << values) - 1);
    const bool line = (p0 * 4) % 64 == 0;
    for (int g = 0; g < panel_cols / 8; ++g) {
      __m256i v[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const std::uint8_t* row = rows[g * 8 + c];
        if (!row) {
          v[c] = _mm256_setzero_si256();
          continue;
        }
        // each of the rows is a stream of its own: ask for its lines ahead
        if (line) _mm_prefetch(reinterpret_cast<const char*>(row + p0 * 4 + pack_ahead), _MM_HINT_T0);
        v[c] = values >= 16 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + p0 * 4))
                            : _mm256_maskz_loadu_epi16(mask, row + p0 * 4);
      }
      transpose8(v);  // v[j]: pair p0 + j of the eight rows
      std::uint32_t* at = panel + (p0 - pb) * panel_cols + g * 8;
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j)
        if (j < count) _mm256_storeu_si256(reinterpret_cast<__m256i*>(at + j * panel_cols), v[j]);
    }
  }
}

/// One run of the panel (packed from pair pb), pairs [q0, q1), for activation rows
/// [r0, r0 + RT): their sums are added to `tot` (rows from rb × panel_cols; the first run of
/// the row sets it).
template <int RT>
void run(const bf16_pairs_product& a, const std::uint32_t* panel, i64 pb, float* tot, i64 rb, i64 r0, i64 q0, i64 q1) {
  const i64 kp = (a.k + 1) / 2;
  const std::uint32_t* xr = a.x + r0 * kp;
  __m512 acc[RT][2];
#pragma GCC unroll 16
  for (int i = 0; i < RT; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (i64 q = q0; q < q1; ++q) {
    const std::uint32_t* pq = panel + (q - pb) * panel_cols;
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(pq), w1 = (__m512bh)_mm512_loadu_si512(pq + 16);
#pragma GCC unroll 16
    for (int i = 0; i < RT; ++i) {
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(int(xr[i * kp + q]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], w0, xb);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], w1, xb);
    }
  }
  add_run_sums<RT>(acc, tot, rb, r0, q0 == 0);
}

template <int RT>
void run_tail(const bf16_pairs_product& a, const std::uint32_t* panel, i64 pb, float* tot, i64 rb, int rt, i64 r0, i64 q0,
              i64 q1) {
  if (rt == RT) run<RT>(a, panel, pb, tot, rb, r0, q0, q1);
  else if constexpr (RT > 1) run_tail<RT - 1>(a, panel, pb, tot, rb, rt, r0, q0, q1);
}

/// Rows of activations in a tile: 24 accumulators, two panel registers and a broadcast.
constexpr int tile_rows = 12;

}  // namespace

void round_pairs(const float* x, i64 k, i64 r_begin, i64 r_end, std::uint32_t* out) {
  const i64 kp = (k + 1) / 2;
  const __m512i magnitude = _mm512_set1_epi32(0x7fffffff), infinity = _mm512_set1_epi32(0x7f800000);
  const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x400000);
  for (i64 r = r_begin; r < r_end; ++r) {
    const float* xr = x + r * k;
    auto* o = reinterpret_cast<std::uint16_t*>(out + r * kp);
    for (i64 i = 0; i < k; i += 16) {
      const i64 count = min_i64(16, k - i);
      const auto mask = static_cast<__mmask16>(count >= 16 ? 0xffff : (1u << count) - 1);
      const __m512i u = _mm512_maskz_loadu_epi32(mask, xr + i);
      // nearest even, as avx2::round_to_bf16; a NaN keeps its high half, made quiet
      const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, magnitude), infinity);
      __m512i r16 = _mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
      r16 = _mm512_mask_or_epi32(r16, nan, u, quiet);
      _mm256_mask_storeu_epi16(o + i, mask, _mm512_cvtepi32_epi16(_mm512_srli_epi32(r16, 16)));
    }
    if (k % 2) o[k] = 0;  // the last pair's missing value
  }
}

void pairs_lanes_range(const bf16_pairs_product& a, i64 n_begin, i64 n_end) {
  const i64 kp = (a.k + 1) / 2;
  auto* panel = static_cast<std::uint32_t*>(
      kernel_scratch(scratch_slot::panel, std::size_t(min_i64(kp, panel_pairs) * panel_cols) * 4));
  auto* tot = static_cast<float*>(
      kernel_scratch(scratch_slot::panel_sums, std::size_t(min_i64(a.rows, row_block) * panel_cols) * 4));
  for (i64 rb = 0; rb < a.rows; rb += row_block) {
    const i64 re = min_i64(a.rows, rb + row_block);
    for (i64 n0 = n_begin; n0 < n_end; n0 += panel_cols) {
      const int nc = int(min_i64(panel_cols, n_end - n0));
      for (i64 pb = 0; pb < kp; pb += panel_pairs) {
        const i64 pe = min_i64(kp, pb + panel_pairs);
        pack(a, n0, nc, pb, pe, panel);
        // the next panel's weight rows are asked for while this one's runs compute, spread
        // over the runs' row tiles (as panels.inc does)
        const i64 next_n0 = n0 + panel_cols;
        const int next_nc = int(min_i64(panel_cols, n_end - next_n0));
        const i64 tiles = (re - rb + tile_rows - 1) / tile_rows;
        for (i64 q0 = pb; q0 < pe; q0 += run_pairs) {
          const i64 q1 = min_i64(pe, q0 + run_pairs);
          const i64 first_line = q0 * 4 / 64, row_lines = next_nc > 0 ? (q1 * 4 + 63) / 64 - first_line : 0;
          const i64 lines = row_lines * next_nc;
          i64 asked = 0;
          auto ask_until = [&](i64 upto) {
            for (; asked < upto; ++asked) {
              const std::uint8_t* row = a.w + (next_n0 + asked / row_lines) * a.w_row_bytes;
              _mm_prefetch(reinterpret_cast<const char*>(row + (first_line + asked % row_lines) * 64), _MM_HINT_T1);
            }
          };
          i64 r0 = rb, tile = 0;
          for (; r0 + tile_rows <= re; r0 += tile_rows) {
            ask_until(lines * ++tile / tiles);
            run<tile_rows>(a, panel, pb, tot, rb, r0, q0, q1);
          }
          ask_until(lines);
          if (r0 < re) run_tail<tile_rows - 1>(a, panel, pb, tot, rb, int(re - r0), r0, q0, q1);
        }
      }
      write_panel_rows(tot, a.bias, a.y, a.n, rb, re, n0, nc);
    }
  }
}

}  // namespace mpakt::cpu_fast::avx512_bf16
