#pragma once
/// The interface between the dispatching code and the per-level kernel translation units.
///
/// Files named *_avx2.cpp, *_avx512.cpp, *_avx512_vnni.cpp (…) are compiled with that level's instruction set
/// (CMakeLists.txt) and run only after backends/cpu/isa.hpp said the CPU has it. Any inline
/// function or template they instantiate could be emitted there and picked by the linker
/// for the whole program, so they include this header, <immintrin.h> and <cstdint> only:
/// plain structs of pointers and sizes in, nothing of the runtime's types. Threading and
/// every runtime type stay on the dispatching side (baseline instruction set).
///
/// That includes <vector> and every other library template: a std::vector<float>::resize
/// emitted by an AVX-512 file was once the copy the linker kept for the whole program, and
/// an AVX2-only CPU stopped with SIGILL growing an unrelated vector. Scratch memory comes from
/// kernel_scratch below instead (tools/check_isa_objects.sh, a test, fails the build's tests
/// when a per-level object defines a symbol another file could share).
///
/// Weight formats (runtime/dtype.hpp): rows of `k` values; f32; bf16 and f16 as 16-bit
/// words; q8 blocks of 32 values {f16 d; int8 q[32]} (x = q·d); q4 blocks of 32 {f16 d;
/// f16 m; uint8 q[16]} with value 2i in the low nibble of byte i and 2i+1 in the high one
/// (x = q·d + m).

#include <cstddef>
#include <cstdint>

namespace mpakt::cpu_fast {

/// The calling thread's scratch buffers of the per-level kernels, one per use.
enum class scratch_slot : int { reordered_activations, scale_pairs, lane_weights, lane_scales, lane_offsets, panel, panel_sums, bf16_order, count };

/// At least `bytes` of the calling thread's buffer `slot`, 64-byte aligned; its contents are
/// not kept when it grows. It lives until the thread ends, so the steady state allocates
/// nothing. Defined on the dispatching side (baseline instruction set); throws std::bad_alloc.
void* kernel_scratch(scratch_slot slot, std::size_t bytes);

/// Weight storage codes (the order of runtime's dtype enum is not relied upon).
enum class wtype : int { f32 = 0, bf16 = 1, f16 = 2, q8 = 3, q4 = 4 };

/// y[r, n] = dot(x_r, w_n) (+ bias[n]) for r < rows and n in [n_begin, n_end), with x in f32.
struct float_product {
  const float* x = nullptr;       ///< rows × k, row stride k
  const std::uint8_t* w = nullptr;  ///< n rows of `w_row_bytes`
  std::int64_t w_row_bytes = 0;
  wtype type = wtype::f32;
  const float* bias = nullptr;
  float* y = nullptr;             ///< rows × n, row stride n
  std::int64_t rows = 0, k = 0, n = 0;
  /// A number no other call shares, or 0: a thread that takes several column ranges of one call
  /// reorders its activations once (the bf16 tiles of float_product_range), not once per range.
  std::uint64_t call = 0;
};

/// The integer steps of the activations' int16 quantization on every level: 127·256 + 127, so
/// that a value also splits into two signed int8 halves (q = 256·hi + lo, lo in [−128, 127]) for
/// VNNI's byte products, and a volunteer's numbers do not depend on its vector unit.
inline constexpr float int16_levels = 32639.0f;

/// Activations quantized for the integer products: per row and per block of 32, int16
/// values and a scale (x ≈ q · scale, scale = max|x|/int16_levels, rounded to nearest even; a
/// block holding NaN or ±∞ gets a NaN scale); for q4 weights `sums` holds Σq·scale per block
/// (the offset's term).
struct quantized_rows {
  const std::int16_t* q = nullptr;  ///< rows × k
  const float* scale = nullptr;     ///< rows × k/32
  const float* sums = nullptr;      ///< rows × k/32 (q4 only)
  std::int64_t rows = 0, k = 0;
};

/// y[r, n] = Σ_blocks d_w · s_x · Σ q_w q_x (+ m_w · s_x · Σ q_x for q4) (+ bias[n]), with
/// the activations quantized as `Rows` says (one form per kind of integer kernel).
template <class Rows>
struct integer_product {
  Rows x;
  const std::uint8_t* w = nullptr;
  std::int64_t w_row_bytes = 0;
  wtype type = wtype::q8;  ///< q8 or q4
  const float* bias = nullptr;
  float* y = nullptr;
  std::int64_t n = 0;
  /// q8/q4 weights held in lanes (tensor::lanes16; dtype.hpp): only the held-lanes kernels read them.
  bool w_lanes = false;
};

using int_product = integer_product<quantized_rows>;

/// Scaled dot-product attention over f32 rows (the attention op's fast path): q row t at
/// position pos_offset + t, key/value row s at position s, query head h reading kv head
/// h / (heads / kv_heads). Scores: scale·q·k, then softcap (when > 0), ALiBi slope·(s − pos)
/// (when slopes), bias[(h,) t, s] (when bias); visibility as the reference kernel's.
struct attention_args {
  /// How k and v are stored: f32, or 16-bit (a KV cache at half width) widened in registers
  /// — f16 through F16C, bf16 by a shift — so the arithmetic is the f32 path's.
  enum class kv_type : int { f32, bf16, f16 };
  const float* q = nullptr;
  const void* k = nullptr;  ///< kv_type elements
  const void* v = nullptr;
  kv_type kv = kv_type::f32;  ///< k and v alike
  const float* bias = nullptr;   ///< [T, S] or [heads, T, S]
  const float* slopes = nullptr;  ///< one per head, or nullptr
  float* out = nullptr;
  std::int64_t q_stride = 0, k_stride = 0, v_stride = 0, out_stride = 0;  ///< row strides (elements)
  std::int64_t bias_head_stride = 0;  ///< T·S for a per-head bias, else 0
  std::int64_t rows = 0, keys = 0;
  int heads = 0, kv_heads = 0, head_dim = 0, v_head_dim = 0;
  std::int64_t pos_offset = 0;
  bool causal = true;
  std::int64_t window = 0;  ///< 0 = none
  float scale = 1, softcap = 0;
};

/// Keys per chunk of a row's softmax: chunk c covers key positions [c·attention_chunk,
/// (c+1)·attention_chunk). Fixed, so a row's result never depends on the pass or the threads.
inline constexpr std::int64_t attention_chunk = 256;

/// Slices of the kv heads a few-row pass's `used_chunks` chunks of keys (or a group of such
/// passes', all their chunks together) are split into over `threads` threads (jobs: chunks ×
/// slices, each a chunk's keys for a slice's kv heads, read in row order). Enough jobs for
/// twice the threads, except over one chunk, whose kv heads go one slice a thread: each thread
/// then reads a longer run of every cache row (Qwen3 shape, 200 keys, two threads: 48–68 ns per
/// key and kv head against 61–74 in four slices).
inline std::int64_t attention_slices(int threads, std::int64_t used_chunks, int kv_heads) {
  if (threads <= 1 || used_chunks < 1) return 1;
  const std::int64_t want = used_chunks == 1 ? threads : (2 * threads + used_chunks - 1) / used_chunks;
  return want < 1 ? 1 : want > kv_heads ? kv_heads : want;
}

/// Partial softmaxes per (row − t_begin, head of the group, chunk), at index
/// ((row − t_begin)·group + head)·chunks + chunk: the maximum, the sum of exponentials, and
/// the unnormalised weighted values (v_head_dim floats each).
struct attention_partial {
  float* m = nullptr;
  float* l = nullptr;
  float* acc = nullptr;
};

/// A product on AMX tiles (matmul_amx.cpp): the activations packed by pack_activations
/// into bf16 halves (hi + lo = x), the weight bf16 [N, K] with K a multiple of 32.
struct amx_product {
  const std::uint16_t* xhi = nullptr;
  const std::uint16_t* xlo = nullptr;  ///< null: hi alone (activations that are bf16 already)
  const std::uint8_t* w = nullptr;
  std::int64_t w_row_bytes = 0;
  const float* bias = nullptr;
  float* y = nullptr;  ///< rows × n
  std::int64_t rows = 0, k = 0, n = 0;
};

/// A q8/q4 product on AMX-INT8 tiles (matmul_amx.cpp): activations packed by
/// pack_int8_activations (int8 per row and block of 32, as B tiles), the weight [N, K].
struct amx_int_product {
  const std::int8_t* xq = nullptr;  ///< [row block][block] tiles of 8 × 64 bytes
  const float* xs = nullptr;        ///< [row block][block][16] activation scales
  const float* xsum = nullptr;      ///< q4: [row block][block][16] scale · Σq
  const std::uint8_t* w = nullptr;
  std::int64_t w_row_bytes = 0;
  wtype type = wtype::q8;
  const float* bias = nullptr;
  float* y = nullptr;
  std::int64_t rows = 0, k = 0, n = 0;
};

namespace amx {
/// Bytes of packed activations (each half) for `rows` rows of width k.
inline std::int64_t packed_halves(std::int64_t rows, std::int64_t k) { return (rows + 15) / 16 * k * 16; }
/// Packs row blocks [m_begin, m_end) (16 rows each) of x [rows, k] into hi, x rounded to bf16
/// (nearest even; a NaN made quiet), and, when lo is not null, lo, the rounding error rounded
/// (each packed_halves(rows, k) values).
void pack_activations(const float* x, std::int64_t rows, std::int64_t k, std::int64_t m_begin, std::int64_t m_end,
                      std::uint16_t* hi, std::uint16_t* lo);
/// The same, one value at a time (the tests' oracle for the vector version).
void pack_activations_reference(const float* x, std::int64_t rows, std::int64_t k, std::int64_t m_begin,
                                std::int64_t m_end, std::uint16_t* hi, std::uint16_t* lo);
/// Output columns of whole blocks of 16 weight rows [nb_begin, nb_end) (never past N).
void bf16_product_range(const amx_product& a, std::int64_t nb_begin, std::int64_t nb_end);
/// Packs row blocks [m_begin, m_end) of x [rows, k] for amx_int_product: xq gets
/// row_blocks·k·16 bytes, xs (and xsum, when not null) row_blocks·(k/32)·16 floats. A block
/// holding NaN or ±∞ gets a NaN scale.
void pack_int8_activations(const float* x, std::int64_t rows, std::int64_t k, std::int64_t m_begin, std::int64_t m_end,
                           std::int8_t* xq, float* xs, float* xsum);
/// Whole blocks of 16 weight rows [nb_begin, nb_end).
void int8_product_range(const amx_int_product& a, std::int64_t nb_begin, std::int64_t nb_end);
/// Packs row blocks [m_begin, m_end) of x [rows, k] for int8_held_lanes_range: xq as A tiles
/// (16 rows × 32 bytes per block: a row's even values, then its odd ones — the order of a
/// lane block's runs), xs and xsum as pack_int8_activations gives them, and xtot the blocks'
/// sums of quantized values ([row block][block][16]).
void pack_int8_lane_activations(const float* x, std::int64_t rows, std::int64_t k, std::int64_t m_begin,
                                std::int64_t m_end, std::int8_t* xq, float* xs, float* xsum, std::int32_t* xtot);
/// int8_product_range for q8/q4 weights held in lanes (runtime/dtype.hpp; a.w the groups,
/// a.xq from pack_int8_lane_activations, xtot its sums): groups of 16 weight rows
/// [nb_begin, nb_end). The same bits as int8_product_range on the weights held as rows.
void int8_held_lanes_range(const amx_int_product& a, const std::int32_t* xtot, std::int64_t nb_begin,
                           std::int64_t nb_end);
}  // namespace amx

/// What each vector level (AVX2, AVX-512) provides, declared once for both namespaces.
///  - attention_chunks: the chunks a pass has, ceil(keys / attention_chunk).
///  - attention_rows: rows [t_begin, t_end) of kv head g's query heads [hg_begin, hg_end) of its
///    group (each head's bits do not depend on which others run with it), finished into a.out
///    (head_dim and v_head_dim multiples of 16, at most 256 and 512).
///  - attention_partials / attention_fold: the partials of chunks [c_begin, c_end) for the
///    rows' query heads of kv heads [g_begin, g_end) (parts[g] holds kv head g's; a decode
///    step's chunks spread over threads), and their fold, in chunk order, into a.out — the
///    same bits as attention_rows. The fold reads only the chunks holding each row's keys,
///    which are all a caller must have written.
///  - swiglu_range, silu_range, binary_range: elements [begin, end); binary_range is
///    out = a op b (op 0 add, 1 sub, 2 mul) with b_kind 0: b has a's shape, 1: b is one row as
///    wide as a's `cols`, 2: b is one value — in f32, the same bits as the reference's double
///    arithmetic rounded once (a sum, difference or product of two floats rounds the same).
///  - rope_half_rows: rows [r_begin, r_end) of heads rotated by rope in pairs (i, i + rotaryDim/2)
///    with the cos/sin table rows cs, sn (rotaryDim/2 each per row), in double rounded once:
///    the reference's bits (backends/cpu/rope_rotate.hpp); src may be dst.
///  - rmsnorm_rows: groups [g_begin, g_end) of `group` values normalised by their root mean
///    square, times gamma + offset.
///  - argmax_rows: rows [r_begin, r_end) of `cols` values: the index of each row's first
///    maximum (of its first NaN, when it has one), as the reference picks it.
///  - float_product_range, int_product_range: output columns [n_begin, n_end).
///  - float_lanes_range: output columns [n_begin, n_end) of a float product with many rows
///    (prefill), as a blocked product with the columns in the lanes (other bits than
///    float_product_range: only products of more rows than a batched step are given to it).
///  - quantize_rows: rows [r_begin, r_end) of x (row stride k, a multiple of 32) into q,
///    scale and (when not null) sums.
#define MPAKT_VECTOR_LEVEL_API                                                                                         \
  std::int64_t attention_chunks(const attention_args& a);                                                            \
  void attention_rows(const attention_args& a, std::int64_t t_begin, std::int64_t t_end, int g, int hg_begin,         \
                      int hg_end);                                                                                    \
  void attention_partials(const attention_args& a, std::int64_t t_begin, std::int64_t t_end, int g_begin, int g_end, \
                          std::int64_t c_begin, std::int64_t c_end, const attention_partial* parts);                  \
  void attention_fold(const attention_args& a, std::int64_t t_begin, std::int64_t t_end, int g,                       \
                      const attention_partial& part);                                                                 \
  void swiglu_range(const float* gate, const float* up, float* out, std::int64_t begin, std::int64_t end);            \
  void silu_range(const float* x, float* out, std::int64_t begin, std::int64_t end);                                  \
  void binary_range(int op, const float* a, const float* b, float* out, std::int64_t cols, std::int64_t b_kind,       \
                    std::int64_t begin, std::int64_t end);                                                            \
  void rope_half_rows(const float* src, float* dst, std::int64_t width, std::int64_t head_dim, std::int64_t rotary_dim, \
                      const float* cs, const float* sn, std::int64_t r_begin, std::int64_t r_end);                    \
  void rmsnorm_rows(const float* x, const float* gamma, float* out, std::int64_t group, std::int64_t g_begin,         \
                    std::int64_t g_end, double eps, float weight_offset);                                             \
  void argmax_rows(const float* x, float* out, std::int64_t cols, std::int64_t r_begin, std::int64_t r_end);          \
  void float_product_range(const float_product& a, std::int64_t n_begin, std::int64_t n_end);                         \
  void float_lanes_range(const float_product& a, std::int64_t n_begin, std::int64_t n_end);                           \
  void quantize_rows(const float* x, std::int64_t k, std::int64_t r_begin, std::int64_t r_end, std::int16_t* q,       \
                     float* scale, float* sums);                                                                      \
  void int_product_range(const int_product& a, std::int64_t n_begin, std::int64_t n_end);

namespace avx2 {
MPAKT_VECTOR_LEVEL_API
}  // namespace avx2

/// Activations quantized to int8 for the AVX2 many-row products (prefill): per row and block of
/// 32, int8 values in their natural order with the many-row integer paths' scale (max|x|/127,
/// nearest even: AMX's and VNNI's numbers); NaN scale for a block holding NaN or ±∞; for q4
/// `sums` holds Σq·scale per block.
struct int8_plain_rows {
  const std::int8_t* q = nullptr;  ///< rows × k
  const float* scale = nullptr;    ///< rows × k/32
  const float* sums = nullptr;     ///< rows × k/32 (q4)
  std::int64_t rows = 0, k = 0;
  const std::int32_t* qsums = nullptr;  ///< rows × k/32: Σq per block (VNNI's q8 lanes)
};

using int8_lanes_product = integer_product<int8_plain_rows>;

namespace avx2 {
/// Rows [r_begin, r_end) of x (stride k, a multiple of 32) as int8_plain_rows (`sums`, `qsums`
/// filled when not null).
void int8_quantize_rows(const float* x, std::int64_t k, std::int64_t r_begin, std::int64_t r_end, std::int8_t* q,
                        float* scale, float* sums, std::int32_t* qsums = nullptr);
/// Output columns [n_begin, n_end), eight weight rows at a time with one output per lane
/// (a.w_lanes: packed from weights held in lanes, the same registers and bits).
void int8_lanes_range(const int8_lanes_product& a, std::int64_t n_begin, std::int64_t n_end);
/// The int16 activations of quantize_rows (n values, a multiple of 16) laid out for
/// int16_held_lanes_range: per block 16 dwords, dword 4j + u holding values 8j + u (low half)
/// and 8j + u + 4 (high half).
void held_pairs(const std::int16_t* q, std::int64_t n, std::int32_t* out);
/// Output columns [n_begin, n_end) (multiples of 16) of a product with q8/q4 weights held in
/// lanes (a.w_lanes), at most 32 rows, against the int16 activations of quantize_rows with
/// `sums` (Σq·s per block, for q8 as well), a.x.q laid out by held_pairs: each row computed
/// alone, eight outputs per register.
void int16_held_lanes_range(const int_product& a, std::int64_t n_begin, std::int64_t n_end);
/// Rows [0, rows) of x (row stride k) rounded to bf16, nearest even (NaN stays NaN, quiet), as
/// f32: the values runtime/dtype.hpp's f32_to_bf16 gives, widened again. `panel_order`: each
/// row's pairs of values swapped (value i at i ^ 1 when its partner is in the row), the order
/// of a bf16 weight's panel (panels.inc).
void round_to_bf16(const float* x, std::int64_t rows, std::int64_t k, float* out, bool panel_order);
}  // namespace avx2

/// avx2's int8_lanes_range and int16_held_lanes_range in AVX-VNNI's 256-bit dot products
/// (matmul_avx_vnni.cpp; cpu_isa::avx_vnni_dots): the same arguments, the same bits.
namespace avx_vnni {
void int8_lanes_range(const int8_lanes_product& a, std::int64_t n_begin, std::int64_t n_end);
void int16_held_lanes_range(const int_product& a, std::int64_t n_begin, std::int64_t n_end);
}  // namespace avx_vnni

namespace avx512 {
MPAKT_VECTOR_LEVEL_API
}  // namespace avx512

#undef MPAKT_VECTOR_LEVEL_API

/// Activations quantized for the VNNI pair products (decode, batches, verify passes), int16
/// (max|x|/int16_levels per block) as two int8 planes, q = 256·hi + lo, two vpdpbusd per
/// weight register — int16 precision at nearly int8's cost. Per row, in groups of blocks:
///  - q8, pairs of blocks: 64 bytes per plane, values in natural order as vpdpbusd's unsigned
///    operand (hi + 128; lo in [0, 255]); 16 scales laid out as the pair's lanes.
///  - q4, quads of four blocks: 128 bytes per plane, [even values b0, b1, b2, b3, odd values
///    b0, b1, b2, b3] (16 each, the signed operand; hi and lo signed); 8 floats [s0, S0, s1,
///    S1, s2, S2, s3, S3] with S = Σq·s, the offset's factor.
/// A last group's missing blocks are zero, values and scales.
/// Floats of int8_rows::scale per pair (q8) or quad (q4) of blocks.
inline constexpr std::int64_t q8_pair_scales = 16, q4_quad_scales = 8;
/// Bytes of each plane of one row of k values, and floats of its scales.
inline std::int64_t int8_rows_plane_bytes(wtype t, std::int64_t k) {
  const std::int64_t blocks = k / 32;
  return t == wtype::q4 ? (blocks + 3) / 4 * 128 : (blocks + 1) / 2 * 64;
}
inline std::int64_t int8_rows_scales(wtype t, std::int64_t k) {
  const std::int64_t blocks = k / 32;
  return t == wtype::q4 ? (blocks + 3) / 4 * q4_quad_scales : (blocks + 1) / 2 * q8_pair_scales;
}
struct int8_rows {
  const std::uint8_t* q = nullptr;   ///< rows × int8_rows_plane_bytes: the high plane
  const float* scale = nullptr;      ///< rows × int8_rows_scales
  std::int64_t rows = 0, k = 0;
  const std::uint8_t* lo = nullptr;  ///< rows × int8_rows_plane_bytes: the low plane
};

using int8_pairs_product = integer_product<int8_rows>;

namespace avx512_vnni {
/// Rows [r_begin, r_end) of x (stride k, a multiple of 32) for int8_pairs_range, in the
/// two-plane int16 form (the int16 kernels' exact values); NaN scale for a block holding NaN
/// or ±∞. hi and lo each get rows·int8_rows_plane_bytes bytes, scale rows·int8_rows_scales
/// floats.
void int16_split_quantize_rows(const float* x, std::int64_t k, std::int64_t r_begin, std::int64_t r_end, wtype type,
                               std::uint8_t* hi, std::uint8_t* lo, float* scale);
/// Output columns [n_begin, n_end).
void int8_pairs_range(const int8_pairs_product& a, std::int64_t n_begin, std::int64_t n_end);
/// Output columns [n_begin, n_end) (multiples of 16) of a product with q8/q4 weights held in
/// lanes (a.w_lanes), at most 32 rows, in the two-plane form of the activations laid out as
/// for q4 (int16_split_quantize_rows with wtype::q4, whatever a.type): each row computed
/// alone, sixteen outputs per register.
void int8_held_lanes_range(const int8_pairs_product& a, std::int64_t n_begin, std::int64_t n_end);
/// Output columns [n_begin, n_end) of a many-row product with int8_plain_rows activations
/// (avx2::int8_quantize_rows; q8 needs their `qsums`), sixteen weight rows at a time with one output per lane: the
/// bits of avx2::int8_lanes_range, in vpdpbusd.
void int8_lanes_range(const int8_lanes_product& a, std::int64_t n_begin, std::int64_t n_end);
}  // namespace avx512_vnni

/// A bf16 product with many rows on AVX512-BF16's dot products (matmul_avx512_bf16.cpp): the
/// activations rounded to bf16 as pairs of values of k.
struct bf16_pairs_product {
  const std::uint32_t* x = nullptr;  ///< rows × ⌈k/2⌉ words: value 2p in the low half of word p, 2p + 1 (or 0 past k) in the high
  const std::uint8_t* w = nullptr;   ///< n bf16 rows of `w_row_bytes`
  std::int64_t w_row_bytes = 0;
  const float* bias = nullptr;
  float* y = nullptr;  ///< rows × n
  std::int64_t rows = 0, k = 0, n = 0;
};

namespace avx512_bf16 {
/// Rows [r_begin, r_end) of x (stride k) rounded to bf16 as avx2::round_to_bf16 rounds them,
/// as bf16_pairs_product's pairs (row stride ⌈k/2⌉ words).
void round_pairs(const float* x, std::int64_t k, std::int64_t r_begin, std::int64_t r_end, std::uint32_t* out);
/// Output columns [n_begin, n_end): panels of 32 weight rows in pairs of bf16, the columns in
/// the lanes (the bits of avx2's and avx512's float_lanes_range on the same rounded activations).
void pairs_lanes_range(const bf16_pairs_product& a, std::int64_t n_begin, std::int64_t n_end);
}  // namespace avx512_bf16

}  // namespace mpakt::cpu_fast
