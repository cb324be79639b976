#pragma once
/// The CUDA kernels, one entry per op they cover (families in ops/<family>.cpp).
///
/// Adding a CUDA kernel for an op: a device kernel and its launcher (kernels/<family>.cu,
/// kernels/launch.hpp), a kernel_fn wrapper with its `accepts` rule here in ops/, and a row
/// in test/cuda/cuda_backend_test.cpp comparing it with the CPU reference. An op with no
/// entry, or whose `accepts` refuses a step, runs the CPU reference kernel instead.

#include <span>
#include <vector>

#include "runtime/op.hpp"

namespace mpakt::cuda {

struct cuda_kernel {
  std::string_view op;
  kernel_fn fn = nullptr;
  /// Whether `fn` handles these inputs and params. nullptr = any step whose inputs are all
  /// f32 (the shape rule has checked the shapes). A non-null predicate checks dtypes itself.
  bool (*accepts)(std::span<const tensor_desc> inputs, const op_params& params) = nullptr;
};

/// Every CUDA kernel.
std::span<const cuda_kernel> cuda_kernels();

/// The CUDA kernel for this step, or nullptr (the CPU reference runs it): what
/// cuda_backend::kernel answers. Needs no device, so tests check it anywhere.
kernel_fn select_kernel(std::string_view op, std::span<const tensor_desc> inputs, const op_params& params);

/// The catalogue's ops with no CUDA kernel at all, sorted: every step of them runs on the CPU
/// reference kernels (cuda_backend::host_ops). Needs no device.
std::vector<std::string> host_ops();

void add_elementwise_kernels(std::vector<cuda_kernel>& out);  // add sub mul scale silu gelu swiglu
void add_norm_kernels(std::vector<cuda_kernel>& out);         // rmsnorm softmax
void add_rope_kernels(std::vector<cuda_kernel>& out);         // rope
void add_matmul_kernels(std::vector<cuda_kernel>& out);       // matmul linear embedding
void add_reduce_kernels(std::vector<cuda_kernel>& out);       // argmax
void add_attention_kernels(std::vector<cuda_kernel>& out);    // attention

}  // namespace mpakt::cuda
