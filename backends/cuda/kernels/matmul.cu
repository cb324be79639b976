// Kernels that read weights in place (f32, bf16, f16): widening, the few-rows matmul of a
// decode step, and embedding lookups. The general matmul is cuBLAS (ops/matmul.cpp).

#include <cuda_fp16.h>

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/launch.hpp"

namespace mpakt::cuda::k {

namespace {

/// bf16 as stored: the upper 16 bits of an f32.
struct bf16_bits {
  std::uint16_t bits;
};

__device__ inline float load(const float* p, std::int64_t i) { return p[i]; }
__device__ inline float load(const bf16_bits* p, std::int64_t i) {
  return __uint_as_float(unsigned(p[i].bits) << 16);
}
__device__ inline float load(const __half* p, std::int64_t i) { return __half2float(p[i]); }

/// Calls f with the weight pointer cast to its element type.
template <class F>
cudaError_t with_weight(const void* w, weight_type t, F&& f) {
  switch (t) {
    case weight_type::f32: f(static_cast<const float*>(w)); return cudaSuccess;
    case weight_type::bf16: f(static_cast<const bf16_bits*>(w)); return cudaSuccess;
    case weight_type::f16: f(static_cast<const __half*>(w)); return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

template <class W>
__global__ void widen_kernel(const W* src, std::int64_t n, float* dst) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] = load(src, i);
}

// w stored [N, K] (trans_b): one warp per output column n, lanes striding along k, so each
// warp reads its weight row contiguously. `rows` <= few_rows_max.
template <class W>
__global__ void few_rows_trans_kernel(const float* a, const W* w, std::int64_t rows, std::int64_t kd, std::int64_t nd,
                                      float* out) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = grid_threads() >> 5;
  for (std::int64_t n = global_thread() >> 5; n < nd; n += warps) {
    float acc[few_rows_max] = {};
    const W* wr = w + n * kd;
    for (std::int64_t k = lane; k < kd; k += 32) {
      const float wv = load(wr, k);
#pragma unroll
      for (int m = 0; m < few_rows_max; ++m)
        if (m < rows) acc[m] += wv * a[m * kd + k];
    }
#pragma unroll
    for (int m = 0; m < few_rows_max; ++m) {
      const float v = warp_sum(acc[m]);
      if (lane == 0 && m < rows) out[m * nd + n] = v;
    }
  }
}

// w stored [K, N]: a 32 x 8 block takes 32 columns; threadIdx.y splits k into 8 slices
// whose partial sums meet in shared memory. Consecutive threads read consecutive columns.
constexpr int nt_cols = 32, nt_slices = 8;

template <class W>
__global__ void few_rows_plain_kernel(const float* a, const W* w, std::int64_t rows, std::int64_t kd, std::int64_t nd,
                                      float* out) {
  __shared__ float part[nt_slices][few_rows_max][nt_cols];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (std::int64_t n0 = std::int64_t(blockIdx.x) * nt_cols; n0 < nd; n0 += std::int64_t(gridDim.x) * nt_cols) {
    const std::int64_t n = n0 + tx;
    float acc[few_rows_max] = {};
    if (n < nd) {
      for (std::int64_t k = ty; k < kd; k += nt_slices) {
        const float wv = load(w, k * nd + n);
#pragma unroll
        for (int m = 0; m < few_rows_max; ++m)
          if (m < rows) acc[m] += wv * a[m * kd + k];
      }
    }
#pragma unroll
    for (int m = 0; m < few_rows_max; ++m) part[ty][m][tx] = acc[m];
    __syncthreads();
    if (ty == 0 && n < nd) {
      for (int m = 0; m < rows; ++m) {
        float v = 0.0f;
#pragma unroll
        for (int y = 0; y < nt_slices; ++y) v += part[y][m][tx];
        out[m * nd + n] = v;
      }
    }
    __syncthreads();
  }
}

template <class W>
__global__ void embedding_kernel(const float* ids, std::int64_t count, const W* table, std::int64_t vocab,
                                 std::int64_t cols, float* out) {
  const std::int64_t n = count * cols;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const std::int64_t t = i / cols, c = i % cols;
    const float id = ids[t];
    // The comparison is false for NaN, so NaN too gives zeros.
    const bool inside = id >= 0.0f && id < float(vocab);
    float v = 0.0f;
    if (inside) {
      const std::int64_t row = std::int64_t(id);
      if (row < vocab) v = load(table, row * cols + c);
    }
    out[i] = v;
  }
}

}  // namespace

cudaError_t widen(const void* src, weight_type t, std::int64_t n, float* dst, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  cudaError_t e = with_weight(src, t, [&](auto* w) { widen_kernel<<<flat_blocks(n), flat_threads, 0, s>>>(w, n, dst); });
  return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t matmul_few_rows(const float* a, const void* w, weight_type t, bool trans_b, std::int64_t rows,
                            std::int64_t k, std::int64_t n, float* out, cudaStream_t s) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  if (rows > few_rows_max || k < 0) return cudaErrorInvalidValue;
  cudaError_t e;
  if (trans_b) {
    constexpr int threads = 256;  // 8 warps, one column each
    const std::int64_t want = (n + threads / 32 - 1) / (threads / 32);
    const unsigned blocks = unsigned(want < (1 << 20) ? want : (1 << 20));
    e = with_weight(w, t, [&](auto* wp) {
      few_rows_trans_kernel<<<blocks, threads, 0, s>>>(a, wp, rows, k, n, out);
    });
  } else {
    const std::int64_t want = (n + nt_cols - 1) / nt_cols;
    const unsigned blocks = unsigned(want < (1 << 20) ? want : (1 << 20));
    e = with_weight(w, t, [&](auto* wp) {
      few_rows_plain_kernel<<<blocks, dim3(nt_cols, nt_slices), 0, s>>>(a, wp, rows, k, n, out);
    });
  }
  return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t embedding(const float* ids, std::int64_t count, const void* table, weight_type t, std::int64_t vocab,
                      std::int64_t cols, float* out, cudaStream_t s) {
  const std::int64_t n = count * cols;
  if (n <= 0) return cudaSuccess;
  cudaError_t e = with_weight(table, t, [&](auto* tp) {
    embedding_kernel<<<flat_blocks(n), flat_threads, 0, s>>>(ids, count, tp, vocab, cols, out);
  });
  return e != cudaSuccess ? e : cudaGetLastError();
}

}  // namespace mpakt::cuda::k
