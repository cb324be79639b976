/// Fast CPU kernels for matmul and linear with transB: true — every product against a
/// weight in a decoder: the decode hot path (1–16 rows) and prefill.
///
/// Activations x [rows, K] (f32) times a weight stored [N, K] as f32, bf16, f16, q8 or q4:
/// out[r, n] = dot(x_r, w_n) (+ bias[n]). One kernel per instruction-set level (isa.hpp),
/// registered highest first; the executor gets the best one the CPU allows when it plans a
/// step. The arithmetic lives in the per-level files (matmul_avx2.cpp, matmul_avx512.cpp, matmul_avx512_vnni.cpp);
/// this file splits the work over the kernel threads.
///
/// Float weights (f32, bf16, f16) are widened in registers and multiplied in f32: the result
/// equals the reference up to f32 accumulation order — except that bf16 weights in a product
/// with the many-row numbers meet their activations rounded to bf16 (rounds_activations), as
/// the bf16 dot products of AVX512-BF16 (matmul_avx512_bf16.cpp) and AMX take them.
/// Quantized weights (q8, q4) meet activations quantized once per call to int16, per row and
/// block of 32 (x ≈ q·s with s = max|x|/32639, rounded to nearest even), in integer
/// multiply-adds (vpdpbusd on the two int8 halves of each value with VNNI, vpmaddwd without) —
/// no weight is widened to f32, so quantized decode is bound by memory — and each output
/// differs from the reference's by at most Σ|w|·s/2 per block, about 1.5e-5 of Σ|w·x|
/// (test/backends/fast_kernels_test.cpp checks exactly that bound). Products of
/// more than 32 rows (prefill) take int8 activations instead (s = max|x|/127) where a
/// many-row kernel serves: AMX tiles, VNNI pairs, or AVX2's eight-column lanes. A row holding a
/// NaN or an infinity takes the float path, so those propagate as in the reference. Without
/// AVX2 a portable path widens one weight row at a time.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/fast/families.hpp"
#include "backends/cpu/fast/isa_kernels.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "backends/cpu/isa.hpp"
#include "backends/cpu/ref/packed.hpp"
#include "runtime/dtype.hpp"
#include "runtime/ops/matmul_params.hpp"
#include "runtime/row_bits.hpp"

namespace mpakt::cpu_fast {

namespace {

using cpu_isa::level;

wtype wtype_of(dtype t) {
  switch (t) {
    case dtype::f32: return wtype::f32;
    case dtype::bf16: return wtype::bf16;
    case dtype::f16: return wtype::f16;
    case dtype::q8: return wtype::q8;
    case dtype::q4: return wtype::q4;
  }
  return wtype::f32;
}

/// Below this many multiply-adds a product runs on the caller alone: waking helpers costs
/// more than it saves.
constexpr std::int64_t parallel_min_macs = std::int64_t(1) << 16;

/// Products this large are split on one thread too, into parts a stopped run can skip
/// (runtime/interrupt.hpp): tens of milliseconds of work each at most.
constexpr std::int64_t interruptible_macs = std::int64_t(1) << 27;

/// Splits [0, n) into ranges, multiples of 12 so every part keeps whole column tiles on every
/// level (AVX-512's 4 and 2 wide, AVX2's 3 wide for batched and verify steps: parts in
/// multiples of 4 left a column or two per part to one-column tiles, which re-read the weight
/// row for every six activation rows — eight conversations at once lost a sixth of their speed
/// to it), and runs f(begin, end) on each over the kernel threads. Parts shrink as they go
/// (each a T-th of what is left, T threads, down to n / 2T columns: on two threads a half, then
/// two quarters), claimed in order: the first keeps the caller on one long run of rows, and
/// the later ones leave a thread the OS delays, or one that drew a slower part, at most a
/// 2T-th of the product for the others to wait on. Parts a 2T-th of what is left, down to
/// n / 32T, cost a decode product of SmolLM2's shape [576, 576] on two threads of a Xeon a
/// sixth of its speed (24 against 28.5 GB/s from memory, 26 against 33 in cache for eight
/// rows; what a part costs was not isolated: asking for its first lines at once did not
/// help). Which thread computes a column never changes its bits.
template <class F>
void split_columns(std::int64_t n, std::int64_t macs, F&& f) {
  const int threads = kernel_threads();
  const bool long_alone = threads <= 1 && macs >= interruptible_macs && n >= 64;
  if (!long_alone && (threads <= 1 || macs < parallel_min_macs || n < 8)) return f(std::int64_t(0), n);
  if (long_alone) {
    // one thread: parts a stopped run can skip
    const int parts = int(std::min<std::int64_t>(n / 32, macs / interruptible_macs + 1));
    parallel_for(parts, [&](int p) {
      const std::int64_t b = n * p / parts / 12 * 12;
      const std::int64_t e = p + 1 == parts ? n : n * (p + 1) / parts / 12 * 12;
      f(b, e);
    });
    return;
  }
  thread_local std::vector<std::int64_t> bounds;  // (kept from call to call: no allocation)
  bounds.assign(1, 0);
  const std::int64_t least = std::max<std::int64_t>(16, n / (2 * std::int64_t(threads)));
  for (std::int64_t at = 0; at < n;) {
    std::int64_t take = std::max<std::int64_t>(least, (n - at) / std::int64_t(threads)) / 12 * 12;
    if (n - at - take < least) take = n - at;
    at += take;
    bounds.push_back(at);
  }
  const std::int64_t* b = bounds.data();
  parallel_for(int(bounds.size()) - 1, [&](int p) { f(b[p], b[p + 1]); });
}

/// Runs f(begin, end) on parts of activation rows [0, rows) over the kernel threads, at most a
/// part per thread and per eight rows (a per-call pass over the activations: rounding,
/// quantizing).
template <class F>
void split_rows(std::int64_t rows, F&& f) {
  const int parts = int(std::min<std::int64_t>(kernel_threads(), rows / 8 + 1));
  if (parts <= 1) return f(std::int64_t(0), rows);
  parallel_for(parts, [&](int p) { f(rows * p / parts, rows * (p + 1) / parts); });
}

/// The activation rows of a product's inputs (x's elements over its last dimension, K).
std::int64_t activation_rows(std::span<const tensor_desc> inputs) {
  return shape_numel(inputs[0].shape) / std::max<std::int64_t>(inputs[0].shape.back(), 1);
}

/// Rows from which a product always goes to a many-row kernel (AMX tiles, the lanes, the
/// panels): more than a batched decode step (16 conversations) or a verify pass stacks, so
/// those give each row exactly the bits it gets alone (the vector kernels compute every row
/// the same way); prefill gets the many-row kernels.
constexpr std::int64_t amx_min_rows = 33;
/// Fewer rows go there too when the graph lets rows take the many-row bits (runtime/row_bits.hpp:
/// a plain graph call, such as a short prompt's prefill) and the many-row kernel is the faster
/// from this many rows: measured on a 2-vCPU Xeon, AMX tiles from 16 rows (bf16, q8, q4) at
/// about 1.5 times the vector kernels' speed and twice it at 32; the lanes from 16 rows for q4
/// and 24 for q8 (their q8 at 16 rows is no faster on VNNI and slower on AVX2); AVX512-BF16's
/// pairs from 16 rows (a Zen 4's 16-, 24- and 32-token prompts of the SmolLM2 shape 1.4, 1.6
/// and 1.7 times as fast as on the vector kernels). Float panels are slower than the vector
/// kernels up to 32 rows and keep amx_min_rows.
constexpr std::int64_t amx_free_min_rows = 16;
constexpr std::int64_t lanes_free_min_rows(wtype t) { return t == wtype::q4 ? 16 : 24; }

/// Whether a product of `rows` rows runs on the vector kernels, each row with its bits alone,
/// rather than on a many-row kernel that claimed it (between its free and its always minimum).
inline bool keep_rows_alone(std::int64_t rows) { return rows < amx_min_rows && !rows_free(); }

/// Whether a product's activations are rounded to bf16 (nearest even) before it runs: those of
/// a product of bf16 weights with the many-row kernels' numbers — more than 32 rows, or 16 and
/// more in a call whose rows are free — on every level, whichever kernel runs it (the
/// AVX512-BF16 and AMX dot products take bf16 activations; the f32 panels and the vector
/// kernels then compute the same exact products), so a prefill's numbers do not depend on the
/// worker's vector unit beyond the order of f32 sums (docs/decisions.md, "bf16 weights in a
/// prefill meet bf16 activations").
bool rounds_activations(const float_product& a) {
  return a.type == wtype::bf16 && (a.rows >= amx_min_rows || (a.rows >= amx_free_min_rows && rows_free()));
}

/// Rounds the activations of `count` products of the same activations when rounds_activations
/// says so: once, into the scratch, which the products then read. `panel_order`: for the f32
/// panels of bf16 weights, each row's pairs of values swapped as the panel's are (panels.inc).
void round_activations(float_product* a, std::size_t count, workspace& ws, bool panel_order = false) {
  if (count == 0 || !rounds_activations(a[0])) return;
  const std::int64_t k = a[0].k, rows = a[0].rows;
  float* out = ws.floats(std::size_t(rows * k), 9);
  auto round = [&](std::int64_t b, std::int64_t e) {
    if (cpu_isa::best() >= level::avx2) return avx2::round_to_bf16(a[0].x + b * k, e - b, k, out + b * k, panel_order);
    for (std::int64_t r = b; r < e; ++r)
      for (std::int64_t i = 0; i < k; ++i)
        out[r * k + i] = bf16_to_f32(f32_to_bf16(a[0].x[r * k + (panel_order && (i ^ 1) < k ? i ^ 1 : i)]));
  };
  split_rows(rows, round);
  for (std::size_t i = 0; i < count; ++i) a[i].x = out;
}

/// The portable path: one weight row widened at a time.
void scalar_range(const float_product& a, const tensor& w, float* tmp, std::int64_t n_begin, std::int64_t n_end) {
  for (std::int64_t j = n_begin; j < n_end; ++j) {
    const float* wj = tmp;
    if (w.type() == dtype::f32) wj = reinterpret_cast<const float*>(w.row(j));
    else dequantize_row(w.type(), cpu_ref::packed_row_of(w, j), tmp, a.k);
    for (std::int64_t r = 0; r < a.rows; ++r) {
      const float* xr = a.x + r * a.k;
      float acc = 0;
      for (std::int64_t i = 0; i < a.k; ++i) acc += xr[i] * wj[i];
      a.y[r * a.n + j] = a.bias ? acc + a.bias[j] : acc;
    }
  }
}

struct level_kernels {
  void (*float_range)(const float_product&, std::int64_t, std::int64_t);
  void (*quantize)(const float*, std::int64_t, std::int64_t, std::int64_t, std::int16_t*, float*, float*);
  void (*int_range)(const int_product&, std::int64_t, std::int64_t);
};

constexpr level_kernels avx2_kernels{avx2::float_product_range, avx2::quantize_rows, avx2::int_product_range};
constexpr level_kernels avx512_kernels{avx512::float_product_range, avx512::quantize_rows, avx512::int_product_range};
// (VNNI's own products are the pairs of product_vnni_int8; where those do not serve, the
// AVX-512 kernels do)
constexpr level_kernels avx512_vnni_kernels = avx512_kernels;

/// The activations of `f` quantized to int16 on level `lk`, in the scratch; false when a row is
/// not finite.
bool int16_quantize(const level_kernels& lk, const float_product& f, workspace& ws, quantized_rows& out) {
  const std::int64_t blocks = f.k / 32;
  auto* q = reinterpret_cast<std::int16_t*>(ws.ints(std::size_t((f.rows * f.k + 1) / 2), 4));
  float* scale = ws.floats(std::size_t(f.rows * blocks), 5);
  float* sums = f.type == wtype::q4 ? ws.floats(std::size_t(f.rows * blocks), 6) : nullptr;
  lk.quantize(f.x, f.k, 0, f.rows, q, scale, sums);
  for (std::int64_t i = 0; i < f.rows * blocks; ++i)
    if (std::isnan(scale[i])) return false;
  out = quantized_rows{q, scale, sums, f.rows, f.k};
  return true;
}

/// The integer product of `f` against its activations quantized as `x`.
template <class Rows>
integer_product<Rows> int_args(const float_product& f, const Rows& x) {
  integer_product<Rows> p;
  p.x = x;
  p.w = f.w;
  p.w_row_bytes = f.w_row_bytes;
  p.type = f.type;
  p.bias = f.bias;
  p.y = f.y;
  p.n = f.n;
  return p;
}

/// Quantizes x and runs the integer product over columns [n_begin, n); false (nothing
/// written) when a row is not finite.
bool int_run(const level_kernels& lk, const float_product& f, workspace& ws, std::int64_t n_begin = 0) {
  quantized_rows x;
  if (!int16_quantize(lk, f, ws, x)) return false;
  const int_product p = int_args(f, x);
  const std::int64_t n = f.n - n_begin;
  split_columns(n, f.rows * f.k * n, [&](std::int64_t b, std::int64_t e) { lk.int_range(p, n_begin + b, n_begin + e); });
  return true;
}

/// A number for each product call (float_product::call), never 0 and never repeated.
std::uint64_t next_call() {
  static std::atomic<std::uint64_t> count{0};
  return count.fetch_add(1, std::memory_order_relaxed) + 1;
}

float_product args_of(const kernel_call& c) {
  float_product a;
  a.call = next_call();
  const tensor& w = *c.inputs[1];
  a.x = c.inputs[0]->f32();
  a.w = reinterpret_cast<const std::uint8_t*>(w.data());
  a.type = wtype_of(w.type());
  a.bias = c.inputs.size() > 2 ? c.inputs[2]->f32() : nullptr;
  a.y = c.output->f32();
  a.rows = c.output->rows();  // x [3, 0] still has 3 rows
  a.k = c.inputs[0]->cols();
  a.n = w.shape()[0];
  a.w_row_bytes = a.n > 0 ? std::int64_t(w.nbytes()) / a.n : 0;
  return a;
}

bool accepts_trans_b(std::span<const tensor_desc> inputs, const op_params& params) {
  return static_cast<const ops::matmul_params&>(params).trans_b && inputs.size() >= 2 &&
         inputs[1].shape.size() == 2 && !inputs[0].shape.empty();
}

/// A product on one level's kernels.
template <const level_kernels& LK>
status product(const kernel_call& c) {
  float_product a = args_of(c);
  if (a.rows == 0 || a.n == 0) return ok_status();
  if (a.k == 0) {
    for (std::int64_t r = 0; r < a.rows; ++r)
      for (std::int64_t j = 0; j < a.n; ++j) a.y[r * a.n + j] = a.bias ? a.bias[j] : 0.0f;
    return ok_status();
  }
  if ((a.type == wtype::q8 || a.type == wtype::q4) && int_run(LK, a, *c.scratch)) return ok_status();
  if (a.type == wtype::q8 || a.type == wtype::q4) {
    // a non-finite activation: the reference's arithmetic, so NaN and infinity propagate
    split_columns(a.n, a.rows * a.k * a.n, [&](std::int64_t b, std::int64_t e) {
      std::vector<float> tmp(std::size_t(a.k));
      scalar_range(a, *c.inputs[1], tmp.data(), b, e);
    });
    return ok_status();
  }
  round_activations(&a, 1, *c.scratch);
  split_columns(a.n, a.rows * a.k * a.n, [&](std::int64_t b, std::int64_t e) { LK.float_range(a, b, e); });
  return ok_status();
}

// ---- several products of the same activations at once (a layer's q, k, v; gate and up)

/// The most steps one group takes.
constexpr std::size_t max_group = 8;

/// The calls' products in `a`; whether they can run as one: the same activations (the same
/// values, rows and width) against weights of one dtype, at most max_group of them.
bool same_input(std::span<const kernel_call> calls, float_product* a) {
  if (calls.empty() || calls.size() > max_group) return false;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    a[i] = args_of(calls[i]);
    if (a[i].x != a[0].x || a[i].rows != a[0].rows || a[i].k != a[0].k || a[i].type != a[0].type) return false;
    a[i].call = a[0].call;  // (one set of activations: reordered once for the group)
  }
  return true;
}

status one_by_one(std::span<const kernel_call> calls, kernel_fn fn) {
  for (const auto& c : calls) MPAKT_TRY(fn(c));
  return ok_status();
}

/// Runs f(i, begin, end) on column ranges of the calls' outputs taken end to end, split over
/// the kernel threads as one product that wide (split_columns): one pass of the threads for
/// the whole group.
template <class F>
void split_group_columns(const float_product* a, std::size_t count, F&& f) {
  std::int64_t offs[max_group + 1] = {0};
  for (std::size_t i = 0; i < count; ++i) offs[i + 1] = offs[i] + a[i].n;
  const std::int64_t total = offs[count];
  split_columns(total, a[0].rows * a[0].k * total, [&](std::int64_t b, std::int64_t e) {
    for (std::size_t i = 0; i < count; ++i) {
      const std::int64_t lo = std::max(b, offs[i]), hi = std::min(e, offs[i + 1]);
      if (lo < hi) f(i, lo - offs[i], hi - offs[i]);
    }
  });
}

/// product<LK> for several calls at once; quantized activations are made once for all.
template <const level_kernels& LK>
status products(std::span<const kernel_call> calls) {
  float_product a[max_group];
  if (!same_input(calls, a) || a[0].rows == 0 || a[0].k == 0) return one_by_one(calls, product<LK>);
  const std::size_t count = calls.size();
  if (a[0].type != wtype::q8 && a[0].type != wtype::q4) {
    round_activations(a, count, *calls[0].scratch);
    split_group_columns(a, count, [&](std::size_t i, std::int64_t b, std::int64_t e) { LK.float_range(a[i], b, e); });
    return ok_status();
  }
  quantized_rows x;
  if (!int16_quantize(LK, a[0], *calls[0].scratch, x)) return one_by_one(calls, product<LK>);  // (the float path, per call)
  int_product p[max_group];
  for (std::size_t i = 0; i < count; ++i) p[i] = int_args(a[i], x);
  split_group_columns(a, count, [&](std::size_t i, std::int64_t b, std::int64_t e) { LK.int_range(p[i], b, e); });
  return ok_status();
}


status product_vnni_int8(const kernel_call& c);
status products_vnni_int8(std::span<const kernel_call> calls);

/// Whole blocks of 16 weight rows [0, n_blocks) over the kernel threads, in pairs of blocks,
/// a few parts per thread.
template <class F>
void split_blocks(std::int64_t n_blocks, F&& f) {
  const int threads = kernel_threads();
  const std::int64_t pairs = (n_blocks + 1) / 2;
  const int parts = int(std::max<std::int64_t>(1, std::min<std::int64_t>(pairs, threads <= 1 ? 1 : 4 * threads)));
  parallel_for(parts, [&](int q) {
    const std::int64_t b = std::min(n_blocks, 2 * (pairs * q / parts)), e = std::min(n_blocks, 2 * (pairs * (q + 1) / parts));
    if (b < e) f(b, e);
  });
}

/// Runs f(m_begin, m_end) over the 16-row blocks of `rows` activation rows, one part per
/// thread (packing the activations for the tiles).
template <class F>
void split_row_blocks(std::int64_t rows, F&& f) {
  const std::int64_t m_blocks = (rows + 15) / 16;
  const int parts = int(std::min<std::int64_t>(kernel_threads(), m_blocks));
  parallel_for(parts, [&](int p) { f(m_blocks * p / parts, m_blocks * (p + 1) / parts); });
}

/// A product's activations packed for AMX-INT8 tiles, in the scratch.
struct amx_int8_x {
  std::int8_t* xq = nullptr;
  float* xs = nullptr;
  float* xsum = nullptr;  ///< q4 only
};

/// Packs a's activations for AMX-INT8 in the scratch — pack(m_begin, m_end, xq, xs, xsum) over
/// the threads, row blocks apart — into x; false when a block holds NaN or ±∞ (its scale is
/// NaN), which the tiles cannot take.
template <class Pack>
bool pack_amx_int8(workspace& ws, const float_product& a, Pack&& pack, amx_int8_x& x) {
  const std::int64_t scales = (a.rows + 15) / 16 * (a.k / 32) * 16;
  x.xq = reinterpret_cast<std::int8_t*>(ws.ints(std::size_t(scales * 8), 7));  // (32 bytes a scale)
  x.xs = ws.floats(std::size_t(scales), 7);
  x.xsum = a.type == wtype::q4 ? ws.floats(std::size_t(scales), 8) : nullptr;
  split_row_blocks(a.rows, [&](std::int64_t b, std::int64_t e) { pack(b, e, x.xq, x.xs, x.xsum); });
  for (std::int64_t i = 0; i < scales; ++i)
    if (std::isnan(x.xs[i])) return false;
  return true;
}

/// Product a against activations x, for the AMX-INT8 kernels.
amx_int_product amx_int_args(const float_product& a, const amx_int8_x& x) {
  amx_int_product p;
  p.xq = x.xq;
  p.xs = x.xs;
  p.xsum = x.xsum;
  p.w = a.w;
  p.w_row_bytes = a.w_row_bytes;
  p.type = a.type;
  p.bias = a.bias;
  p.y = a.y;
  p.rows = a.rows;
  p.k = a.k;
  p.n = a.n;
  return p;
}

/// A q8/q4 product on AMX-INT8 tiles (int8 activations); the last N mod 16 columns on the
/// AVX-512 integer kernel. A row holding NaN or ±∞ takes the vector kernels' path.
status product_amx_int(const kernel_call& c, const float_product& a) {
  amx_int8_x x;
  const auto pack = [&](std::int64_t b, std::int64_t e, std::int8_t* xq, float* xs, float* xsum) {
    amx::pack_int8_activations(a.x, a.rows, a.k, b, e, xq, xs, xsum);
  };
  if (!pack_amx_int8(*c.scratch, a, pack, x)) return product<avx512_vnni_kernels>(c);
  const amx_int_product p = amx_int_args(a, x);
  const std::int64_t n_blocks = a.n / 16;
  split_blocks(n_blocks, [&](std::int64_t b, std::int64_t e) { amx::int8_product_range(p, b, e); });
  if (n_blocks * 16 < a.n) int_run(avx512_vnni_kernels, a, *c.scratch, n_blocks * 16);
  return ok_status();
}

/// bf16 products of many rows on AMX tiles, `count` of them against the same activations: the
/// activations packed once for all (rounded to bf16 in the packing: rounds_activations' bits),
/// then whole blocks of 16 weight rows of every product over the threads as one pass; the last
/// N mod 16 columns of each on the AVX-512 kernel (with the activations rounded for it).
void bf16_products_amx(float_product* a, std::size_t count, workspace& ws) {
  const std::int64_t halves = amx::packed_halves(a[0].rows, a[0].k);
  auto* hi = reinterpret_cast<std::uint16_t*>(ws.ints(std::size_t((halves + 1) / 2), 4));
  split_row_blocks(a[0].rows,
                   [&](std::int64_t b, std::int64_t e) { amx::pack_activations(a[0].x, a[0].rows, a[0].k, b, e, hi, nullptr); });
  amx_product p[max_group];
  std::int64_t first[max_group + 1] = {0};  // each product's first block in the pass
  bool tails = false;
  for (std::size_t i = 0; i < count; ++i) {
    p[i].xhi = hi;
    p[i].xlo = nullptr;  // (activations in bf16: no lo halves)
    p[i].w = a[i].w;
    p[i].w_row_bytes = a[i].w_row_bytes;
    p[i].bias = a[i].bias;
    p[i].y = a[i].y;
    p[i].rows = a[i].rows;
    p[i].k = a[i].k;
    p[i].n = a[i].n;
    // (an odd block count is rounded up to a pair, so no pair straddles two products)
    first[i + 1] = first[i] + (a[i].n / 16 + 1) / 2 * 2;
    tails = tails || a[i].n % 16 != 0;
  }
  split_blocks(first[count], [&](std::int64_t b, std::int64_t e) {
    for (std::size_t i = 0; i < count; ++i) {
      const std::int64_t lo = std::max(b, first[i]) - first[i], hi_b = std::min(e, first[i + 1]) - first[i];
      const std::int64_t blocks = a[i].n / 16;
      if (std::min(hi_b, blocks) > lo) amx::bf16_product_range(p[i], lo, std::min(hi_b, blocks));
    }
  });
  if (!tails) return;
  round_activations(a, count, ws);
  for (std::size_t i = 0; i < count; ++i)
    if (a[i].n % 16 != 0) avx512::float_product_range(a[i], a[i].n / 16 * 16, a[i].n);
}

/// A product with many rows on AMX tiles: bf16 weights (bf16_products_amx), or q8/q4
/// (product_amx_int). Whole blocks of 16 weight rows there, the last N mod 16 columns on the
/// AVX-512 kernel.
status product_amx(const kernel_call& c) {
  float_product a = args_of(c);
  if (a.rows == 0 || a.n == 0) return ok_status();
  if (keep_rows_alone(a.rows))  // what claims fewer rows on an AMX machine
    return a.type == wtype::q8 || a.type == wtype::q4 ? product_vnni_int8(c) : product<avx512_vnni_kernels>(c);
  if (a.type == wtype::q8 || a.type == wtype::q4) return product_amx_int(c, a);
  bf16_products_amx(&a, 1, *c.scratch);
  return ok_status();
}

bool accepts_amx(std::span<const tensor_desc> inputs, const op_params& params) {
  if (!accepts_trans_b(inputs, params)) return false;
  const dtype t = inputs[1].type;
  if (t != dtype::bf16 && t != dtype::q8 && t != dtype::q4) return false;
  const std::int64_t k = inputs[0].shape.back(), rows = activation_rows(inputs);
  return k > 0 && k % 32 == 0 && rows >= amx_free_min_rows && inputs[1].shape[0] >= 16;
}

/// product_amx for several calls of the same activations: as one group on the vector kernels
/// when rows keep their bits alone (a batched pass of 16 to 32 rows), bf16 ones on the tiles as
/// one group (bf16_products_amx), q8/q4 weights held as rows one by one.
status products_amx(std::span<const kernel_call> calls) {
  float_product a[max_group];
  if (!same_input(calls, a)) return one_by_one(calls, product_amx);
  if (keep_rows_alone(a[0].rows))
    return a[0].type == wtype::q8 || a[0].type == wtype::q4 ? products_vnni_int8(calls) : products<avx512_vnni_kernels>(calls);
  if (a[0].type != wtype::bf16 || a[0].rows == 0) return one_by_one(calls, product_amx);
  bf16_products_amx(a, calls.size(), *calls[0].scratch);  // (a product of no columns has no blocks)
  return ok_status();
}

/// A q8/q4 product on a CPU with VNNI, below the AMX tiles' rows (decode, batches, verify
/// passes), in vpdpbusd with a pair of blocks per instruction: the activations at int16
/// precision as two int8 planes (the int16 kernel's precision, each row computed alone: the
/// same bits in any batch), per pair of blocks about half the instructions of the int16
/// kernel, so q4 and q8 decode are held by the weights' bytes rather than by the instructions.
/// Many rows take the sixteen-column lanes (product_int8_lanes, registered ahead). A row holding NaN or ±∞ takes the
/// int16 kernel's path.
/// The activations of `a` quantized for the VNNI pair kernels, in the scratch; false when a
/// row is not finite.
bool vnni_quantize(const float_product& a, workspace& ws, int8_rows& out) {
  const std::size_t plane = std::size_t(a.rows * int8_rows_plane_bytes(a.type, a.k));
  auto* q = reinterpret_cast<std::uint8_t*>(ws.ints(2 * plane / 4, 7));
  std::uint8_t* lo = q + plane;
  const std::int64_t scales = a.rows * int8_rows_scales(a.type, a.k);
  float* scale = ws.floats(std::size_t(scales), 7);
  const int threads = kernel_threads();
  const int qparts = int(std::min<std::int64_t>(threads, a.rows));
  auto quantize = [&](std::int64_t b, std::int64_t e) {
    avx512_vnni::int16_split_quantize_rows(a.x, a.k, b, e, a.type, q, lo, scale);
  };
  if (qparts <= 1) quantize(0, a.rows);
  else parallel_for(qparts, [&](int p) { quantize(a.rows * p / qparts, a.rows * (p + 1) / qparts); });
  for (std::int64_t i = 0; i < scales; ++i)
    if (std::isnan(scale[i])) return false;
  out = int8_rows{q, scale, a.rows, a.k, lo};
  return true;
}

status product_vnni_int8(const kernel_call& c) {
  const float_product a = args_of(c);
  if (a.rows == 0 || a.n == 0) return ok_status();
  int8_rows x;
  if (!vnni_quantize(a, *c.scratch, x)) return product<avx512_vnni_kernels>(c);
  const int8_pairs_product p = int_args(a, x);
  split_columns(a.n, a.rows * a.k * a.n, [&](std::int64_t b, std::int64_t e) { avx512_vnni::int8_pairs_range(p, b, e); });
  return ok_status();
}

/// product_vnni_int8 for several calls at once, the activations quantized once for all.
status products_vnni_int8(std::span<const kernel_call> calls) {
  float_product a[max_group];
  if (!same_input(calls, a) || a[0].rows == 0) return one_by_one(calls, product_vnni_int8);
  int8_rows x;
  if (!vnni_quantize(a[0], *calls[0].scratch, x)) return one_by_one(calls, product<avx512_vnni_kernels>);
  int8_pairs_product p[max_group];
  for (std::size_t i = 0; i < calls.size(); ++i) p[i] = int_args(a[i], x);
  split_group_columns(a, calls.size(),
                      [&](std::size_t i, std::int64_t b, std::int64_t e) { avx512_vnni::int8_pairs_range(p[i], b, e); });
  return ok_status();
}

bool accepts_vnni_int8(std::span<const tensor_desc> inputs, const op_params& params) {
  if (!accepts_trans_b(inputs, params)) return false;
  const dtype t = inputs[1].type;
  const std::int64_t k = inputs[0].shape.back();
  return (t == dtype::q8 || t == dtype::q4) && k > 0 && k % 32 == 0;
}

/// AVX2's q8/q4 lanes kernels, in AVX-VNNI's dot products where the CPU has them
/// (cpu_isa::avx_vnni_dots; matmul_avx_vnni.cpp): the same bits either way.
void avx2_int8_lanes_range(const int8_lanes_product& a, std::int64_t n_begin, std::int64_t n_end) {
  (cpu_isa::avx_vnni_dots() ? avx_vnni::int8_lanes_range : avx2::int8_lanes_range)(a, n_begin, n_end);
}
void avx2_int16_held_lanes_range(const int_product& a, std::int64_t n_begin, std::int64_t n_end) {
  (cpu_isa::avx_vnni_dots() ? avx_vnni::int16_held_lanes_range : avx2::int16_held_lanes_range)(a, n_begin, n_end);
}

/// A q8/q4 product with many rows (prefill) where nothing wider serves: int8 activations (the
/// many-row numbers of AMX) against several weight rows at a time, one output per lane — eight
/// on AVX2 (avx2::int8_lanes_range), sixteen on VNNI without tiles (avx512_vnni's, the same
/// bits); fewer rows keep the int16 kernels, so a batched decode or verify pass gives each row
/// its bits alone. A row holding NaN or ±∞ takes the int16 kernels' path (and its float
/// fallback). The activations of `a` quantized once per call, in the scratch; `qsums` when the
/// kernel wants each block's Σq (VNNI's q8); false when a row is not finite.
bool lanes_quantize(const float_product& a, workspace& ws, bool qsums, int8_plain_rows& out) {
  const std::int64_t blocks = a.k / 32;
  auto* q = reinterpret_cast<std::int8_t*>(ws.ints(std::size_t((a.rows * a.k + 3) / 4), 7));
  float* scale = ws.floats(std::size_t(a.rows * blocks), 7);
  float* sums = a.type == wtype::q4 ? ws.floats(std::size_t(a.rows * blocks), 8) : nullptr;
  std::int32_t* qs = qsums && a.type == wtype::q8 ? ws.ints(std::size_t(a.rows * blocks), 8) : nullptr;
  split_rows(a.rows, [&](std::int64_t b, std::int64_t e) { avx2::int8_quantize_rows(a.x, a.k, b, e, q, scale, sums, qs); });
  for (std::int64_t i = 0; i < a.rows * blocks; ++i)
    if (std::isnan(scale[i])) return false;
  out = int8_plain_rows{q, scale, sums, a.rows, a.k, qs};
  return true;
}

/// Runs f(i, begin, end) over the calls' output columns in whole groups of `width` (a
/// product's last group may be shorter), split over the kernel threads as one product that wide.
/// (split_columns' shrinking parts here gave SmolLM2's q8/q4 decode products 5–20 % from memory
/// on a Xeon, but whole decode steps only 3–4 %, and Qwen3's q4 decode lost 1–4 %: not taken.)
template <class F>
void split_lane_groups(const float_product* a, std::size_t count, std::int64_t width, F&& f) {
  std::int64_t offs[max_group + 1] = {0};
  for (std::size_t i = 0; i < count; ++i) offs[i + 1] = offs[i] + (a[i].n + width - 1) / width;
  const std::int64_t groups = offs[count];
  const int threads = kernel_threads();
  const std::int64_t min_groups = 64 / width;  // at least 64 columns to a part
  std::int64_t macs = 0;
  for (std::size_t i = 0; i < count; ++i) macs += a[i].rows * a[i].k * a[i].n;
  // (alone, a long product still runs in parts, so a stopped run can skip the rest)
  const int parts = threads <= 1 ? int(std::clamp<std::int64_t>(macs / interruptible_macs + 1, 1, groups))
                                 : int(std::clamp<std::int64_t>(groups / min_groups, std::min<std::int64_t>(threads, groups), 4 * threads));
  auto run = [&](std::int64_t gb, std::int64_t ge) {
    for (std::size_t i = 0; i < count; ++i) {
      const std::int64_t lo = std::max(gb, offs[i]), hi = std::min(ge, offs[i + 1]);
      if (lo < hi) f(i, (lo - offs[i]) * width, std::min(a[i].n, (hi - offs[i]) * width));
    }
  };
  if (parts <= 1) return run(0, groups);
  parallel_for(parts, [&](int p) { run(groups * p / parts, groups * (p + 1) / parts); });
}

/// A many-row q8/q4 product on a level's lanes kernel (Range, Width columns per group, QSums:
/// it reads each block's Σq; LK's kernels for rows that are not finite).
/// Alone, Together: the kernels that claim fewer rows at this level (rows keeping their bits
/// alone below amx_min_rows).
template <void (*Range)(const int8_lanes_product&, std::int64_t, std::int64_t), std::int64_t Width, bool QSums,
          const level_kernels& LK, kernel_fn Alone, group_kernel_fn Together>
status product_int8_lanes(const kernel_call& c) {
  const float_product a = args_of(c);
  if (a.rows == 0 || a.n == 0) return ok_status();
  if (keep_rows_alone(a.rows)) return Alone(c);
  int8_plain_rows x;
  if (!lanes_quantize(a, *c.scratch, QSums, x)) return product<LK>(c);
  const int8_lanes_product p = int_args(a, x);
  split_lane_groups(&a, 1, Width, [&](std::size_t, std::int64_t b, std::int64_t e) { Range(p, b, e); });
  return ok_status();
}

/// product_int8_lanes for several calls at once, the activations quantized once for all.
template <void (*Range)(const int8_lanes_product&, std::int64_t, std::int64_t), std::int64_t Width, bool QSums,
          const level_kernels& LK, kernel_fn Alone, group_kernel_fn Together>
status products_int8_lanes(std::span<const kernel_call> calls) {
  float_product a[max_group];
  if (!same_input(calls, a) || a[0].rows == 0)
    return one_by_one(calls, product_int8_lanes<Range, Width, QSums, LK, Alone, Together>);
  if (keep_rows_alone(a[0].rows)) return Together(calls);
  int8_plain_rows x;
  if (!lanes_quantize(a[0], *calls[0].scratch, QSums, x)) return one_by_one(calls, product<LK>);
  int8_lanes_product p[max_group];
  for (std::size_t i = 0; i < calls.size(); ++i) p[i] = int_args(a[i], x);
  split_lane_groups(a, calls.size(), Width, [&](std::size_t i, std::int64_t b, std::int64_t e) { Range(p[i], b, e); });
  return ok_status();
}

bool accepts_int8_lanes(std::span<const tensor_desc> inputs, const op_params& params) {
  if (!accepts_trans_b(inputs, params)) return false;
  const dtype t = inputs[1].type;
  if (t != dtype::q8 && t != dtype::q4) return false;
  const std::int64_t k = inputs[0].shape.back(), rows = activation_rows(inputs);
  return k > 0 && k % 32 == 0 && rows >= lanes_free_min_rows(t == dtype::q4 ? wtype::q4 : wtype::q8);
}

/// A float product (f32, bf16 or f16 weights) with many rows — prefill; fewer rows keep the
/// tiles, so a batched step or a verify pass gives each row its bits alone — as a blocked
/// product with the columns in the lanes (float_lanes_range: panels of Width weight rows
/// widened once per call). Non-finite activations propagate as in any multiply-add.
template <void (*Range)(const float_product&, std::int64_t, std::int64_t), std::int64_t Width>
status product_float_lanes(const kernel_call& c) {
  float_product a = args_of(c);
  if (a.rows == 0 || a.n == 0) return ok_status();
  round_activations(&a, 1, *c.scratch, true);
  split_lane_groups(&a, 1, Width, [&](std::size_t, std::int64_t b, std::int64_t e) { Range(a, b, e); });
  return ok_status();
}

/// product_float_lanes for several calls of the same activations, as one product that wide.
template <void (*Range)(const float_product&, std::int64_t, std::int64_t), std::int64_t Width>
status products_float_lanes(std::span<const kernel_call> calls) {
  float_product a[max_group];
  if (!same_input(calls, a) || a[0].rows == 0) return one_by_one(calls, product_float_lanes<Range, Width>);
  round_activations(a, calls.size(), *calls[0].scratch, true);
  split_lane_groups(a, calls.size(), Width, [&](std::size_t i, std::int64_t b, std::int64_t e) { Range(a[i], b, e); });
  return ok_status();
}

bool accepts_float_lanes(std::span<const tensor_desc> inputs, const op_params& params) {
  if (!accepts_trans_b(inputs, params)) return false;
  const dtype t = inputs[1].type;
  if (t != dtype::f32 && t != dtype::bf16 && t != dtype::f16) return false;
  const std::int64_t k = inputs[0].shape.back(), rows = activation_rows(inputs);
  return k > 0 && rows >= amx_min_rows;
}

/// A bf16 product with many rows on AVX512-BF16's dot products (avx512_bf16::pairs_lanes_range:
/// panels of 32 weight rows in pairs, the activations rounded to bf16 pairs once per call, in
/// the scratch), for several calls of the same activations at once; the bits of the f32
/// panels of the other levels.
status products_bf16_pairs(std::span<const kernel_call> calls);
status product_bf16_pairs(const kernel_call& c) { return products_bf16_pairs(std::span<const kernel_call>(&c, 1)); }

status products_bf16_pairs(std::span<const kernel_call> calls) {
  float_product a[max_group];
  if (!same_input(calls, a)) return one_by_one(calls, product_bf16_pairs);
  if (a[0].rows == 0) return ok_status();
  if (keep_rows_alone(a[0].rows)) return products<avx512_vnni_kernels>(calls);  // (below 33 rows, a call that keeps them)
  const std::int64_t rows = a[0].rows, k = a[0].k, kp = (k + 1) / 2;
  auto* x = reinterpret_cast<std::uint32_t*>(calls[0].scratch->ints(std::size_t(rows * kp), 9));
  split_rows(rows, [&](std::int64_t b, std::int64_t e) { avx512_bf16::round_pairs(a[0].x, k, b, e, x); });
  bf16_pairs_product p[max_group];
  for (std::size_t i = 0; i < calls.size(); ++i)
    p[i] = bf16_pairs_product{x, a[i].w, a[i].w_row_bytes, a[i].bias, a[i].y, rows, k, a[i].n};
  split_lane_groups(a, calls.size(), 32,
                    [&](std::size_t i, std::int64_t b, std::int64_t e) { avx512_bf16::pairs_lanes_range(p[i], b, e); });
  return ok_status();
}

bool accepts_bf16_pairs(std::span<const tensor_desc> inputs, const op_params& params) {
  if (!accepts_trans_b(inputs, params) || inputs[1].type != dtype::bf16) return false;
  const std::int64_t k = inputs[0].shape.back(), rows = activation_rows(inputs);
  // (where vdpbf16ps issues well below the FMA rate the f32 panels are the faster, same bits;
  // asked last, so only a many-row bf16 product times the instructions)
  return k > 0 && rows >= amx_free_min_rows && cpu_isa::bf16_pairs();
}

// ---- q8/q4 weights held in lanes (tensor::lanes16): a CPU worker's resident form from AVX2 on

bool lanes_weight(const kernel_call& c) { return c.inputs.size() > 1 && c.inputs[1]->lanes16(); }

/// Products against q8/q4 weights held in lanes, sharing their activations (one call, or a
/// layer's q, k and v, whatever mix of q8 and q4): up to 32 rows (decode, batches, verify
/// passes; fewer than 16 or 24 in a call whose rows are free) on the lanes kernel with the
/// two-plane int16 activations (laid out once, as for q4, for every product of the group),
/// each row its bits alone; more on the sixteen-column many-row kernel, which packs from the
/// lanes the registers it packs from rows (the same bits). Below VNNI, AVX2's held-lanes kernel
/// (int16 activations, eight outputs per register) and its eight-column many-row lanes; below
/// AVX2, or for a row that is not finite, the reference's arithmetic reads the rows through
/// packed_row.
status products_lanes(std::span<const kernel_call> calls);
status product_lanes(const kernel_call& c) { return products_lanes(std::span<const kernel_call>(&c, 1)); }

status products_lanes(std::span<const kernel_call> calls) {
  const std::size_t count = calls.size();
  float_product a[max_group];
  bool together = count <= max_group;
  for (std::size_t i = 0; together && i < count; ++i) {
    a[i] = args_of(calls[i]);
    together = a[i].x == a[0].x && a[i].rows == a[0].rows && a[i].k == a[0].k;
    a[i].call = a[0].call;
  }
  if (!together) return one_by_one(calls, product_lanes);
  if (a[0].rows == 0) return ok_status();
  bool mixed = false;
  for (std::size_t i = 1; i < count; ++i) mixed = mixed || a[i].type != a[0].type;
  const std::int64_t free_min = lanes_free_min_rows(mixed ? wtype::q8 : a[0].type);
  const bool many = a[0].rows >= amx_min_rows || (a[0].rows >= free_min && rows_free());
  // every product of the group on `range` over whole groups of 16 columns, against activations x
  auto run = [&](const auto& x, auto range) {
    integer_product<std::decay_t<decltype(x)>> p[max_group];
    for (std::size_t i = 0; i < count; ++i) {
      p[i] = int_args(a[i], x);
      p[i].w_lanes = true;
    }
    split_lane_groups(a, count, 16, [&](std::size_t i, std::int64_t b, std::int64_t e) { range(p[i], b, e); });
    return ok_status();
  };
  // Many rows on AMX tiles, which take the lanes as B tiles in place (the AMX path's bits of
  // weights held as rows: its row thresholds, its int8 activations and their sums).
  if (cpu_isa::current() >= cpu_isa::level::amx && a[0].k > 0 && !mixed && !keep_rows_alone(a[0].rows) &&
      a[0].rows >= amx_free_min_rows) {
    workspace& ws = *calls[0].scratch;
    std::int32_t* xtot = ws.ints(std::size_t((a[0].rows + 15) / 16 * (a[0].k / 32) * 16), 8);
    const auto pack = [&](std::int64_t b, std::int64_t e, std::int8_t* xq, float* xs, float* xsum) {
      amx::pack_int8_lane_activations(a[0].x, a[0].rows, a[0].k, b, e, xq, xs, xsum, xtot);
    };
    amx_int8_x x;
    if (pack_amx_int8(ws, a[0], pack, x)) {
      amx_int_product p[max_group];
      for (std::size_t i = 0; i < count; ++i) p[i] = amx_int_args(a[i], x);
      split_lane_groups(a, count, 16, [&](std::size_t i, std::int64_t b, std::int64_t e) {
        amx::int8_held_lanes_range(p[i], xtot, b / 16, e / 16);
      });
      return ok_status();
    }
  }
  if (cpu_isa::current() >= cpu_isa::level::avx512_vnni && a[0].k > 0) {
    if (!many) {
      float_product layout = a[0];
      layout.type = wtype::q4;  // (the quads' layout serves both)
      int8_rows x;
      if (vnni_quantize(layout, *calls[0].scratch, x)) return run(x, avx512_vnni::int8_held_lanes_range);
    } else if (mixed) {
      return one_by_one(calls, product_lanes);
    } else {
      int8_plain_rows x;
      if (lanes_quantize(a[0], *calls[0].scratch, true, x)) return run(x, avx512_vnni::int8_lanes_range);
    }
  } else if (cpu_isa::current() >= cpu_isa::level::avx2 && a[0].k > 0) {
    // AVX2 (and AVX-512 without VNNI): the int16 activations of the row kernels, quantized with
    // their Σq·s for q8 as well (the offset's term), eight outputs per register; many rows on
    // AVX2's eight-column lanes, packed from the lanes
    if (!many) {
      float_product layout = a[0];
      layout.type = wtype::q4;  // (so the quantizer gives the sums)
      quantized_rows x;
      if (int16_quantize(avx2_kernels, layout, *calls[0].scratch, x)) {
        // laid out once for every product and part of the call
        std::int32_t* pairs = calls[0].scratch->ints(std::size_t(x.rows * x.k / 2), 9);
        avx2::held_pairs(x.q, x.rows * x.k, pairs);
        x.q = reinterpret_cast<const std::int16_t*>(pairs);
        return run(x, avx2_int16_held_lanes_range);
      }
    } else if (mixed) {
      return one_by_one(calls, product_lanes);
    } else {
      int8_plain_rows x;
      if (lanes_quantize(a[0], *calls[0].scratch, false, x)) return run(x, avx2_int8_lanes_range);
    }
  }
  for (std::size_t i = 0; i < count; ++i) {
    const float_product& ai = a[i];
    const tensor& wi = *calls[i].inputs[1];
    split_columns(ai.n, ai.rows * ai.k * ai.n, [&ai, &wi](std::int64_t b, std::int64_t e) {
      std::vector<float> tmp(std::size_t(ai.k));
      scalar_range(ai, wi, tmp.data(), b, e);
    });
  }
  return ok_status();
}

/// Kernel F, or for a weight held in lanes products_lanes: every registered product kernel
/// goes through this, so the lanes never reach a kernel that reads rows.
template <kernel_fn F>
status unless_lanes(const kernel_call& c) {
  return lanes_weight(c) ? product_lanes(c) : F(c);
}

/// Group kernel G for the calls whose weights are held as rows, products_lanes for the others.
template <group_kernel_fn G>
status unless_lanes_group(std::span<const kernel_call> calls) {
  std::size_t lanes = 0;
  for (const auto& c : calls) lanes += lanes_weight(c) ? 1 : 0;
  if (lanes == 0) return G(calls);
  if (lanes == calls.size()) return products_lanes(calls);
  kernel_call rows[max_group], in_lanes[max_group];
  std::size_t nr = 0, nl = 0;
  for (const auto& c : calls) (lanes_weight(c) ? in_lanes[nl++] : rows[nr++]) = c;
  MPAKT_TRY(products_lanes(std::span<const kernel_call>(in_lanes, nl)));
  return G(std::span<const kernel_call>(rows, nr));
}

status product_scalar(const kernel_call& c) {
  float_product a = args_of(c);
  if (a.rows == 0 || a.n == 0) return ok_status();
  round_activations(&a, 1, *c.scratch);
  scalar_range(a, *c.inputs[1], c.scratch->floats(std::size_t(a.k)), 0, a.n);
  return ok_status();
}

/// AVX2's many-row q8/q4 lanes kernel as the entry of `l`, whose own kernels (LK) take the rows
/// that keep their bits alone and those that are not finite.
template <const level_kernels& LK>
cpu_kernel avx2_int8_lanes_entry(const char* op, level l) {
  return {op, unless_lanes<product_int8_lanes<avx2_int8_lanes_range, 8, false, LK, product<LK>, products<LK>>>,
          accepts_int8_lanes, cpu_isa::level_name(l), l,
          unless_lanes_group<products_int8_lanes<avx2_int8_lanes_range, 8, false, LK, product<LK>, products<LK>>>};
}

}  // namespace

void add_matmul_kernels(std::vector<cpu_kernel>& out) {
  struct entry {
    kernel_fn fn;
    level min;
    group_kernel_fn group;
  };
  const entry levels[] = {
      {unless_lanes<product<avx512_vnni_kernels>>, level::avx512_vnni, unless_lanes_group<products<avx512_vnni_kernels>>},
      {unless_lanes<product<avx512_kernels>>, level::avx512, unless_lanes_group<products<avx512_kernels>>},
      {unless_lanes<product<avx2_kernels>>, level::avx2, unless_lanes_group<products<avx2_kernels>>},
      {unless_lanes<product_scalar>, level::scalar, nullptr},
  };
  for (const char* op : {"matmul", "linear"}) {
    out.push_back({op, unless_lanes<product_amx>, accepts_amx, "amx", level::amx, unless_lanes_group<products_amx>});
    // many rows of bf16 weights without tiles: AVX512-BF16's dot products
    out.push_back({op, unless_lanes<product_bf16_pairs>, accepts_bf16_pairs, "avx512_bf16", level::avx512_bf16,
                   unless_lanes_group<products_bf16_pairs>});
    // many rows of float weights (what AMX does not take): blocked products, columns in the lanes
    out.push_back({op, unless_lanes<product_float_lanes<avx512::float_lanes_range, 32>>, accepts_float_lanes, "avx512",
                   level::avx512, unless_lanes_group<products_float_lanes<avx512::float_lanes_range, 32>>});
    out.push_back({op, unless_lanes<product_float_lanes<avx2::float_lanes_range, 24>>, accepts_float_lanes, "avx2", level::avx2,
                   unless_lanes_group<products_float_lanes<avx2::float_lanes_range, 24>>});
    // many rows without tiles: sixteen columns in the lanes (accepts_int8_lanes: q4 from 16 rows,
    // q8 from 24; below 33 only in a call whose rows are free, else the pairs below take them)
    out.push_back({op,
                   unless_lanes<product_int8_lanes<avx512_vnni::int8_lanes_range, 16, true, avx512_vnni_kernels,
                                                   product_vnni_int8, products_vnni_int8>>,
                   accepts_int8_lanes, "avx512_vnni", level::avx512_vnni,
                   unless_lanes_group<products_int8_lanes<avx512_vnni::int8_lanes_range, 16, true, avx512_vnni_kernels,
                                                          product_vnni_int8, products_vnni_int8>>});
    out.push_back({op, unless_lanes<product_vnni_int8>, accepts_vnni_int8, "avx512_vnni", level::avx512_vnni,
                   unless_lanes_group<products_vnni_int8>});
    for (const auto& e : levels) {
      // AVX2's many-row q8/q4 products, ahead of the general kernels of AVX2 and of AVX-512
      // without VNNI (VNNI machines take their own, registered before), with each level's own
      // kernels for the rows that keep their bits alone: a matrix held as rows gets the bits
      // its lanes would (product_lanes takes this kernel for many rows on both levels) —
      // before, AVX-512's int16 row kernels took a rows-held matrix's many-row products
      if (e.min == level::avx512) out.push_back(avx2_int8_lanes_entry<avx512_kernels>(op, level::avx512));
      if (e.min == level::avx2) out.push_back(avx2_int8_lanes_entry<avx2_kernels>(op, level::avx2));
      out.push_back({op, e.fn, accepts_trans_b, cpu_isa::level_name(e.min), e.min, e.group});
    }
  }
}

}  // namespace mpakt::cpu_fast
