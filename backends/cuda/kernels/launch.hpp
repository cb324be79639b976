#pragma once
/// Launchers of the device kernels (kernels/*.cu), in plain C++ with raw device pointers.
///
/// Every launcher queues its work on `s` and returns the launch error (cudaGetLastError),
/// cudaSuccess when there is nothing to do (a zero count). Pointers are device memory;
/// counts are elements. Tensors are row-major; "rows" fold every leading dimension.
/// Callers (ops/*.cpp) turn a failure into an error naming the op.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mpakt::cuda::k {

// ---- elementwise.cu ----

enum class binary_op : int { add, sub, mul };
/// How b lines up with a: the same shape, one row as wide as a (`cols`), or one value.
enum class broadcast : int { full, row, scalar };
/// out = a (op) b. `out` may alias `a`.
cudaError_t binary(binary_op op, const float* a, const float* b, float* out, std::int64_t n, std::int64_t cols,
                   broadcast b_layout, cudaStream_t s);

enum class unary_op : int { silu, gelu_tanh };
/// out = f(x), evaluated in double and rounded once, as the CPU reference does. `out` may
/// alias `x`.
cudaError_t unary(unary_op op, const float* x, float* out, std::int64_t n, cudaStream_t s);
/// out = x * factor, the product taken in double as the CPU reference does.
cudaError_t scale(const float* x, float* out, std::int64_t n, double factor, cudaStream_t s);
/// out = silu(gate) * up, in double and rounded once.
cudaError_t swiglu(const float* gate, const float* up, float* out, std::int64_t n, cudaStream_t s);

// ---- norm.cu ----

/// Softmax of each row of `cols` values, the row maximum subtracted first (a NaN anywhere
/// in a row makes the row NaN; a row of -inf gives NaN, as in PyTorch).
cudaError_t softmax_rows(const float* x, float* out, std::int64_t rows, std::int64_t cols, cudaStream_t s);
/// RMS normalisation of each run of `group` consecutive values (the whole row when not
/// grouped): y = x / sqrt(mean(x^2) + eps) * (gamma[j] + weight_offset), j the index within
/// the group (gamma holds `group` values). Statistics in double.
cudaError_t rmsnorm_groups(const float* x, const float* gamma, float* out, std::int64_t groups, std::int64_t group,
                           double eps, double weight_offset, cudaStream_t s);

// ---- rope.cu ----

/// Rotary embedding, in place, of `rows` rows of `row_width` = heads * head_dim values; row t
/// sits at position offset + t. The first `rotary_dim` channels of every head rotate, as
/// pairs (2i, 2i+1) when interleaved, else (i, i + rotary_dim/2), by angle
/// float(position) * inv_freq[i] (rotary_dim/2 device values), with cos and sin times `factor`.
cudaError_t rope_inplace(float* x, const float* inv_freq, float factor, std::int64_t rows, std::int64_t row_width,
                         std::int64_t head_dim, std::int64_t rotary_dim, bool interleaved, std::int64_t offset,
                         cudaStream_t s);

// ---- attention.cu ----

/// Element types of keys and values (KV caches may be stored at half width).
enum class kv_type : int { f32, bf16, f16 };
/// Largest head widths the attention kernel takes (ops/attention.cpp leaves wider ones to
/// the CPU): queries are staged in shared memory, a warp holds v_head_dim accumulators.
inline constexpr std::int64_t attention_max_head_dim = 1024;
inline constexpr std::int64_t attention_max_v_dim = 512;

/// One attention call, in the reference's terms (backends/cpu/ref/attention.cpp): query row t
/// at position pos_offset + t sees the keys visible_keys gives it; key s of kv head g is
/// k[(s - key_base) * k_stride + g * head_dim ...] (only rows key_base.. are on the device).
struct attention_args {
  const float* q = nullptr;
  std::int64_t q_stride = 0;
  const void* k = nullptr;
  kv_type k_type = kv_type::f32;
  std::int64_t k_stride = 0;
  const void* v = nullptr;
  kv_type v_type = kv_type::f32;
  std::int64_t v_stride = 0;
  std::int64_t key_base = 0;     ///< the first key row held at k and v
  std::int64_t keys = 0;         ///< S, the keys the op was given (visibility is clipped to it)
  const float* bias = nullptr;   ///< [T, S], or [heads, T, S] when bias_per_head; nullable
  bool bias_per_head = false;
  const float* slopes = nullptr; ///< ALiBi slope per head; nullable (none)
  float* out = nullptr;
  std::int64_t out_stride = 0;
  std::int64_t rows = 0, heads = 0, kv_heads = 0, head_dim = 0, v_head_dim = 0;
  std::int64_t pos_offset = 0;
  float scale = 1.0f;
  bool causal = true;
  bool has_window = false;
  std::int64_t window = 0;
  bool has_softcap = false;
  float softcap = 0.0f;
  int splits = 1;                ///< chunks of the launch (>= 1): the most any row's keys take
  int row_split_cap = 1;         ///< the most chunks one row's keys take (1..splits)
};

/// Fewest keys worth a chunk of their own. A row seeing n keys is split into
/// min(row_split_cap, max(1, ceil(n / attention_chunk_keys))) chunks, from its own key count
/// alone: what else is in the launch changes neither its chunks nor its bits.
inline constexpr std::int64_t attention_chunk_keys = 64;

/// Floats of device scratch attention() needs for its chunks' partial results (0 for one chunk).
std::size_t attention_partial_floats(const attention_args& a);
/// out = attention as the reference computes it, in f32 (scores, running softmax and sums in
/// f32 where the reference uses double: results agree to f32 rounding). `partial` holds
/// attention_partial_floats(a) floats.
cudaError_t attention(const attention_args& a, float* partial, cudaStream_t s);

// ---- reduce.cu ----

/// Index (as f32) of each row's largest value; ties go to the smallest index; NaN counts
/// as larger than any number (the first NaN wins), as in PyTorch and the CPU reference.
cudaError_t argmax_rows(const float* x, float* out, std::int64_t rows, std::int64_t cols, cudaStream_t s);

// ---- matmul.cu ----

/// Weight element types the matmul and embedding kernels read in place.
enum class weight_type : int { f32, bf16, f16 };

/// dst[i] = float(src[i]) for n elements.
cudaError_t widen(const void* src, weight_type t, std::int64_t n, float* dst, cudaStream_t s);

/// Products of up to this many rows (decode steps, batched decode, verify passes) use
/// matmul_few_rows, for every weight type: each row's sums are computed the same way whatever
/// the number of rows, so a row gets the same bits alone, batched or verified, and keeps its
/// f32 activations (docs/decisions.md, "A row is the same bits alone, batched or verified").
/// More rows go to cuBLAS (ops/matmul.cpp).
inline constexpr std::int64_t few_rows_max = 32;
/// out[m, n] = sum_k a[m, k] * w(k, n) for m < rows <= few_rows_max, with w [k, n] stored
/// as [K, N], or as [N, K] when trans_b; weights read in place (16-byte loads where rows of w
/// and a are aligned), products and sums in f32, in an order that depends on neither `rows`
/// nor the alignment. One launch per 16 rows: each reads the weight once.
cudaError_t matmul_few_rows(const float* a, const void* w, weight_type t, bool trans_b, std::int64_t rows,
                            std::int64_t k, std::int64_t n, float* out, cudaStream_t s);

/// out[i] = the bf16 bits of x[i], rounded to nearest even (NaN stays NaN), for n values: the
/// activations of a many-row product of bf16 weights (docs/decisions.md, "bf16 weights in a
/// prefill meet bf16 activations").
cudaError_t round_to_bf16(const float* x, std::int64_t n, std::uint16_t* out, cudaStream_t s);

/// out[t, :] = table[id, :] widened to f32, id = ids[t]; an id outside [0, vocab) gives a
/// row of zeros. The caller has checked that every id is a whole number.
cudaError_t embedding(const float* ids, std::int64_t count, const void* table, weight_type t, std::int64_t vocab,
                      std::int64_t cols, float* out, cudaStream_t s);

}  // namespace mpakt::cuda::k
