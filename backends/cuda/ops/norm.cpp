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
  MPAKT_CUDA_ASSIGN(auto call, device_call::begin("rmsnorm"));
  MPAKT_CUDA_ASSIGN(float* dx, call.upload_f32(slot_in0, x));
  MPAKT_CUDA_ASSIGN(const float* dg, call.upload_f32(slot_in1, *c.inputs[1]));
  MPAKT_TRY(call.check(k::rmsnorm_groups(dx, dg, dx, x.numel() / group, group, p.eps, p.weight_offset, call.stream()),
                       "kernel launch"));
  return call.download(*c.output, dx);
}

status softmax_k(const kernel_call& c) {
  const tensor& x = *c.inputs[0];
  if (x.numel() == 0) return ok_status();
  MPAKT_CUDA_ASSIGN(auto call, device_call::begin("softmax"));
  MPAKT_CUDA_ASSIGN(float* dx, call.upload_f32(slot_in0, x));
  MPAKT_TRY(call.check(k::softmax_rows(dx, dx, x.rows(), x.cols(), call.stream()), "kernel launch"));
  return call.download(*c.output, dx);
}

}  // namespace

void add_norm_kernels(std::vector<cuda_kernel>& out) {
  out.push_back({"rmsnorm", &rmsnorm_k});
  out.push_back({"softmax", &softmax_k});
}

}  // namespace mpakt::cuda
