/// CUDA kernel_fns of the elementwise ops: add, sub, mul (b broadcast as a row or a single
/// value), scale, silu, gelu (tanh) and swiglu. Shape rules: runtime/ops/elementwise.cpp.

#include "backends/cuda/kernels/launch.hpp"
#include "backends/cuda/ops/call.hpp"
#include "backends/cuda/ops/registry.hpp"
#include "runtime/ops/elementwise_params.hpp"

namespace mpakt::cuda {

namespace {

constexpr std::string_view binary_name(k::binary_op op) {
  switch (op) {
    case k::binary_op::add: return "add";
    case k::binary_op::sub: return "sub";
    case k::binary_op::mul: return "mul";
  }
  return "?";
}

template <k::binary_op Op>
status binary_k(const kernel_call& c) {
  const tensor& a = *c.inputs[0];
  const tensor& b = *c.inputs[1];
  const std::int64_t n = a.numel();
  if (n == 0) return ok_status();
  // Same order of tests as the reference: the shape rule allowed nothing else.
  const k::broadcast layout = b.shape() == a.shape() ? k::broadcast::full
                              : b.numel() == 1       ? k::broadcast::scalar
                                                     : k::broadcast::row;
  MPAKT_CUDA_ASSIGN(auto call, device_call::begin(binary_name(Op), c));
  MPAKT_CUDA_ASSIGN(const float* da, call.input_f32(slot_in0, c, 0));
  MPAKT_CUDA_ASSIGN(const float* db, call.input_f32(slot_in1, c, 1));
  MPAKT_CUDA_ASSIGN(float* dy, call.output_f32(c));
  MPAKT_TRY(call.check(k::binary(Op, da, db, dy, n, a.cols(), layout, call.stream()), "kernel launch"));
  return call.finish(c, dy);
}

/// One f32 input, one f32 output of the same size. (The input may be a value the device
/// keeps for later steps too: it is never written.)
template <class Launch>
status unary_k(const kernel_call& c, std::string_view op, Launch launch) {
  const tensor& x = *c.inputs[0];
  const std::int64_t n = x.numel();
  if (n == 0) return ok_status();
  MPAKT_CUDA_ASSIGN(auto call, device_call::begin(op, c));
  MPAKT_CUDA_ASSIGN(const float* dx, call.input_f32(slot_in0, c, 0));
  MPAKT_CUDA_ASSIGN(float* dy, call.output_f32(c));
  MPAKT_TRY(call.check(launch(dx, dy, n, call.stream()), "kernel launch"));
  return call.finish(c, dy);
}

status scale_k(const kernel_call& c) {
  const double factor = params_of<ops::scale_params>(c).factor;
  return unary_k(c, "scale", [factor](const float* x, float* y, std::int64_t n, cudaStream_t s) { return k::scale(x, y, n, factor, s); });
}

status silu_k(const kernel_call& c) {
  return unary_k(c, "silu", [](const float* x, float* y, std::int64_t n, cudaStream_t s) { return k::unary(k::unary_op::silu, x, y, n, s); });
}

status gelu_k(const kernel_call& c) {
  return unary_k(c, "gelu",
                 [](const float* x, float* y, std::int64_t n, cudaStream_t s) {
                   return k::unary(k::unary_op::gelu_tanh, x, y, n, s);
                 });
}

status swiglu_k(const kernel_call& c) {
  const tensor& gate = *c.inputs[0];
  const std::int64_t n = gate.numel();
  if (n == 0) return ok_status();
  MPAKT_CUDA_ASSIGN(auto call, device_call::begin("swiglu", c));
  MPAKT_CUDA_ASSIGN(const float* dg, call.input_f32(slot_in0, c, 0));
  MPAKT_CUDA_ASSIGN(const float* du, call.input_f32(slot_in1, c, 1));
  MPAKT_CUDA_ASSIGN(float* dy, call.output_f32(c));
  MPAKT_TRY(call.check(k::swiglu(dg, du, dy, n, call.stream()), "kernel launch"));
  return call.finish(c, dy);
}

}  // namespace

void add_elementwise_kernels(std::vector<cuda_kernel>& out) {
  out.push_back({"add", &binary_k<k::binary_op::add>});
  out.push_back({"sub", &binary_k<k::binary_op::sub>});
  out.push_back({"mul", &binary_k<k::binary_op::mul>});
  out.push_back({"scale", &scale_k});
  out.push_back({"silu", &silu_k});
  out.push_back({"gelu", &gelu_k});
  out.push_back({"swiglu", &swiglu_k});
}

}  // namespace mpakt::cuda
