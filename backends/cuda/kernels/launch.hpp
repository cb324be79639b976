#pragma once
/// Launchers of the device kernels (kernels/*.cu), in plain C++ with raw device pointers.
///
/// Every launcher queues its work on `s` and returns the launch error (cudaGetLastError),
/// cudaSuccess when there is nothing to do (a zero count). Pointers are device memory;
/// counts are elements. Tensors are row-major; "rows" fold every leading dimension.
/// Callers (ops/*.cpp) turn a failure into an error naming the op.

#include <cuda_runtime_api.h>

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

// ---- reduce.cu ----

/// Index (as f32) of each row's largest value; ties go to the smallest index; NaN counts
/// as larger than any number (the first NaN wins), as in PyTorch and the CPU reference.
cudaError_t argmax_rows(const float* x, float* out, std::int64_t rows, std::int64_t cols, cudaStream_t s);

// ---- matmul.cu ----

/// Weight element types the matmul and embedding kernels read in place.
enum class weight_type : int { f32, bf16, f16 };

/// dst[i] = float(src[i]) for n elements.
cudaError_t widen(const void* src, weight_type t, std::int64_t n, float* dst, cudaStream_t s);

/// Rows with fewer than this many rows (a decode step) use matmul_few_rows.
inline constexpr std::int64_t few_rows_max = 8;
/// out[m, n] = sum_k a[m, k] * w(k, n) for m < rows <= few_rows_max, with w [k, n] stored
/// as [K, N], or as [N, K] when trans_b; accumulated in f32, weights read in place.
cudaError_t matmul_few_rows(const float* a, const void* w, weight_type t, bool trans_b, std::int64_t rows,
                            std::int64_t k, std::int64_t n, float* out, cudaStream_t s);

/// out[t, :] = table[id, :] widened to f32, id = ids[t]; an id outside [0, vocab) gives a
/// row of zeros. The caller has checked that every id is a whole number.
cudaError_t embedding(const float* ids, std::int64_t count, const void* table, weight_type t, std::int64_t vocab,
                      std::int64_t cols, float* out, cudaStream_t s);

}  // namespace mpakt::cuda::k
