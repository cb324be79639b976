// argmax over the last dimension: one block per row.

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/launch.hpp"

namespace mpakt::cuda::k {

namespace {

/// A candidate: value and index; idx < 0 means "none yet".
struct best_of {
  float v;
  std::int64_t idx;
};

/// Whether b beats a: larger, or equal with a smaller index (ties go to the lowest
/// index). NaN is larger than any number, and the first NaN wins among NaNs.
__device__ inline bool beats(const best_of& b, const best_of& a) {
  if (b.idx < 0) return false;
  if (a.idx < 0) return true;
  const bool bn = isnan(b.v), an = isnan(a.v);
  if (bn || an) return bn && (!an || b.idx < a.idx);
  return b.v > a.v || (b.v == a.v && b.idx < a.idx);
}

__device__ inline best_of warp_best(best_of c) {
  for (int o = 16; o > 0; o >>= 1) {
    best_of other{__shfl_xor_sync(0xffffffffu, c.v, o), __shfl_xor_sync(0xffffffffu, c.idx, o)};
    if (beats(other, c)) c = other;
  }
  return c;
}

__global__ void argmax_kernel(const float* x, float* out, std::int64_t rows, std::int64_t cols) {
  __shared__ float sv[32];
  __shared__ std::int64_t si[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    // Each thread scans its indices in increasing order, so beating strictly keeps the first.
    best_of c{0.0f, -1};
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const best_of here{xr[j], j};
      if (beats(here, c)) c = here;
    }
    c = warp_best(c);
    __syncthreads();  // the previous row's results may still be read
    if (lane == 0) {
      sv[warp] = c.v;
      si[warp] = c.idx;
    }
    __syncthreads();
    if (warp == 0) {
      best_of w = lane < warps ? best_of{sv[lane], si[lane]} : best_of{0.0f, -1};
      w = warp_best(w);
      if (lane == 0) out[r] = float(w.idx < 0 ? 0 : w.idx);
    }
  }
}

}  // namespace

cudaError_t argmax_rows(const float* x, float* out, std::int64_t rows, std::int64_t cols, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if (cols <= 0) return cudaErrorInvalidValue;
  argmax_kernel<<<row_blocks(rows), row_threads(cols), 0, s>>>(x, out, rows, cols);
  return cudaGetLastError();
}

}  // namespace mpakt::cuda::k
