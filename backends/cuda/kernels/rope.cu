// Rotary position embeddings, every variant: the frequencies and the factor on cos and sin
// come from ops::rope_frequencies on the host (the code every backend shares), so this
// kernel only rotates. One thread per rotated channel pair, in place.
//
// Angles follow the CPU reference exactly: angle = float(pos) * inv_freq[i] in float32,
// cos and sin evaluated in double, rounded to float32, then multiplied by the factor.

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/launch.hpp"

namespace mpakt::cuda::k {

namespace {

__global__ void rope_kernel(float* x, const float* inv_freq, float factor, std::int64_t rows, std::int64_t row_width,
                            std::int64_t head_dim, std::int64_t rotary_dim, bool interleaved, std::int64_t offset) {
  const std::int64_t half = rotary_dim / 2;
  const std::int64_t heads = row_width / head_dim;
  const std::int64_t pairs = rows * heads * half;
  for (std::int64_t p = global_thread(); p < pairs; p += grid_threads()) {
    const std::int64_t i = p % half;
    const std::int64_t h = (p / half) % heads;
    const std::int64_t t = p / (half * heads);
    const float angle = __fmul_rn(float(offset + t), inv_freq[i]);
    const float c = float(cos(double(angle))) * factor;
    const float s = float(sin(double(angle))) * factor;
    float* head = x + t * row_width + h * head_dim;
    const std::int64_t ia = interleaved ? 2 * i : i;
    const std::int64_t ib = interleaved ? 2 * i + 1 : i + half;
    const double a = head[ia], b = head[ib];
    // __dmul_rn / __dadd_rn: no fused multiply-add, so the rounding matches the reference.
    head[ia] = float(__dadd_rn(__dmul_rn(a, c), -__dmul_rn(b, s)));
    head[ib] = float(__dadd_rn(__dmul_rn(b, c), __dmul_rn(a, s)));
  }
}

}  // namespace

cudaError_t rope_inplace(float* x, const float* inv_freq, float factor, std::int64_t rows, std::int64_t row_width,
                         std::int64_t head_dim, std::int64_t rotary_dim, bool interleaved, std::int64_t offset,
                         cudaStream_t s) {
  if (head_dim <= 0 || rotary_dim < 0 || rotary_dim > head_dim || row_width % head_dim != 0)
    return cudaErrorInvalidValue;
  const std::int64_t pairs = rows * (row_width / head_dim) * (rotary_dim / 2);
  if (pairs <= 0) return cudaSuccess;
  rope_kernel<<<flat_blocks(pairs), flat_threads, 0, s>>>(x, inv_freq, factor, rows, row_width, head_dim, rotary_dim,
                                                         interleaved, offset);
  return cudaGetLastError();
}

}  // namespace mpakt::cuda::k
