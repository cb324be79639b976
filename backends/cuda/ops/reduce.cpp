/// CUDA kernel_fn of argmax over the last dimension. Shape rule: runtime/ops/reduce.cpp.

#include "backends/cuda/kernels/launch.hpp"
#include "backends/cuda/ops/call.hpp"
#include "backends/cuda/ops/registry.hpp"

namespace mpakt::cuda {

namespace {

status argmax_k(const kernel_call& c) {
  const tensor& x = *c.inputs[0];
  tensor& out = *c.output;
  const std::int64_t rows = x.rows(), cols = x.cols();
  if (out.numel() == 0) return ok_status();
  MPAKT_CUDA_ASSIGN(auto call, device_call::begin("argmax", c));
  MPAKT_CUDA_ASSIGN(float* dy, call.output_f32(c));
  if (cols == 0) {  // empty rows: index 0, as the reference
    MPAKT_TRY(call.check(cudaMemsetAsync(dy, 0, out.nbytes(), call.stream()), "cudaMemsetAsync"));
  } else {
    MPAKT_CUDA_ASSIGN(const float* dx, call.input_f32(slot_in0, c, 0));
    MPAKT_TRY(call.check(k::argmax_rows(dx, dy, rows, cols, call.stream()), "kernel launch"));
  }
  return call.finish(c, dy);
}

}  // namespace

void add_reduce_kernels(std::vector<cuda_kernel>& out) { out.push_back({"argmax", &argmax_k}); }

}  // namespace mpakt::cuda
