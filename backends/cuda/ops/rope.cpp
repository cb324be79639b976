/// CUDA kernel_fn of rope. The inverse frequencies and the factor on cos and sin come from
/// ops::rope_frequencies, the function the CPU reference uses, so every variant (half-split
/// or interleaved, rotaryDim, scaling, invFreq, attentionFactor) rotates by the same float32
/// angles on both backends. Shape rule: runtime/ops/rope.cpp.

#include <vector>

#include "backends/cuda/kernels/launch.hpp"
#include "backends/cuda/ops/call.hpp"
#include "backends/cuda/ops/registry.hpp"
#include "runtime/ops/rope_params.hpp"

namespace mpakt::cuda {

namespace {

status rope_k(const kernel_call& c) {
  const auto& p = params_of<ops::rope_params>(c);
  const tensor& x = *c.inputs[0];
  if (x.numel() == 0) return ok_status();
  const std::int64_t rows = x.rows(), half = p.rotary_dim / 2;
  const auto offset = static_cast<std::int64_t>(p.offset);  // check_rope: a whole number

  // rotaryDim/2 frequencies, computed on the host (a few hundred floats) per call.
  std::vector<float> local;
  float* inv = nullptr;
  if (c.scratch) {
    inv = c.scratch->floats(std::size_t(half));
  } else {
    local.resize(std::size_t(half));
    inv = local.data();
  }
  const float factor = float(ops::rope_frequencies(p, offset + rows, inv));

  MPAKT_CUDA_ASSIGN(auto call, device_call::begin("rope", c));
  MPAKT_CUDA_ASSIGN(const float* dx, call.input_f32(slot_in0, c, 0));
  MPAKT_CUDA_ASSIGN(const float* dinv, call.upload_floats(slot_in1, inv, std::size_t(half)));
  MPAKT_CUDA_ASSIGN(float* dy, call.output_f32(c));
  // The input may be a value the device keeps for other steps: rotate a copy.
  MPAKT_TRY(call.check(cudaMemcpyAsync(dy, dx, x.nbytes(), cudaMemcpyDeviceToDevice, call.stream()), "cudaMemcpyAsync"));
  MPAKT_TRY(call.check(k::rope_inplace(dy, dinv, factor, rows, x.cols(), p.head_dim, p.rotary_dim, p.interleaved,
                                       offset, call.stream()),
                       "kernel launch"));
  return call.finish(c, dy);
}

bool accepts_rope(std::span<const tensor_desc> inputs, const op_params& params) {
  const auto& p = static_cast<const ops::rope_params&>(params);
  return inputs[0].type == dtype::f32 && p.head_dim > 0 && p.rotary_dim >= 0 && p.rotary_dim <= p.head_dim;
}

}  // namespace

void add_rope_kernels(std::vector<cuda_kernel>& out) { out.push_back({"rope", &rope_k, &accepts_rope}); }

}  // namespace mpakt::cuda
