/// CUDA kernel_fns of rmsnorm (eps, weightOffset, groupSize) and softmax over the last
/// dimension. Shape rules: runtime/ops/norm.cpp.

#include "backends/cuda/kernels/launch.hpp"
#include "backends/cuda/ops/call.hpp"
#include "backends/cuda/ops/registry.hpp"
#include "runtime/ops/norm_params.hpp"

namespace mpakt::cuda {

namespace {

status rmsnorm_k(const kernel_call& c) {
  const auto& p = params_of<ops::rmsnorm_params>(c);
  const tensor& x = *c.inputs[0];
  const std::int64_t group = p.group_size > 0 ? p.group_size : x.cols();
  if (x.numel() == 0 || group == 0) return ok_status();
  MPAKT_CUDA_ASSIGN(auto call, device_call::begin("rmsnorm", c));
  MPAKT_CUDA_ASSIGN(const float* dx, call.input_f32(slot_in0, c, 0));
  MPAKT_CUDA_ASSIGN(const float* dg, call.input_f32(slot_in1, c, 1));  // (a weight: kept on the device)
  MPAKT_CUDA_ASSIGN(float* dy, call.output_f32(c));
  MPAKT_TRY(call.check(k::rmsnorm_groups(dx, dg, dy, x.numel() / group, group, p.eps, p.weight_offset, call.stream()),
                       "kernel launch"));
  return call.finish(c, dy);
}

status softmax_k(const kernel_call& c) {
  const tensor& x = *c.inputs[0];
  if (x.numel() == 0) return ok_status();
  MPAKT_CUDA_ASSIGN(auto call, device_call::begin("softmax", c));
  MPAKT_CUDA_ASSIGN(const float* dx, call.input_f32(slot_in0, c, 0));
  MPAKT_CUDA_ASSIGN(float* dy, call.output_f32(c));
  MPAKT_TRY(call.check(k::softmax_rows(dx, dy, x.rows(), x.cols(), call.stream()), "kernel launch"));
  return call.finish(c, dy);
}

}  // namespace

void add_norm_kernels(std::vector<cuda_kernel>& out) {
  out.push_back({"rmsnorm", &rmsnorm_k});
  out.push_back({"softmax", &softmax_k});
}

}  // namespace mpakt::cuda
