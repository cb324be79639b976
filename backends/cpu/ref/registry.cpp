#include "backends/cpu/ref/families.hpp"

namespace mpakt {

std::span<const cpu_kernel> cpu_reference_kernels() {
  static const std::vector<cpu_kernel> all = [] {
    std::vector<cpu_kernel> v;
    cpu_ref::add_elementwise_kernels(v);
    cpu_ref::add_norm_kernels(v);
    cpu_ref::add_reduce_kernels(v);
    cpu_ref::add_matmul_kernels(v);
    cpu_ref::add_layout_kernels(v);
    cpu_ref::add_rope_kernels(v);
    cpu_ref::add_attention_kernels(v);
    cpu_ref::add_moe_kernels(v);
    cpu_ref::add_conv_kernels(v);
    cpu_ref::add_sample_kernels(v);
    return v;
  }();
  return all;
}

}  // namespace mpakt
