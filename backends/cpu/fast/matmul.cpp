/// Fast CPU kernel for matmul and linear with transB: true — the decode hot path.
///
/// Activations x [rows, K] (f32) times a weight stored [N, K] as f32, bf16, f16, q8 or q4:
/// out[r, n] = dot(x_r, w_n) (+ bias[n]). The weight is read in place, 32 values (one
/// quantization block) at a time, widened into two AVX-512 registers and multiplied into
/// f32 accumulators for a tile of rows x weight rows, so each weight value is widened once
/// per row tile and each weight row comes from memory once per call. Tuned for 1–16 rows
/// (decode and speculative verify); correct for any count. Single-threaded.
///
/// Without AVX-512 (F, BW, VL) a portable scalar path widens one weight row at a time.
/// Results agree with the reference kernel (backends/cpu/ref/matmul.cpp) up to f32
/// accumulation order; the op table test checks that on every fixture.

#include <algorithm>
#include <cstring>

#include "backends/cpu/fast/families.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "runtime/ops/matmul_params.hpp"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define MPAKT_FAST_MATMUL_AVX512 1
// g++ 12 reports its own _mm512_undefined_* placeholders as uninitialized once inlined
// (GCC bug 105593); the pragmas cover the intrinsic headers, where the reports point.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace mpakt::cpu_fast {

namespace {

/// Everything one product needs; rows are the output's rows (x may have leading dims).
struct product_args {
  const float* x = nullptr;
  const tensor* w = nullptr;
  const float* bias = nullptr;  ///< linear only
  float* y = nullptr;
  std::int64_t rows = 0, k = 0, n = 0;
  std::int64_t n_begin = 0, n_end = 0;  ///< the weight rows (output columns) this call computes
};

#ifdef MPAKT_FAST_MATMUL_AVX512

/// Widening of 32 weight values starting at column k0 (a multiple of 32) of one row.
/// `part` handles a final run of fewer than 32 (float types only: q8/q4 rows are whole
/// blocks), reading nothing past the row through masked loads.
template <dtype T>
struct widen;

template <>
struct widen<dtype::f32> {
  static void full(const std::byte* row, std::int64_t k0, __m512& lo, __m512& hi) {
    const float* p = reinterpret_cast<const float*>(row) + k0;
    lo = _mm512_loadu_ps(p);
    hi = _mm512_loadu_ps(p + 16);
  }
  static void part(const std::byte* row, std::int64_t k0, __mmask16 m0, __mmask16 m1, __m512& lo, __m512& hi) {
    const float* p = reinterpret_cast<const float*>(row) + k0;
    lo = _mm512_maskz_loadu_ps(m0, p);
    hi = _mm512_maskz_loadu_ps(m1, p + 16);
  }
};

template <>
struct widen<dtype::bf16> {
  static __m512 from(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static void full(const std::byte* row, std::int64_t k0, __m512& lo, __m512& hi) {
    const auto* p = reinterpret_cast<const std::uint16_t*>(row) + k0;
    lo = from(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    hi = from(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
  }
  static void part(const std::byte* row, std::int64_t k0, __mmask16 m0, __mmask16 m1, __m512& lo, __m512& hi) {
    const auto* p = reinterpret_cast<const std::uint16_t*>(row) + k0;
    lo = from(_mm256_maskz_loadu_epi16(m0, p));
    hi = from(_mm256_maskz_loadu_epi16(m1, p + 16));
  }
};

template <>
struct widen<dtype::f16> {
  static void full(const std::byte* row, std::int64_t k0, __m512& lo, __m512& hi) {
    const auto* p = reinterpret_cast<const std::uint16_t*>(row) + k0;
    lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    hi = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)));
  }
  static void part(const std::byte* row, std::int64_t k0, __mmask16 m0, __mmask16 m1, __m512& lo, __m512& hi) {
    const auto* p = reinterpret_cast<const std::uint16_t*>(row) + k0;
    lo = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, p));
    hi = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, p + 16));
  }
};

/// An f16 scale broadcast to every lane (exact, like f16_to_f32).
inline __m512 f16_splat(std::uint16_t h) { return _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(h))); }

template <>
struct widen<dtype::q8> {
  // x = q * d, rounded to f32 as dequantize_row does.
  static void full(const std::byte* row, std::int64_t k0, __m512& lo, __m512& hi) {
    const block_q8& b = reinterpret_cast<const block_q8*>(row)[k0 / quant_block];
    const __m512 d = f16_splat(b.d);
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.q));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.q + 16));
    lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), d);
    hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), d);
  }
};

template <>
struct widen<dtype::q4> {
  // Byte i holds value 2i (low nibble) and 2i+1 (high nibble). The weights stay split into
  // even and odd values (lo = values 0, 2, ..., 30; hi = 1, 3, ..., 31) and load_x splits
  // the activations the same way: one permute pair per activation row and block instead
  // of one per weight row and block. x = q * d + m.
  static void full(const std::byte* row, std::int64_t k0, __m512& lo, __m512& hi) {
    const block_q4& b = reinterpret_cast<const block_q4*>(row)[k0 / quant_block];
    const __m512 d = f16_splat(b.d);
    const __m512 m = f16_splat(b.m);
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.q)));
    lo = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(bytes, _mm512_set1_epi32(0x0f))), d, m);
    hi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(bytes, 4)), d, m);
  }
  static void load_x(const float* x, __m512& lo, __m512& hi) {
    const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    lo = _mm512_permutex2var_ps(a, even, b);
    hi = _mm512_permutex2var_ps(a, odd, b);
  }
};

/// 32 activations in the order `widen<T>::full` gives the weights: natural order, except
/// for q4 (its own load_x).
template <dtype T>
inline void load_x(const float* x, __m512& lo, __m512& hi) {
  if constexpr (T == dtype::q4) {
    widen<T>::load_x(x, lo, hi);
  } else {
    lo = _mm512_loadu_ps(x);
    hi = _mm512_loadu_ps(x + 16);
  }
}

/// RT activation rows [r0, r0+RT) times NT weight rows [n0, n0+NT): RT*NT accumulators,
/// each weight block widened once and used for all RT rows. The fixed-count loops are
/// unrolled explicitly: at -O2 g++ otherwise keeps acc[][] in memory (about 2x slower).
template <dtype T, int RT, int NT>
void tile(const product_args& a, std::int64_t r0, std::int64_t n0) {
  const std::int64_t k = a.k;
  __m512 acc[RT][NT];
  #pragma GCC unroll 16
  for (int i = 0; i < RT; ++i)
    #pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) acc[i][j] = _mm512_setzero_ps();
  const std::byte* wr[NT];
  #pragma GCC unroll 16
  for (int j = 0; j < NT; ++j) wr[j] = a.w->row(n0 + j);
  const float* xr = a.x + r0 * k;

  const std::int64_t full = k / 32 * 32;
  for (std::int64_t k0 = 0; k0 < full; k0 += 32) {
    __m512 wl[NT], wh[NT];
    #pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) widen<T>::full(wr[j], k0, wl[j], wh[j]);
    #pragma GCC unroll 16
    for (int i = 0; i < RT; ++i) {
      __m512 xl, xh;
      load_x<T>(xr + i * k + k0, xl, xh);
      #pragma GCC unroll 16
      for (int j = 0; j < NT; ++j) {
        acc[i][j] = _mm512_fmadd_ps(xl, wl[j], acc[i][j]);
        acc[i][j] = _mm512_fmadd_ps(xh, wh[j], acc[i][j]);
      }
    }
  }
  if constexpr (!is_quantized(T)) {
    const std::int64_t rem = k - full;
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
  }
  #pragma GCC unroll 16
  for (int i = 0; i < RT; ++i)
    #pragma GCC unroll 16
    for (int j = 0; j < NT; ++j) {
      float v = _mm512_reduce_add_ps(acc[i][j]);
      if (a.bias) v += a.bias[n0 + j];
      a.y[(r0 + i) * a.n + n0 + j] = v;
    }
}

/// A tile of `rt` rows (1 <= rt <= RT), dispatched to the instantiation for that count.
template <dtype T, int NT, int RT>
void tile_rows(const product_args& a, int rt, std::int64_t r0, std::int64_t n0) {
  if (rt == RT) tile<T, RT, NT>(a, r0, n0);
  else if constexpr (RT > 1) tile_rows<T, NT, RT - 1>(a, rt, r0, n0);
}

/// Weight rows [n0, n0+NT) against every activation row, in tiles of up to RT rows; the
/// NT weight rows stay in L1 between tiles. RT*NT <= 16 accumulators fit the registers.
template <dtype T, int NT>
void column_block(const product_args& a, std::int64_t n0) {
  constexpr int RT = NT >= 4 ? 4 : 8;
  for (std::int64_t r0 = 0; r0 < a.rows; r0 += RT)
    tile_rows<T, NT, RT>(a, int(std::min<std::int64_t>(RT, a.rows - r0)), r0, n0);
}

template <dtype T>
void product(const product_args& a) {
  std::int64_t n0 = a.n_begin;
  if (a.rows <= 4) {
    for (; n0 + 4 <= a.n_end; n0 += 4) column_block<T, 4>(a, n0);
  } else {
    for (; n0 + 2 <= a.n_end; n0 += 2) column_block<T, 2>(a, n0);
  }
  for (; n0 < a.n_end; ++n0) column_block<T, 1>(a, n0);
}

void run_range(const product_args& a) {
  switch (a.w->type()) {
    case dtype::f32: product<dtype::f32>(a); return;
    case dtype::bf16: product<dtype::bf16>(a); return;
    case dtype::f16: product<dtype::f16>(a); return;
    case dtype::q8: product<dtype::q8>(a); return;
    case dtype::q4: product<dtype::q4>(a); return;
  }
}

/// Below this many multiply-adds a product runs on the caller alone: waking helpers costs
/// more than it saves.
constexpr std::int64_t parallel_min_macs = std::int64_t(1) << 18;

/// Splits the weight rows (output columns) into equal parts, in multiples of 4 so every
/// part keeps the 4-wide column blocks, one part per kernel thread.
void run(const product_args& a, workspace&) {
  const int threads = kernel_threads();
  if (threads <= 1 || a.rows * a.k * a.n < parallel_min_macs || a.n < 8) {
    product_args whole = a;
    whole.n_begin = 0;
    whole.n_end = a.n;
    run_range(whole);
    return;
  }
  const int parts = int(std::min<std::int64_t>(threads, a.n / 4));
  parallel_for(parts, [&](int p) {
    product_args part = a;
    part.n_begin = a.n * p / parts / 4 * 4;
    part.n_end = p + 1 == parts ? a.n : a.n * (p + 1) / parts / 4 * 4;
    run_range(part);
  });
}

#else  // portable fallback

void run(const product_args& a, workspace& ws) {
  float* tmp = ws.floats(std::size_t(a.k));
  for (std::int64_t j = 0; j < a.n; ++j) {
    const float* wj = tmp;
    if (a.w->type() == dtype::f32) wj = reinterpret_cast<const float*>(a.w->row(j));
    else dequantize_row(a.w->type(), a.w->row(j), tmp, a.k);
    for (std::int64_t r = 0; r < a.rows; ++r) {
      const float* xr = a.x + r * a.k;
      float acc = 0;
      for (std::int64_t i = 0; i < a.k; ++i) acc += xr[i] * wj[i];
      a.y[r * a.n + j] = a.bias ? acc + a.bias[j] : acc;
    }
  }
}

#endif

/// matmul (2 inputs) and linear (3 inputs, the third the bias), transB: true.
status matmul_trans_b(const kernel_call& c) {
  product_args a;
  a.x = c.inputs[0]->f32();
  a.w = c.inputs[1];
  a.bias = c.inputs.size() > 2 ? c.inputs[2]->f32() : nullptr;
  a.y = c.output->f32();
  a.rows = c.output->rows();  // x [3, 0] still has 3 rows
  a.k = c.inputs[0]->cols();
  a.n = c.inputs[1]->shape()[0];
  run(a, *c.scratch);
  return ok_status();
}

bool accepts_trans_b(std::span<const tensor_desc> inputs, const op_params& params) {
  return static_cast<const ops::matmul_params&>(params).trans_b && inputs.size() >= 2 &&
         inputs[1].shape.size() == 2 && !inputs[0].shape.empty();
}

}  // namespace

#ifdef MPAKT_FAST_MATMUL_AVX512
constexpr std::string_view matmul_variant = "avx512";
#else
constexpr std::string_view matmul_variant = "scalar";
#endif

void add_matmul_kernels(std::vector<cpu_kernel>& out) {
  out.push_back({"matmul", matmul_trans_b, accepts_trans_b, matmul_variant});
  out.push_back({"linear", matmul_trans_b, accepts_trans_b, matmul_variant});
}

}  // namespace mpakt::cpu_fast
