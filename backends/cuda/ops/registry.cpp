#include "backends/cuda/ops/registry.hpp"

#include <algorithm>
#include <string>

#include "runtime/schema.hpp"

namespace mpakt::cuda {

std::span<const cuda_kernel> cuda_kernels() {
  static const std::vector<cuda_kernel> all = [] {
    std::vector<cuda_kernel> v;
    add_elementwise_kernels(v);
    add_norm_kernels(v);
    add_rope_kernels(v);
    add_matmul_kernels(v);
    add_reduce_kernels(v);
    add_attention_kernels(v);
    return v;
  }();
  return all;
}

kernel_fn select_kernel(std::string_view op, std::span<const tensor_desc> inputs, const op_params& params) {
  for (const auto& k : cuda_kernels()) {
    if (k.op != op) continue;
    if (k.accepts) return k.accepts(inputs, params) ? k.fn : nullptr;
    for (const auto& in : inputs)
      if (in.type != dtype::f32) return nullptr;
    return k.fn;
  }
  return nullptr;
}

std::vector<std::string> host_ops() {
  std::vector<std::string> out;
  for (const auto& op : schema::instance().ops()) {
    const bool has = std::any_of(cuda_kernels().begin(), cuda_kernels().end(), [&](const cuda_kernel& k) { return k.op == op.name; });
    if (!has) out.push_back(std::string(op.name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace mpakt::cuda
