#pragma once
/// Device helpers shared by the kernels: launch geometry and block reductions.

#include <cuda_runtime.h>
#include <math_constants.h>

#include <cstdint>

namespace mpakt::cuda::k {

/// Threads per block for the flat (one thread per element) kernels.
inline constexpr int flat_threads = 256;

/// Blocks for a grid-stride loop over n elements: enough to fill the GPU, never more than
/// the hardware allows (kernels loop when n is larger).
inline unsigned flat_blocks(std::int64_t n) {
  const std::int64_t want = (n + flat_threads - 1) / flat_threads;
  constexpr std::int64_t cap = std::int64_t(1) << 20;
  return unsigned(want < cap ? want : cap);
}

/// Blocks for a one-block-per-row loop (kernels loop over rows past the cap).
inline unsigned row_blocks(std::int64_t rows) {
  constexpr std::int64_t cap = std::int64_t(1) << 20;
  return unsigned(rows < cap ? rows : cap);
}

/// Threads per block for one-block-per-row kernels: a multiple of 32 no larger than the row
/// needs, between 32 and 256.
inline int row_threads(std::int64_t cols) {
  std::int64_t t = (cols + 31) / 32 * 32;
  if (t < 32) t = 32;
  if (t > 256) t = 256;
  return int(t);
}

__device__ inline std::int64_t global_thread() { return std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ inline std::int64_t grid_threads() { return std::int64_t(gridDim.x) * blockDim.x; }

template <class T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// max that propagates NaN (fmaxf drops it), as the CPU reference's row maximum does.
__device__ inline float max_nan(float a, float b) { return (a > b || isnan(a)) ? a : b; }

__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every
/// thread. `shared` holds 32 values. Every thread of the block must call it.
template <class T>
__device__ inline T block_sum(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = lane < warps ? shared[lane] : T(0);
  return warp_sum(r);
}

/// Maximum over the block (NaN wins); same contract as block_sum.
__device__ inline float block_max(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = lane < warps ? shared[lane] : -CUDART_INF_F;
  return warp_max(r);
}

}  // namespace mpakt::cuda::k
