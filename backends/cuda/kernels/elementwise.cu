// Elementwise kernels: add/sub/mul with broadcast, scale, silu, gelu (tanh), swiglu.
// One thread per element in a grid-stride loop; all memory-bound. add/sub/mul in f32 give
// the same bits as the reference's double-then-round; the rest compute in double.

#include "backends/cuda/kernels/common.cuh"
#include "backends/cuda/kernels/launch.hpp"

namespace mpakt::cuda::k {

namespace {

template <binary_op Op>
__device__ inline float apply(float a, float b) {
  if constexpr (Op == binary_op::add) return a + b;
  if constexpr (Op == binary_op::sub) return a - b;
  return a * b;
}

template <binary_op Op, broadcast B>
__global__ void binary_kernel(const float* a, const float* b, float* out, std::int64_t n, std::int64_t cols) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    float bv;
    if constexpr (B == broadcast::full) bv = b[i];
    else if constexpr (B == broadcast::row) bv = b[i % cols];
    else bv = b[0];
    out[i] = apply<Op>(a[i], bv);
  }
}

template <binary_op Op>
void launch_binary(const float* a, const float* b, float* out, std::int64_t n, std::int64_t cols, broadcast layout,
                   cudaStream_t s) {
  const unsigned blocks = flat_blocks(n);
  switch (layout) {
    case broadcast::full: binary_kernel<Op, broadcast::full><<<blocks, flat_threads, 0, s>>>(a, b, out, n, cols); break;
    case broadcast::row: binary_kernel<Op, broadcast::row><<<blocks, flat_threads, 0, s>>>(a, b, out, n, cols); break;
    case broadcast::scalar: binary_kernel<Op, broadcast::scalar><<<blocks, flat_threads, 0, s>>>(a, b, out, n, cols); break;
  }
}

// Activations in double, rounded once by the caller, as the CPU reference computes them.
__device__ inline double silu(double x) { return x * (1.0 / (1.0 + exp(-x))); }

__device__ inline double gelu_tanh(double x) {
  constexpr double sqrt_2_over_pi = 0.79788456080286535588;
  return 0.5 * x * (1.0 + tanh(sqrt_2_over_pi * (x + 0.044715 * x * x * x)));
}

template <unary_op Op>
__global__ void unary_kernel(const float* x, float* out, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    if constexpr (Op == unary_op::silu) out[i] = float(silu(x[i]));
    else out[i] = float(gelu_tanh(x[i]));
  }
}

__global__ void scale_kernel(const float* x, float* out, std::int64_t n, double factor) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = float(double(x[i]) * factor);
}

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = float(silu(gate[i]) * double(up[i]));
}

}  // namespace

cudaError_t binary(binary_op op, const float* a, const float* b, float* out, std::int64_t n, std::int64_t cols,
                   broadcast b_layout, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (b_layout == broadcast::row && cols <= 0) return cudaErrorInvalidValue;
  switch (op) {
    case binary_op::add: launch_binary<binary_op::add>(a, b, out, n, cols, b_layout, s); break;
    case binary_op::sub: launch_binary<binary_op::sub>(a, b, out, n, cols, b_layout, s); break;
    case binary_op::mul: launch_binary<binary_op::mul>(a, b, out, n, cols, b_layout, s); break;
  }
  return cudaGetLastError();
}

cudaError_t unary(unary_op op, const float* x, float* out, std::int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  switch (op) {
    case unary_op::silu: unary_kernel<unary_op::silu><<<flat_blocks(n), flat_threads, 0, s>>>(x, out, n); break;
    case unary_op::gelu_tanh: unary_kernel<unary_op::gelu_tanh><<<flat_blocks(n), flat_threads, 0, s>>>(x, out, n); break;
  }
  return cudaGetLastError();
}

cudaError_t scale(const float* x, float* out, std::int64_t n, double factor, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  scale_kernel<<<flat_blocks(n), flat_threads, 0, s>>>(x, out, n, factor);
  return cudaGetLastError();
}

cudaError_t swiglu(const float* gate, const float* up, float* out, std::int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  swiglu_kernel<<<flat_blocks(n), flat_threads, 0, s>>>(gate, up, out, n);
  return cudaGetLastError();
}

}  // namespace mpakt::cuda::k
