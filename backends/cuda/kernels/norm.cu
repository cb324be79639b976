// Row-wise normalisations: softmax over the last dimension and (grouped) RMSNorm.
// One block per row (or group), in a loop over rows when there are more rows than blocks.

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/launch.hpp"

namespace mpakt::cuda::k {

namespace {

__global__ void softmax_kernel(const float* x, float* out, std::int64_t rows, std::int64_t cols) {
  __shared__ float red[32];
  __shared__ double dred[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = out + r * cols;
    float m = -CUDART_INF_F;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = max_nan(m, xr[j]);
    m = block_max(m, red);
    // exp and sum in double, as the reference: the row is read from L2 anyway.
    const double md = m;
    double sum = 0.0;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += exp(double(xr[j]) - md);
    sum = block_sum(sum, dred);
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = float(exp(double(xr[j]) - md) / sum);
  }
}

__global__ void rmsnorm_kernel(const float* x, const float* gamma, float* out, std::int64_t groups, std::int64_t group,
                               double eps, double weight_offset) {
  __shared__ double red[32];
  for (std::int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const float* xg = x + g * group;
    float* yg = out + g * group;
    // Sum of squares in double: the op is memory-bound, so this costs nothing visible.
    double ss = 0.0;
    for (std::int64_t j = threadIdx.x; j < group; j += blockDim.x) ss += double(xg[j]) * double(xg[j]);
    ss = block_sum(ss, red);
    const double inv = 1.0 / sqrt(ss / double(group) + eps);
    for (std::int64_t j = threadIdx.x; j < group; j += blockDim.x)
      yg[j] = float(__dmul_rn(__dmul_rn(double(xg[j]), inv), double(gamma[j]) + weight_offset));
  }
}

}  // namespace

cudaError_t softmax_rows(const float* x, float* out, std::int64_t rows, std::int64_t cols, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  softmax_kernel<<<row_blocks(rows), row_threads(cols), 0, s>>>(x, out, rows, cols);
  return cudaGetLastError();
}

cudaError_t rmsnorm_groups(const float* x, const float* gamma, float* out, std::int64_t groups, std::int64_t group,
                           double eps, double weight_offset, cudaStream_t s) {
  if (groups <= 0 || group <= 0) return cudaSuccess;
  rmsnorm_kernel<<<row_blocks(groups), row_threads(group), 0, s>>>(x, gamma, out, groups, group, eps, weight_offset);
  return cudaGetLastError();
}

}  // namespace mpakt::cuda::k
